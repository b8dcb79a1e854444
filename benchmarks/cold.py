"""Cold compile, one process: stock torch.compile vs pcompile, each in a fresh process with empty caches.

    python benchmarks/cold.py [--models gpt2,llama,resnet50] [--steps 20] [--quick]
"""
import sys

import scenarios

if __name__ == "__main__":
    sys.exit(scenarios.main_for("cold", __doc__))
