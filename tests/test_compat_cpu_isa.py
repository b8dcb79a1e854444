"""compat/cpu_isa.py: Inductor still reports the vector ISA its C++ kernels are generated for."""
from __future__ import annotations

from pcompile.compat import cpu_isa as compat


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_vec_isa_is_a_short_name() -> None:
    name = compat.vec_isa()
    assert isinstance(name, str) and name and "/" not in name and len(name) < 40
