"""Imported once by the node pool's forkserver: pay per-process warm-up once per node.

Every forked worker inherits what this computed: Triton's compiler modules, and the software
fingerprint (hashing libtriton, loading cuDNN to read its version) that each store key needs.
Without it each of N workers repeats seconds of that work on its first job.
"""
from __future__ import annotations


def _prewarm() -> None:
    try:
        import triton.compiler.compiler  # noqa: F401

        from pcompile.inductor.layer_keys import layer_fingerprint
        from pcompile.keys import fingerprint

        fingerprint.software()
        for kind in ("triton", "autotune"):
            layer_fingerprint(kind)
    except Exception:  # a worker that cannot prewarm still compiles; it just pays later
        pass


_prewarm()
