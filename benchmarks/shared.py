"""A node with an empty local cache and a populated shared-filesystem tier (PCOMPILE_SHARED_DIR) vs stock hot local.

    python benchmarks/shared.py [--models gpt2,llama,resnet50] [--steps 20] [--quick]
"""
import sys

import scenarios

if __name__ == "__main__":
    sys.exit(scenarios.main_for("shared", __doc__))
