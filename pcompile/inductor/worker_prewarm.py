"""Imported once by the node pool's forkserver: pay per-process warm-up once per node.

Every forked worker inherits what this computed: Triton's compiler, warmed by one throwaway
compile (compat/triton_warmup.py), and the software fingerprint (hashing libtriton, loading cuDNN
to read its version) that each store key needs. Without it each of N workers repeats seconds of
that work on its first job.

It also points Inductor's remote autotune cache at the store in the workers. A kernel's
AutotuneCache is created where its module is imported, i.e. in the worker, and pickled back with
its remote handle only if it had one; torch 2.11 does not re-check in the parent (2.14 does), so
without this every pool-compiled kernel on 2.11 would neither read nor save autotune winners.
"""
from __future__ import annotations


def _prewarm() -> None:
    _warm_triton()
    try:
        from pcompile.compat.triton_warmup import import_compiler
        from pcompile.inductor.layer_keys import layer_fingerprint
        from pcompile.keys import fingerprint

        import_compiler()
        fingerprint.software()
        for kind in ("triton", "autotune"):
            layer_fingerprint(kind)
    except Exception:  # a worker that cannot prewarm still compiles; it just pays later
        pass
    try:
        from pcompile import compat
        from pcompile.inductor import store_adapter

        if compat.check("remote_cache") is None:
            store_adapter.install()
    except Exception:  # autotune results then stay out of the store for pool-compiled kernels
        pass


def _warm_triton() -> None:
    """One throwaway Triton compile here, so no forked worker pays its first-job setup (~2 s:
    lazy imports, Triton's and Inductor's source hashes, the first ptxas run)."""
    try:
        from pcompile.compat import triton_warmup

        triton_warmup.warm()
    except Exception:  # the jobs then pay it themselves
        pass


_prewarm()
