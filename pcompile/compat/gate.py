"""Version gate: pcompile hooks only run on torch/triton versions whose private APIs were checked.

On anything else pcompile says so once (one `PcompileFallbackWarning`) and every compile runs
stock Inductor: a new torch never crashes a job and never gets a half-understood hook. The
supported ranges are the versions the compat modules were read against (see compat/*.py).
`PCOMPILE_PRETEND_TORCH_VERSION` / `PCOMPILE_PRETEND_TRITON_VERSION` make the gate see another
version (tests use them to exercise the fallback without installing another torch).

It sits in compat, the ground floor, because its ranges are what the compat modules were read
against, and because everything above it (hooks, warm, pool) asks it first. It touches no private
name itself. Its warning goes through pcompile/warn.py, the one `warn_once`.
"""
from __future__ import annotations

import logging
import re

from pcompile.errors import PcompileFallbackWarning  # noqa: F401  (what the gate warns with)
from pcompile.warn import warn_once

from pcompile.settings import PRETEND_TORCH_VERSION, PRETEND_TRITON_VERSION

log = logging.getLogger("pcompile.inductor")

#: The releases the ranges below were read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0", "triton": "3.6.0, 3.8.0, 3.9.0"}

#: Inclusive (major, minor) ranges.
TORCH_RANGE = ((2, 11), (2, 15))
TRITON_RANGE = ((3, 6), (3, 9))



def _major_minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def torch_version() -> str:
    pretend = PRETEND_TORCH_VERSION.get()
    if pretend:
        return pretend
    import torch

    return str(torch.__version__)


def triton_version() -> str | None:
    """None when triton is not installed (CPU-only torch): the kernel layer for Triton is moot."""
    pretend = PRETEND_TRITON_VERSION.get()
    if pretend:
        return pretend
    try:  # metadata first: this also runs while `import torch` is finishing (PCOMPILE=1)
        from importlib.metadata import PackageNotFoundError, version

        return version("triton")
    except PackageNotFoundError:
        pass
    except Exception:
        pass
    try:
        import triton
    except Exception:
        return None
    return str(getattr(triton, "__version__", "0.0"))


def _in(version: tuple[int, int] | None, bounds: tuple[tuple[int, int], tuple[int, int]]) -> bool:
    return version is not None and bounds[0] <= version <= bounds[1]


def unsupported_reason() -> str | None:
    """Why this torch/triton is outside the gate, or None if pcompile may hook it."""
    tv = torch_version()
    if not _in(_major_minor(tv), TORCH_RANGE):
        lo, hi = TORCH_RANGE
        return f"torch {tv} is outside the versions pcompile's hooks were checked against ({lo[0]}.{lo[1]}-{hi[0]}.{hi[1]})"
    trv = triton_version()
    if trv is not None and not _in(_major_minor(trv), TRITON_RANGE):
        lo, hi = TRITON_RANGE
        return f"triton {trv} is outside the versions pcompile's hooks were checked against ({lo[0]}.{lo[1]}-{hi[0]}.{hi[1]})"
    return None


def supported() -> bool:
    """True if hooks may be installed; otherwise warns once and returns False."""
    reason = unsupported_reason()
    if reason is None:
        return True
    warn_once("version", f"pcompile: {reason}; compiling with stock Inductor, without pcompile's cache "
              "(upgrade pcompile, or pin a supported torch/triton)")
    return False


def check() -> None:
    """Raise CompatError when this torch/triton is outside the gate (the compat-module contract)."""
    reason = unsupported_reason()
    if reason is not None:
        from pcompile.compat import CompatError

        raise CompatError(reason)
