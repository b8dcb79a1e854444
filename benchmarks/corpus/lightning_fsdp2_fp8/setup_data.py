"""Synthetic inputs for the lightning_fsdp2_fp8 case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
data/wikitext-2.txt: 150k synthetic words (the demo dataset's file name; nothing is downloaded when it exists).
The script has no arguments, so there is no separate full version.
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
        # lightning.pytorch.demos.WikiText2 reads data/wikitext-2.txt and downloads only when it is missing
        (out / "wikitext-2.txt").write_text(_synth.text(150_000, seed=0))
        _synth.mark(out, "small")
    print(f"setup: {out} ready in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
