"""Compiles a CUDA function inside torch's `fresh_inductor_cache()`, as cold-start benchmarks
do: Inductor's cache dirs become a temp dir the script made while it runs. Prints that dir."""
import os

import torch
from torch._inductor.utils import fresh_inductor_cache


@torch.compile
def f(x):
    return (x.sin() * 2 + 1).relu()


with fresh_inductor_cache():
    print("fresh cache dir:", os.environ["TORCHINDUCTOR_CACHE_DIR"], flush=True)
    f(torch.randn(64, device="cuda"))
