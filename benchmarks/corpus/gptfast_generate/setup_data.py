"""Synthetic inputs for the gptfast_generate case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
data/stories15M/{model.pth,tokenizer.model}; full: data/stories110M/... (gpt-fast picks the config from the folder name).
Random weights; the SentencePiece model is trained on synthetic text and padded to the model's 32000 ids.
Imports the case's model.py (put in place by ../sources.py) to get the exact state_dict keys.
Deterministic; a second run with the same flags does nothing (DIR/.setup_done).
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import _synth  # noqa: E402


def main(argv=None):
    _synth.run_setup(HERE, lambda out: _synth.gptfast_checkpoint(HERE, out / "stories15M"), lambda out: _synth.gptfast_checkpoint(HERE, out / "stories110M"), argv)


if __name__ == "__main__":
    main()
