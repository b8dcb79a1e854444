"""Small deterministic synthetic inputs for the corpus cases (no downloads, no network).

Every function takes a seed and writes the same bytes each time, so a case's data can be cached by
its setup command and compared across hosts.
"""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path
from typing import Callable

import numpy as np

_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "an", "el", "or", "is", "um", "ba", "de", "fu",
              "go", "hi", "ja", "pe", "qu", "we", "xi", "yo", "ze"]


def words(n: int, seed: int = 0) -> list[str]:
    """n pseudo-words drawn from a fixed 2000-word lexicon (Zipf-like frequencies)."""
    rng = random.Random(seed)
    lexicon = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(2000)]
    weights = [1.0 / (i + 1) for i in range(len(lexicon))]
    return rng.choices(lexicon, weights=weights, k=n)


def text(n_words: int, seed: int = 0, line_words: int = 12) -> str:
    """Sentences with punctuation and line breaks, ASCII only."""
    w = words(n_words, seed)
    rng = random.Random(seed + 1)
    out, line = [], []
    for i, word in enumerate(w):
        line.append(word.capitalize() if not line else word)
        if len(line) >= line_words or rng.random() < 0.05:
            out.append(" ".join(line) + rng.choice([".", ".", ",", "?", "!"]))
            line = []
    if line:
        out.append(" ".join(line) + ".")
    return "\n".join(out) + "\n"


def char_dataset(out: Path, n_words: int = 20000, seed: int = 0) -> dict:
    """nanoGPT shakespeare_char layout: train.bin / val.bin (uint16 char ids, 90/10 split) and meta.pkl."""
    out.mkdir(parents=True, exist_ok=True)
    data = text(n_words, seed)
    chars = sorted(set(data))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    ids = np.array([stoi[c] for c in data], dtype=np.uint16)
    n = int(0.9 * len(ids))
    ids[:n].tofile(out / "train.bin")
    ids[n:].tofile(out / "val.bin")
    meta = {"vocab_size": len(chars), "itos": itos, "stoi": stoi}
    with open(out / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)
    return meta


def token_dataset(out: Path, n_tokens: int, vocab: int = 50257, seed: int = 0, val: bool = True) -> None:
    """nanoGPT openwebtext layout: train.bin (and val.bin) of uint16 token ids below vocab, no meta.pkl."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    # Zipf-ish ids so the stream is not uniform noise.
    ids = np.minimum(rng.zipf(1.2, size=n_tokens) - 1, vocab - 1).astype(np.uint16)
    if val:
        n = int(0.9 * n_tokens)
        ids[:n].tofile(out / "train.bin")
        ids[n:].tofile(out / "val.bin")
    else:
        ids.tofile(out / "train.bin")


def image_folder(root: Path, splits: dict[str, int], n_classes: int, size: int = 64, seed: int = 0) -> None:
    """torchvision ImageFolder layout: root/<split>/class_<k>/img_<i>.jpg, `splits` = images per class."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, per_class in splits.items():
        for k in range(n_classes):
            d = root / split / f"class_{k:02d}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                # a class-dependent colour cast plus noise, so classes are (weakly) separable
                base = np.array([(37 * k) % 256, (91 * k) % 256, (153 * k) % 256], dtype=np.float32)
                img = np.clip(base + rng.normal(0, 60, size=(size, size, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(img).save(d / f"img_{i:04d}.jpg", quality=85)


def sentencepiece_model(path: Path, vocab_size: int = 32000, seed: int = 0) -> None:
    """A SentencePiece model with exactly vocab_size pieces, built here.

    A BPE model is trained on synthetic text (small vocab), then padded with unique placeholder pieces up
    to vocab_size, so every id a randomly initialised LM can emit decodes (Llama-style 32000 vocab).
    """
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    path.parent.mkdir(parents=True, exist_ok=True)
    corpus = path.parent / "_sp_corpus.txt"
    corpus.write_text(text(30000, seed))
    prefix = str(path.with_suffix(""))
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=prefix, vocab_size=1000, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1, num_threads=1,
        minloglevel=2,
    )
    corpus.unlink()
    m = pb.ModelProto()
    m.ParseFromString(Path(prefix + ".model").read_bytes())
    have = {p.piece for p in m.pieces}
    i = 0
    while len(m.pieces) < vocab_size:
        piece = f"\u2581tok{i}"
        i += 1
        if piece in have:
            continue
        p = m.pieces.add()
        p.piece, p.score, p.type = piece, -1000.0 - i, pb.ModelProto.SentencePiece.NORMAL
    m.trainer_spec.vocab_size = vocab_size
    del m.trainer_spec.input[:]  # absolute paths of this host: keep the file host-independent
    m.trainer_spec.model_prefix = ""
    path.write_bytes(m.SerializeToString())
    vocab_file = Path(prefix + ".vocab")
    if vocab_file.exists():
        vocab_file.unlink()
    if Path(prefix + ".model") != path and Path(prefix + ".model").exists():
        os.remove(prefix + ".model")


def done(out: Path, tag: str) -> bool:
    """True when `out` already holds data made with this tag (setup is skipped)."""
    stamp = out / ".setup_done"
    return stamp.exists() and tag in stamp.read_text().split()


def mark(out: Path, tag: str) -> None:
    stamp = out / ".setup_done"
    have = stamp.read_text().split() if stamp.exists() else []
    stamp.write_text(" ".join(sorted(set(have + [tag]))) + "\n")


# ---------------------------------------------------------------- recipes shared by several cases
def nanogpt_small(out: Path) -> None:
    """nanoGPT's char-level layout (shakespeare_char): train.bin/val.bin + meta.pkl."""
    char_dataset(out / "synth_char", n_words=20000)


def nanogpt_full(out: Path) -> None:
    """2M GPT-2-range token ids, no meta.pkl, so the model keeps vocab 50304."""
    token_dataset(out / "synth_gpt2", n_tokens=2_000_000)


def timm_train_small(out: Path) -> None:
    image_folder(out, {"train": 2, "val": 2}, n_classes=4, size=64)


def timm_train_full(out: Path) -> None:
    image_folder(out / "full", {"train": 64, "val": 26}, n_classes=10, size=96, seed=1)


def gptfast_checkpoint(case_dir: Path, d: Path) -> None:
    """model.pth (random bf16 weights of the config named by the folder) and tokenizer.model,
    from the case's own model.py (put in place by sources.py), so the state_dict keys are exact."""
    import sys

    import torch

    sys.path.insert(0, str(case_dir))
    from model import Transformer

    torch.manual_seed(0)
    model = Transformer.from_name(d.name)
    d.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}, d / "model.pth")
    sentencepiece_model(d / "tokenizer.model", vocab_size=model.config.vocab_size)


def run_setup(case_dir: Path, small: Callable[[Path], None], full: Callable[[Path], None] | None = None,
              argv: list[str] | None = None) -> None:
    """The command line every case's setup_data.py shares: `python setup_data.py [DIR] [--full]`.
    DIR defaults to the case's data/; each size is made once (DIR/.setup_done)."""
    import argparse
    import time

    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?", default=str(case_dir / "data"))
    ap.add_argument("--full", action="store_true", help="also the inputs of the full-size GPU version")
    args = ap.parse_args(argv)
    out = Path(args.dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    for tag, make in (("small", small), ("full", full if args.full else None)):
        if make is not None and not done(out, tag):
            make(out)
            mark(out, tag)
    print(f"setup: {out} ready in {time.time() - t0:.1f} s")
