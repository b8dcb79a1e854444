"""compat/program_module_globals.py against the installed torch: a module Dynamo's bytecode loads
through a global it installed is recorded in the program (the restart that used to raise NameError:
`test_programs.py::test_a_module_the_bytecode_loads_through_a_global_is_installed_with_the_program`)."""
from __future__ import annotations

import collections
import types

import pytest

torch = pytest.importorskip("torch")

from pcompile.compat import program_module_globals as compat  # noqa: E402


def test_check_passes_on_this_torch() -> None:
    compat.check()


class _Package:
    def __init__(self) -> None:
        self.imports: dict[str, str] = {}

    def add_import_source(self, alias: str, name: str) -> None:
        self.imports[alias] = name


def test_an_importable_module_is_recorded_and_another_bypasses_the_frame() -> None:
    bypassed: list[str] = []
    output = types.SimpleNamespace(package=_Package(), bypass_package=bypassed.append)
    compat.record(output, "___module_collections_1_c0", collections)
    assert output.package.imports == {"___module_collections_1_c0": "collections"} and not bypassed
    compat.record(output, "___module_fake_2_c0", types.ModuleType("not_importable_here"))
    assert len(bypassed) == 1 and "not_importable_here" in bypassed[0]
    compat.record(output, "collections", collections)  # the frame's own global: nothing to record
    compat.record(types.SimpleNamespace(package=None), "___module_collections_1_c0", collections)
    assert len(output.package.imports) == 1


def test_install_and_uninstall_leave_torch_as_it_was() -> None:
    from torch._dynamo import codegen

    before = codegen.PyCodegen.create_load_python_module
    compat.install()
    try:
        assert codegen.PyCodegen.create_load_python_module is not before
    finally:
        compat.uninstall()
    assert codegen.PyCodegen.create_load_python_module is before
