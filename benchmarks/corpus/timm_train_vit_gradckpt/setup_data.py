"""Synthetic inputs for the timm_train_vit_gradckpt case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
small: data/train and data/val, ImageFolder layout, 4 classes x 2 train / 2 val JPEGs of 64x64 (4 steps of batch 2);
full: data/full/{train,val}, 10 classes x 64 train / 26 val JPEGs of 96x96 (resized to 224 by the loader).
Deterministic; a second run with the same flags does nothing (DIR/.setup_done).
"""
import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import _synth  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?", default=str(HERE / "data"))
    ap.add_argument("--full", action="store_true", help="also the inputs of the full-size GPU version")
    args = ap.parse_args(argv)
    out = Path(args.dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if not _synth.done(out, "small"):
        _synth.image_folder(out, {"train": 2, "val": 2}, n_classes=4, size=64)
        _synth.mark(out, "small")
    if args.full and not _synth.done(out, "full"):
        _synth.image_folder(out / "full", {"train": 64, "val": 26}, n_classes=10, size=96, seed=1)
        _synth.mark(out, "full")
    print(f"setup: {out} ready in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
