"""Synthetic inputs for the timm_train_resnet case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
small: data/train and data/val, ImageFolder layout, 4 classes x 2 train / 2 val JPEGs of 64x64 (4 steps of batch 2);
full: data/full/{train,val}, 10 classes x 64 train / 26 val JPEGs of 96x96 (resized to 224 by the loader).
Deterministic; a second run with the same flags does nothing (DIR/.setup_done).
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import _synth  # noqa: E402


def main(argv=None):
    _synth.run_setup(HERE, _synth.timm_train_small, _synth.timm_train_full, argv)


if __name__ == "__main__":
    main()
