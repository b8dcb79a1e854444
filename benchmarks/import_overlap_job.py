"""A small training job with a realistic start-up before its torch.compile (benchmarks/import_overlap.py).

    python benchmarks/import_overlap_job.py --corpus FILE [--steps 3]

Start-up, in the order a training script does it: read a text corpus and tokenise it in pure
Python (holds the GIL), build the model and initialise its weights (torch kernels, which release
the GIL), cut the token stream into batches; then torch.compile and train. Prints the losses.
"""
from __future__ import annotations

import argparse
import collections
import re

import torch


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int, width: int, depth: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(ids)))


def tokenise(text: str, vocab_size: int) -> tuple[list[int], int]:
    """Word-level vocabulary, most frequent first (a tokenizer's pure-Python start-up work)."""
    words = re.findall(r"\w+|[^\w\s]", text.lower())
    common = [w for w, _ in collections.Counter(words).most_common(vocab_size - 1)]
    index = {w: i + 1 for i, w in enumerate(common)}
    return [index.get(w, 0) for w in words], len(common) + 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    a = ap.parse_args()
    torch.manual_seed(0)
    with open(a.corpus, encoding="utf-8") as fh:
        ids, vocab = tokenise(fh.read(), 4096)
    model = TinyLM(vocab, a.width, a.depth)
    for p in model.parameters():  # a checkpoint-free start: fresh weights
        torch.nn.init.normal_(p, std=0.02)
    stream = torch.tensor(ids, dtype=torch.long)
    n = (len(stream) - 1) // a.seq
    xs, ys = stream[: n * a.seq].view(n, a.seq), stream[1 : n * a.seq + 1].view(n, a.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = torch.compile(model)
    for i in range(a.steps):
        x, y = xs[i * a.batch:(i + 1) * a.batch], ys[i * a.batch:(i + 1) * a.batch]
        loss = torch.nn.functional.cross_entropy(step(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {i} loss {loss.item():.6f}", flush=True)


if __name__ == "__main__":
    main()
