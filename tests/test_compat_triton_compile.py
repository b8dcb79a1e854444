"""compat/triton_compile.py: Inductor's worker entry point still compiles a generated kernel module
standalone (checked end to end on this CPU-only host by tests/test_hooks_triton.py)."""
from __future__ import annotations

import pytest

pytest.importorskip("triton")

from pcompile.compat import triton_compile as compat  # noqa: E402


def test_check_passes_on_this_torch() -> None:
    compat.check()
