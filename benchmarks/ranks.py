"""N processes started at once on one host with one cache dir: total compile CPU-seconds and the slowest process.

    python benchmarks/ranks.py [--models gpt2,llama,resnet50] [--steps 20] [--quick]
"""
import sys

import scenarios

if __name__ == "__main__":
    sys.exit(scenarios.main_for("ranks", __doc__))
