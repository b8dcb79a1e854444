"""Synthetic inputs for the timm_validate_maxautotune case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
small: data/val, ImageFolder layout, 4 classes x 2 JPEGs of 64x64, and data/resnet18_random.pth (random weights);
full: data/full/val, 10 classes x 26 JPEGs of 96x96, and data/full/resnet50_random.pth.
Deterministic; a second run with the same flags does nothing (DIR/.setup_done).
"""
import argparse
import sys
import time
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


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?", default=str(HERE / "data"))
    ap.add_argument("--full", action="store_true", help="also the inputs of the full-size GPU version")
    args = ap.parse_args(argv)
    out = Path(args.dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if not _synth.done(out, "small"):
        _synth.image_folder(out, {"val": 2}, n_classes=4, size=64)
        _checkpoint(out / "resnet18_random.pth", "resnet18", 4)
        _synth.mark(out, "small")
    if args.full and not _synth.done(out, "full"):
        _synth.image_folder(out / "full", {"val": 26}, n_classes=10, size=96, seed=1)
        _checkpoint(out / "full" / "resnet50_random.pth", "resnet50", 10)
        _synth.mark(out, "full")
    print(f"setup: {out} ready in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
