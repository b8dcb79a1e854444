"""Warm a process's Triton compiler once by compiling a tiny kernel for a GPU target, no driver.

Why: the first Triton job of a fresh process pays for lazy imports (Triton's code generator and
Gluon, Inductor's codecache), Triton's own first-use setup (hashing its sources for its cache
key, the backend, the first ptxas run) on top of the compile itself: measured in one process
(torch 2.14), the first three jobs took 2.97, 0.43 and 0.25 s; after `warm()` the first took
0.46 s. The node pool forks every worker from one forkserver; doing this once there means no
worker pays it (inductor/worker_prewarm.py).

The compile goes to a private temporary Triton cache (never the store, never the job's cache),
for an explicit target, so it never initialises a GPU driver: the forkserver must stay free of
CUDA state to fork safely. It borrows TRITON_CACHE_DIR/TRITON_CACHE_MANAGER in os.environ for
the call, so run it where no other thread compiles (the forkserver's preload).

Touched (triton 3.6.0 and 3.8.0: `triton.compile(src, target=...)`,
`triton.compiler.compiler.ASTSource(fn, signature, constexprs)`,
`triton.backends.compiler.GPUTarget(backend, arch, warp_size)`; the CUDA backend registered as
`triton.backends.backends["nvidia"]`; torch 2.11/2.14 `torch._inductor.codecache.torch_key` and
`runtime.compile_tasks._set_triton_ptxas_path`, each called when present).
"""
from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Iterator

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0', 'triton': '3.6.0, 3.8.0, 3.9.0'}

KERNEL_SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def pcompile_warmup(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0 + 1.0, mask=mask)
'''

# What a worker's first Inductor job imports besides Triton's compiler (measured on 2.14/2.11);
# the heuristics modules exist only in newer torch.
INDUCTOR_MODULES = ("torch._inductor.codecache", "torch._inductor.async_compile")
OPTIONAL_MODULES = ("torch._inductor.heuristics.triton_codegen.pointwise", "torch._inductor.heuristics.triton_codegen.reduction")


def check() -> None:
    import triton
    from triton.backends import compiler as backends_compiler
    from triton.compiler import compiler

    require_attr(triton, "compile", "triton")
    source = require_attr(compiler, "ASTSource", "triton.compiler.compiler")
    params = list(inspect.signature(source.__init__).parameters)
    if params[1:4] != ["fn", "signature", "constexprs"]:
        raise CompatError(f"triton ASTSource takes {params[1:]}, expected (fn, signature, constexprs, ...)")
    require_attr(backends_compiler, "GPUTarget", "triton.backends.compiler")


def import_compiler() -> None:
    """Import Triton's compiler (what a fresh process's first kernel compile imports)."""
    importlib.import_module("triton.compiler.compiler")


def has_cuda_backend() -> bool:
    try:
        from triton.backends import backends

        return "nvidia" in backends
    except Exception:
        return False


@contextlib.contextmanager
def _private_triton_cache() -> Iterator[str]:
    """TRITON_CACHE_DIR at a fresh temp dir and Triton's default file cache manager, restored after."""
    saved = {k: os.environ.get(k) for k in ("TRITON_CACHE_DIR", "TRITON_CACHE_MANAGER")}
    tmp = tempfile.mkdtemp(prefix="pcompile-triton-warmup-")
    os.environ["TRITON_CACHE_DIR"] = tmp
    os.environ.pop("TRITON_CACHE_MANAGER", None)
    try:
        yield tmp
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)


def _load_kernel(directory: str) -> Any:
    path = os.path.join(directory, "pcompile_triton_warmup.py")
    with open(path, "w") as f:
        f.write(KERNEL_SOURCE)
    spec = importlib.util.spec_from_file_location("pcompile_triton_warmup", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # @triton.jit reads the source through the module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module.pcompile_warmup


def warm(arch: int = 90, warp_size: int = 32) -> dict[str, Any]:
    """Compile the warm-up kernel for sm_`arch`; returns what was done (for logs and tests).
    Raises what Triton raises: callers decide whether a failed warm-up matters (it never does
    for a pool: its jobs then pay the warm-up themselves)."""
    check()
    t0 = time.perf_counter()
    for name in INDUCTOR_MODULES:
        importlib.import_module(name)
    for name in OPTIONAL_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    codecache = sys.modules["torch._inductor.codecache"]
    if callable(getattr(codecache, "torch_key", None)):  # lru-cached hash of torch's sources, ~0.3 s
        codecache.torch_key()
    from torch._inductor.runtime import compile_tasks

    if callable(getattr(compile_tasks, "_set_triton_ptxas_path", None)):
        compile_tasks._set_triton_ptxas_path()  # warm the ptxas the jobs will run
    if not has_cuda_backend():
        return {"compiled": False, "reason": "no CUDA backend in this Triton", "seconds": time.perf_counter() - t0}
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    with _private_triton_cache() as tmp:
        fn = _load_kernel(tmp)
        src = ASTSource(fn=fn, signature={"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 128})
        kernel = triton.compile(src, target=GPUTarget("cuda", arch, warp_size))
        cubin = (getattr(kernel, "asm", None) or {}).get("cubin")
    return {"compiled": True, "cubin_bytes": len(cubin or b""), "seconds": time.perf_counter() - t0}


__all__ = ["INDUCTOR_MODULES", "check", "has_cuda_backend", "import_compiler", "warm"]
