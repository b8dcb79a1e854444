"""Warm start from a CPU-only pass: `pcompile warm` (virtual CUDA device), then the GPU job, vs stock's hot local cache.

    python benchmarks/warm.py [--models gpt2,llama,resnet50] [--steps 20] [--quick]
"""
import sys

import scenarios

if __name__ == "__main__":
    sys.exit(scenarios.main_for("warm", __doc__))
