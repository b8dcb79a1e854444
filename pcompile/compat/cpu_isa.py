"""The host's vector ISA as Inductor picks it: `torch._inductor.cpu_vec_isa.pick_vec_isa`.

Why: Inductor's FX graph key does not include the CPU ISA, yet the C++ source it generates for
CPU graphs is tiled for it (16 floats for AVX-512, 8 for AVX2). A graph entry made on an AVX-512
node and served to an AVX2 node through a shared tier would rebuild that source with AVX2 flags.
pcompile adds the ISA to the graph/autograd fingerprint whenever the process targets the CPU.

Touched (torch 2.14.1 and 2.11.0: `cpu_vec_isa.pick_vec_isa()` returning a VecISA whose str()
is e.g. "avx512"/"avx2"/"" and which is cached per process).
"""
from __future__ import annotations

import functools

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}


def check() -> None:
    import torch._inductor.cpu_vec_isa as isa

    pick = require_attr(isa, "pick_vec_isa", "torch._inductor.cpu_vec_isa")
    if not callable(pick):
        raise CompatError("torch._inductor.cpu_vec_isa.pick_vec_isa is not callable")


@functools.cache
def vec_isa() -> str:
    """e.g. "avx512" or "avx2"; "none" when Inductor found no usable vector ISA."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    return str(pick_vec_isa()) or "none"
