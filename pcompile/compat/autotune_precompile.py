"""Which Triton jobs are max-autotune's benchmark candidates (its precompile step).

Why: `AlgorithmSelectorCache.make_precompile_fn` sends each Triton template choice to the compile
pool (`AsyncCompile.triton(kernel_name, source)`) and ignores the compiled kernel it gets back:
stock relies on the pool's worker having written the cubins into Triton's local cache dir, so
that the benchmark's own module load (`TritonBenchmarkRequest.make_run_fn` -> `run` ->
`precompile`) reads them from disk. pcompile's pool answers a job from its store without running
Triton, which leaves that dir empty: every candidate was then compiled (or fetched) one by one
inside the timing loop (H200, torch 2.11: 12.6-17.5 s for 22 choices, against stock's 0.2 s, with
"0.0003 seconds precompiling"). The router must know which jobs are candidates, and the only
place that knows is the precompile step: it submits them on the compiling thread, so a
thread-local flag set around `make_precompile_fn` marks exactly its submissions.

Touched (torch 2.11.0 select_algorithm.py:3395, 2.14.1 :4639; same signature and the same
`triton_cuda_choice and async_compile.use_process_pool()` branch in both):
  torch._inductor.select_algorithm.AlgorithmSelectorCache.make_precompile_fn
  torch._inductor.runtime.cache_dir_utils.triton_cache_dir(device) (2.11.0 :30, 2.14.1 :37)
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from typing import Any, Iterator

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}

_MARK = "_pcompile_marks_candidates"
_tls = threading.local()


def _selector() -> Any:
    from torch._inductor import select_algorithm

    return require_attr(select_algorithm, "AlgorithmSelectorCache", "torch._inductor.select_algorithm")


def check() -> None:
    """Raise CompatError naming what moved."""
    from torch._inductor.runtime import cache_dir_utils

    require_attr(cache_dir_utils, "triton_cache_dir", "torch._inductor.runtime.cache_dir_utils")
    fn = require_attr(_selector(), "make_precompile_fn", "AlgorithmSelectorCache")
    params = list(inspect.signature(getattr(fn, "__wrapped__", fn)).parameters)
    if params[:4] != ["self", "choices", "name", "inputs_key"]:
        raise CompatError(f"AlgorithmSelectorCache.make_precompile_fn{tuple(params)} changed; "
                          "update pcompile/compat/autotune_precompile.py")


@contextlib.contextmanager
def submitting_candidates() -> Iterator[None]:
    """Jobs submitted on this thread inside the block are benchmark candidates."""
    depth = getattr(_tls, "depth", 0)
    _tls.depth = depth + 1
    try:
        yield
    finally:
        _tls.depth = depth


def is_candidate() -> bool:
    """True while this thread is inside max-autotune's precompile step."""
    return bool(getattr(_tls, "depth", 0))


def install() -> bool:
    """Wrap `make_precompile_fn` (idempotent). False when this torch lacks it (nothing marked)."""
    try:
        check()
    except CompatError:
        return False
    cls = _selector()
    original = cls.make_precompile_fn
    if getattr(original, _MARK, False):
        return True

    @functools.wraps(original)
    def make_precompile_fn(self: Any, *args: Any, **kwargs: Any) -> Any:
        with submitting_candidates():
            return original(self, *args, **kwargs)

    setattr(make_precompile_fn, _MARK, True)
    cls.make_precompile_fn = make_precompile_fn
    return True


def local_triton_dir(device_index: int) -> str:
    """The Triton dir this process's benchmark will load a candidate from: the one Inductor's
    first in-process autotuner sets when TRITON_CACHE_DIR is unset (`triton_cache_dir`, 2.11 and
    2.14). A shared pool worker must be told it: its own environment keeps whatever dir an earlier
    requester (a warm) passed, and Inductor passes TRITON_CACHE_DIR only once it is set here."""
    from torch._inductor.runtime.cache_dir_utils import triton_cache_dir

    return triton_cache_dir(device_index)


def installed() -> bool:
    return bool(getattr(_selector().make_precompile_fn, _MARK, False))
