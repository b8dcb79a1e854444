"""Synthetic inputs for the nanogpt_bench case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
data/openwebtext/train.bin: 1M GPT-2-range token ids (bench.py with real_data=True reads only train.bin).
Deterministic; a second run with the same flags does nothing (DIR/.setup_done).
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import _synth  # noqa: E402


def small(out: Path) -> None:
    _synth.token_dataset(out / "openwebtext", n_tokens=1_000_000, val=False)


def main(argv=None):
    _synth.run_setup(HERE, small, argv)


if __name__ == "__main__":
    main()
