"""Inputs for the pytorch_examples_fsdp2 case: none to generate (the script draws random token ids).

    python setup_data.py [DIR] [--full]

The script resumes from ./checkpoints when a previous run left one there (its README: "For 2nd
time, it loads from previous checkpoints"), so this step removes ./checkpoints next to the script:
every warm and every GPU job then starts from freshly initialized weights, the path the cache is
filled for. DIR is accepted for the shape every case's setup shares and is otherwise unused.
"""
import argparse
import shutil
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?", default=str(HERE / "data"))
    ap.add_argument("--full", action="store_true", help="same as without: the script has no size arguments")
    ap.parse_args(argv)
    t0 = time.time()
    ckpt = HERE / "checkpoints"
    if ckpt.exists():
        shutil.rmtree(ckpt)
    print(f"setup: {ckpt} cleared in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
