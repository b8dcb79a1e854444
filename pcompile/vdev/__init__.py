"""The compile-only virtual CUDA device: a small C library preloaded into `pcompile warm` only.

`build.library()` compiles vcuda.c with the system C compiler on first use; `profile` reads the
device profiles it answers from; `preload` makes the environment of the one child process that
loads it. Nothing here loads the library into the calling process.
"""
from __future__ import annotations
