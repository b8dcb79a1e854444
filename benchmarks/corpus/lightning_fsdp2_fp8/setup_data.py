"""Synthetic inputs for the lightning_fsdp2_fp8 case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
data/wikitext-2.txt: 150k synthetic words (the demo dataset's file name; nothing is downloaded when it exists).
The script has no arguments, so there is no separate full version.
Deterministic; a second run with the same flags does nothing (DIR/.setup_done).
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import _synth  # noqa: E402


def small(out: Path) -> None:
    # lightning.pytorch.demos.WikiText2 reads data/wikitext-2.txt and downloads only when it is missing
    (out / "wikitext-2.txt").write_text(_synth.text(150_000, seed=0))


def main(argv=None):
    _synth.run_setup(HERE, small, argv)


if __name__ == "__main__":
    main()
