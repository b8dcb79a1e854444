"""Compile one Inductor-generated Triton kernel module standalone, on any host (no GPU needed).

Why: Triton compiles cubins for any target without a driver; the target comes from the
`DeviceProperties` baked into the kernel source. Inductor's worker entry point does exactly the
compile a pool worker or a warm host needs (load the module from source, precompile every config
into Triton's cache, return a picklable autotuner), but its module imports set up the GPU
driver. torch 2.14 scopes that away with `triton_helpers.skip_gpu_driver_setup()` inside the
worker; 2.11 has no such scope, so `set_driver_to_gpu` is replaced by a no-op for the call.

Touched (torch 2.14.1: `runtime/compile_tasks.py:198 _worker_compile_triton(load_kernel,
extra_env, extra_config)`, `codecache.py:4886 _load_triton_kernel_from_source(name, src)`,
`runtime/triton_helpers.py skip_gpu_driver_setup`; torch 2.11.0: the same two functions at
compile_tasks.py:54 and codecache.py:3829, `triton_helpers.set_driver_to_gpu` at 37 called at
the top of every generated module, no skip_gpu_driver_setup).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Iterator

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}


def check() -> None:
    from torch._inductor import codecache
    from torch._inductor.runtime import compile_tasks, triton_helpers

    worker = require_attr(compile_tasks, "_worker_compile_triton", "torch._inductor.runtime.compile_tasks")
    params = list(inspect.signature(worker).parameters)
    if params[:3] != ["load_kernel", "extra_env", "extra_config"]:
        raise CompatError(f"_worker_compile_triton takes {params}, expected (load_kernel, extra_env, extra_config)")
    require_attr(codecache, "_load_triton_kernel_from_source", "torch._inductor.codecache")
    if not hasattr(triton_helpers, "skip_gpu_driver_setup"):
        require_attr(triton_helpers, "set_driver_to_gpu", "torch._inductor.runtime.triton_helpers")


def _no_driver_setup() -> contextlib.AbstractContextManager[None]:
    """One implementation of the 2.11 driver workaround: pool_hook's (it owns that patch)."""
    from pcompile.compat.pool_hook import _no_gpu_driver_setup_in_worker

    return _no_gpu_driver_setup_in_worker()


def compile_kernel_source(kernel_name: str, source_code: str) -> tuple[Any, int]:
    """Compile every config of one generated kernel module; (picklable autotuner, microseconds)."""
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    load = functools.partial(_load_triton_kernel_from_source, kernel_name, source_code)
    with _no_driver_setup():
        return _worker_compile_triton(load, {}, {})
