"""An empty local cache and a populated remote tier (a throwaway redis-server), vs stock hot local and stock's own Redis cache.

    python benchmarks/remote.py [--models gpt2,llama,resnet50] [--steps 20] [--quick]
"""
import sys

import scenarios

if __name__ == "__main__":
    sys.exit(scenarios.main_for("remote", __doc__))
