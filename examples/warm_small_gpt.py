"""A small GPT training loop, written as an ordinary CUDA script (no pcompile imports).

It exercises what a warm start must cover: `model.cuda()`, SDPA (causal, head_dim 64), a graph
break inside the forward, bf16 autocast, a separately compiled AdamW step, and `loss.item()`
logging. `pcompile warm examples/warm_small_gpt.py` compiles all of it on a CPU-only host; run it
on the GPU afterwards with the same cache dir and its graphs come from the cache.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, ctx: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        half = len(self.blocks) // 2
        for blk in self.blocks[:half]:
            x = blk(x)
        torch._dynamo.graph_break()  # two graphs, as real models often have
        for blk in self.blocks[half:]:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    args = p.parse_args()

    torch.manual_seed(0)
    model = GPT(args.vocab, args.dim, args.dim // 64, args.layers, args.ctx).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    cmodel = torch.compile(model)

    @torch.compile
    def opt_step() -> None:
        opt.step()

    for step in range(args.steps):
        t0 = time.perf_counter()
        idx = torch.randint(0, args.vocab, (args.batch, args.ctx), device="cuda")
        tgt = torch.randint(0, args.vocab, (args.batch, args.ctx), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cmodel(idx, tgt)
        loss.backward()
        opt_step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f} time {time.perf_counter() - t0:.2f}s", flush=True)


if __name__ == "__main__":
    main()
