"""Synthetic inputs for the nanogpt_train case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
small: data/synth_char (char-level train.bin/val.bin + meta.pkl, the layout of nanoGPT's shakespeare_char);
full: data/synth_gpt2 (2M GPT-2-range token ids, no meta.pkl, so the model keeps vocab 50304).
Deterministic; a second run with the same flags does nothing (DIR/.setup_done).
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import _synth  # noqa: E402


def main(argv=None):
    _synth.run_setup(HERE, _synth.nanogpt_small, _synth.nanogpt_full, argv)


if __name__ == "__main__":
    main()
