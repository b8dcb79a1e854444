"""Synthetic inputs for the nanogpt_sample case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
data/synth_char (meta.pkl: char vocab, so sample.py never asks tiktoken for GPT-2's BPE) and
data/ckpt_small/ckpt.pt (random GPT, 2 layers, block 16); full: data/ckpt_full/ckpt.pt (GPT-2-size, char vocab).
Imports the case's model.py (put in place by ../sources.py) to get the exact state_dict keys.
Deterministic; a second run with the same flags does nothing (DIR/.setup_done).
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import _synth  # noqa: E402


def _checkpoint(d: Path, vocab_size: int, **dims):
    """A random-weight checkpoint in the layout train.py saves (model_args, model, config['dataset'])."""
    import torch

    sys.path.insert(0, str(HERE))  # the case's model.py (see sources.py)
    from model import GPT, GPTConfig

    torch.manual_seed(0)
    model_args = dict(dims, bias=False, vocab_size=vocab_size, dropout=0.0)
    model = GPT(GPTConfig(**model_args))
    d.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "model_args": model_args, "iter_num": 0, "best_val_loss": 1e9,
                "config": {"dataset": "synth_char"}}, d / "ckpt.pt")


def small(out: Path) -> None:
    meta = _synth.char_dataset(out / "synth_char", n_words=20000)
    _checkpoint(out / "ckpt_small", meta["vocab_size"], n_layer=2, n_head=2, n_embd=64, block_size=16)


def full(out: Path) -> None:
    meta = _synth.char_dataset(out / "synth_char", n_words=20000)
    _checkpoint(out / "ckpt_full", meta["vocab_size"], n_layer=12, n_head=12, n_embd=768, block_size=1024)


def main(argv=None):
    _synth.run_setup(HERE, small, full, argv)


if __name__ == "__main__":
    main()
