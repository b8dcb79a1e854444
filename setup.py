"""Ships `pcompile-startup.pth` (pcompile/startup.py says why) beside the package, in the wheel and
in an editable install; everything else about the build is in pyproject.toml."""
from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.editable_wheel import editable_wheel
except ImportError:  # setuptools < 64 installs editable through `develop`: no hook there
    editable_wheel = None

PTH = "pcompile-startup.pth"


class build_py_with_pth(build_py):
    """A wheel's purelib root is `build_lib`: the file lands in site-packages."""

    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            self.copy_file(PTH, str(Path(self.build_lib, PTH)), preserve_mode=False)


class editable_wheel_with_pth(editable_wheel or object):  # type: ignore[misc]
    """An editable wheel holds only setuptools' own `.pth` and finder: add ours to it."""

    def _create_wheel_file(self, bdist_wheel):  # type: ignore[no-untyped-def]
        wheel_path = super()._create_wheel_file(bdist_wheel)
        try:
            try:
                from wheel.wheelfile import WheelFile  # what setuptools itself uses here
            except ImportError:
                from setuptools._vendor.wheel.wheelfile import WheelFile
            with WheelFile(wheel_path, "a") as wheel:
                wheel.write(PTH, PTH)
        except Exception as exc:  # the install still works; only `import torch` is not sped up
            sys.stderr.write(f"pcompile: {PTH} not added to the editable install ({exc}); "
                             "tests/test_startup_hook.py will say so\n")
        return wheel_path


commands: dict[str, type] = {"build_py": build_py_with_pth}
if editable_wheel is not None:
    commands["editable_wheel"] = editable_wheel_with_pth
setup(cmdclass=commands)
