"""pcompile on a laptop: compile a small model on CPU through backend="pcompile", train a few steps.

    python examples/cpu_demo.py     # first run compiles and fills the cache
    python examples/cpu_demo.py     # second run: every graph and kernel comes from the cache
    pcompile stats                  # hits, misses and compile time saved, per layer

The cache lives in PCOMPILE_CACHE_DIR (default ~/.cache/pcompile). The printed checksum is the
same on every run and equals stock Inductor's (try --backend inductor).
"""
from __future__ import annotations

import argparse
import hashlib
import struct
import time

import torch


class TinyMLP(torch.nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, width), torch.nn.GELU(), torch.nn.LayerNorm(width), torch.nn.Linear(width, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def checksum(model: torch.nn.Module) -> str:
    """sha256 of every parameter's float32 bytes: equal checksums mean bit-identical training."""
    digest = hashlib.sha256()
    for p in model.parameters():
        values = p.detach().to(torch.float32).flatten().tolist()
        digest.update(struct.pack(f"<{len(values)}f", *values))
    return digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="pcompile", help="pcompile (default) or inductor, to compare")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = TinyMLP()
    data = torch.randn(64, 32)
    target = torch.randint(0, 10, (64,))
    step_fn = torch.compile(model, backend=args.backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(step_fn(data), target)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        last = loss.item()

    print(f"backend        {args.backend}")
    print(f"first step     {times[0]:.2f} s (includes compile)")
    if len(times) > 1:
        print(f"later steps    {1000 * sum(times[1:]) / len(times[1:]):.2f} ms each")
    print(f"final loss     {last:.6f}")
    print(f"checksum       {checksum(model)}")
    if args.backend == "pcompile":
        import pcompile
        from pcompile.config import Settings

        hit, lookups = pcompile.cache_lookups()
        if not lookups:
            how = "nothing looked up: pcompile was off or stepped aside"
        elif hit < lookups:
            how = f"{lookups - hit} of {lookups} look-ups missed: run again to hit them"
        else:
            how = f"all {lookups} look-ups hit"
        print(f"cache          {Settings.from_env().cache_dir}  ({how}; `pcompile stats` to see)")


if __name__ == "__main__":
    main()
