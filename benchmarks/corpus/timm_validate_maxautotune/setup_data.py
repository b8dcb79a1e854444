"""Synthetic inputs for the timm_validate_maxautotune case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
small: data/val, ImageFolder layout, 4 classes x 2 JPEGs of 64x64, and data/resnet18_random.pth (random weights);
full: data/full/val, 10 classes x 26 JPEGs of 96x96, and data/full/resnet50_random.pth.
Deterministic; a second run with the same flags does nothing (DIR/.setup_done).
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import _synth  # noqa: E402


def _checkpoint(path: Path, model_name: str, num_classes: int):
    """Random weights for validate.py --checkpoint (without one it would download pretrained weights)."""
    import timm
    import torch

    torch.manual_seed(0)
    model = timm.create_model(model_name, pretrained=False, num_classes=num_classes)
    torch.save(model.state_dict(), path)


def small(out: Path) -> None:
    _synth.image_folder(out, {"val": 2}, n_classes=4, size=64)
    _checkpoint(out / "resnet18_random.pth", "resnet18", 4)


def full(out: Path) -> None:
    _synth.image_folder(out / "full", {"val": 26}, n_classes=10, size=96, seed=1)
    _checkpoint(out / "full" / "resnet50_random.pth", "resnet50", 10)


def main(argv=None):
    _synth.run_setup(HERE, small, full, argv)


if __name__ == "__main__":
    main()
