"""The job every fault-matrix row runs: two small models compiled in one fresh process.

Why two phases: a fault applied mid-job (disk filled, remounted read-only, dir unmounted, server
restarted) must meet a compile that starts after it. Between the phases the job prints
`PHASE1` and waits for the file named by --go (the matrix applies the fault, then creates it).
Prints `RESULT <digest> <phase-2 seconds>` of both models' outputs and gradients: equal digests mean bit-identical.

    python tools/fault_job.py [--backend pcompile|inductor] [--go FILE]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import struct
import sys
import time

import torch


def _digest(digest: "hashlib._Hash", tensors: list[torch.Tensor]) -> None:
    for t in tensors:
        values = t.detach().to(torch.float32).flatten().tolist()
        digest.update(struct.pack(f"<{len(values)}f", *values))


def _step(model: torch.nn.Module, x: torch.Tensor, backend: str, digest: "hashlib._Hash") -> None:
    out = torch.compile(model, backend=backend)(x)
    out.sum().backward()
    _digest(digest, [out] + [p.grad for p in model.parameters()])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="pcompile")
    parser.add_argument("--go", default=None, help="wait for this file between the two phases")
    parser.add_argument("--go-timeout", type=float, default=120.0)
    args = parser.parse_args()
    torch.manual_seed(0)
    digest = hashlib.sha256()
    t0 = time.perf_counter()
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    _step(mlp, torch.randn(8, 16), args.backend, digest)
    _flush_remote_writes()  # the fault must meet phase 2's compiles, not phase 1's uploads still in flight
    print("PHASE1", f"{time.perf_counter() - t0:.2f}", flush=True)
    if args.go:
        limit = time.monotonic() + args.go_timeout
        while not os.path.exists(args.go):
            if time.monotonic() > limit:
                print("go file never came", file=sys.stderr)
                return 3
            time.sleep(0.05)
    t1 = time.perf_counter()
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3))
    _step(conv, torch.randn(2, 3, 8, 8), args.backend, digest)
    print("RESULT", digest.hexdigest()[:16], f"{time.perf_counter() - t1:.2f}", flush=True)
    return 0


def _flush_remote_writes() -> None:
    """Wait for the remote tier's background uploads of phase 1 (a restarted server must not meet
    them: that is a different fault, a server lost mid-upload)."""
    try:
        from pcompile.inductor import store_gateway

        st = store_gateway.store()
        for tier in (st.tiers if st is not None else []):
            flush = getattr(tier, "flush", None)
            if callable(flush):
                flush(30.0)
    except Exception:
        pass


if __name__ == "__main__":
    sys.exit(main())
