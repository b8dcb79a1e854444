"""Hot cache on the same node: each side compiles once, then a fresh process with the same cache dirs is timed.

    python benchmarks/hot.py [--models gpt2,llama,resnet50] [--steps 20] [--quick]
"""
import sys

import scenarios

if __name__ == "__main__":
    sys.exit(scenarios.main_for("hot", __doc__))
