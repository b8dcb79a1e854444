"""Synthetic inputs for the nanogpt_bench case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
data/openwebtext/train.bin: 1M GPT-2-range token ids (bench.py with real_data=True reads only train.bin).
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
        _synth.token_dataset(out / "openwebtext", n_tokens=1_000_000, val=False)
        _synth.mark(out, "small")
    print(f"setup: {out} ready in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
