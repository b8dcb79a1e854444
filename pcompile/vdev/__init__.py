"""The compile-only virtual CUDA device: a small C library preloaded into `pcompile warm` only.

`build.library()` compiles it (vcuda.c: device, memory, modules, launches; vstream.c: streams,
events, capture and graphs; vvmm.c: VMM, pools, synthetic addresses; vnvml.c: NVML; plus a weak
NOT_SUPPORTED stub for every other name in entry_points.txt) with the system C compiler on first
use; `entry_points` lists what the installed GPU libraries can ask it for; `profile` reads the
device profiles it answers from; `preload` makes the environment of the one child process that
loads it, with `smi`'s `nvidia-smi` first on its PATH. Nothing here loads the library into the calling process.
"""
from __future__ import annotations
