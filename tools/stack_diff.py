"""Compare two sampled main-thread profiles (benchmarks/_stack_sampler.py): where did B spend
wall time that A did not?

    python tools/stack_diff.py A.txt B.txt [--under FRAME] [--top 40]

Per frame (`file:function`), the seconds of samples whose stack contains it (inclusive, counted
once per sample), in A and in B, sorted by B - A. `--under` keeps only samples inside FRAME
(a substring, e.g. aot_stage2_autograd); `--self` counts only each sample's innermost frame.
"""
from __future__ import annotations

import argparse
import collections


def inclusive(path: str, under: str | None, self_only: bool = False) -> tuple[collections.Counter[str], float]:
    counts: collections.Counter[str] = collections.Counter()
    interval = 0.02
    with open(path) as fh:
        for line in fh:
            if line.startswith("# interval"):
                interval = float(line.split()[2])
                continue
            stack, _, n = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")
            if under and not any(under in f for f in frames):
                continue
            for f in ({frames[-1]} if self_only else set(frames)):
                counts[f] += int(n)
    return counts, interval


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--under")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--self", dest="self_only", action="store_true", help="innermost frame only (self time)")
    x = ap.parse_args()
    (ca, ia), (cb, ib) = inclusive(x.a, x.under, x.self_only), inclusive(x.b, x.under, x.self_only)
    rows = sorted(set(ca) | set(cb), key=lambda f: cb[f] * ib - ca[f] * ia, reverse=True)
    print(f"{'B - A s':>8} {'A s':>7} {'B s':>7}  frame")
    for f in rows[: x.top]:
        print(f"{cb[f] * ib - ca[f] * ia:8.2f} {ca[f] * ia:7.2f} {cb[f] * ib:7.2f}  {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
