"""Synthetic inputs for the nanogpt_train case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
small: data/synth_char (char-level train.bin/val.bin + meta.pkl, the layout of nanoGPT's shakespeare_char);
full: data/synth_gpt2 (2M GPT-2-range token ids, no meta.pkl, so the model keeps vocab 50304).
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
        _synth.char_dataset(out / "synth_char", n_words=20000)
        _synth.mark(out, "small")
    if args.full and not _synth.done(out, "full"):
        _synth.token_dataset(out / "synth_gpt2", n_tokens=2_000_000)
        _synth.mark(out, "full")
    print(f"setup: {out} ready in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
