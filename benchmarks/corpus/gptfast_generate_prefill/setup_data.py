"""Synthetic inputs for the gptfast_generate_prefill case (no downloads): see ../README.md.

    python setup_data.py [DIR] [--full]

DIR defaults to ./data next to this file (the path the script reads, relative to its cwd).
data/stories15M/{model.pth,tokenizer.model}; full: data/stories110M/... (gpt-fast picks the config from the folder name).
Random weights; the SentencePiece model is trained on synthetic text and padded to the model's 32000 ids.
Imports the case's model.py (put in place by ../sources.py) to get the exact state_dict keys.
Deterministic; a second run with the same flags does nothing (DIR/.setup_done).
"""
import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import _synth  # noqa: E402


def _checkpoint(d: Path):
    """model.pth (random bf16 weights of the config named by the folder) and tokenizer.model (32000 pieces)."""
    import torch

    sys.path.insert(0, str(HERE))  # the case's model.py (see sources.py)
    from model import Transformer

    torch.manual_seed(0)
    model = Transformer.from_name(d.name)
    d.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}, d / "model.pth")
    _synth.sentencepiece_model(d / "tokenizer.model", vocab_size=model.config.vocab_size)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?", default=str(HERE / "data"))
    ap.add_argument("--full", action="store_true", help="also the inputs of the full-size GPU version")
    args = ap.parse_args(argv)
    out = Path(args.dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if not _synth.done(out, "small"):
        _checkpoint(out / "stories15M")
        _synth.mark(out, "small")
    if args.full and not _synth.done(out, "full"):
        _checkpoint(out / "stories110M")
        _synth.mark(out, "full")
    print(f"setup: {out} ready in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
