"""What Triton's build identity costs a new process's first fingerprint, with and without the
memo of pcompile/keys/triton_memo.py (issue 33 item 1: nothing of pcompile's on an all-hit
restart's critical path). Fresh processes, alternating: one with a cache dir that holds the memo,
one with an empty cache dir (what every process paid before the memo).

    python benchmarks/triton_memo.py [--pairs 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import json, time
import triton  # the job has imported it by its first fingerprint
from pcompile.keys import versions
t0 = time.perf_counter()
value = versions.triton_build()
print(json.dumps({"s": time.perf_counter() - t0, "value": value}))
"""


def _one(cache: Path) -> dict:
    env = {**os.environ, "PCOMPILE_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=300, check=True,
                         cwd=cache.parent)  # not a checkout, whose pcompile `-c` would import first
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pcompile-triton-memo-") as tmp:
        kept = Path(tmp) / "kept"
        _one(kept)  # writes the memo
        with_memo, without = [], []
        for i in range(args.pairs):
            fresh = Path(tmp) / f"fresh-{i}"
            order = [("with", kept), ("without", fresh)] if i % 2 == 0 else [("without", fresh), ("with", kept)]
            for side, cache in order:
                r = _one(cache)
                (with_memo if side == "with" else without).append(r)
        values = {r["value"] for r in with_memo + without}
    w, wo = [r["s"] for r in with_memo], [r["s"] for r in without]
    print(f"triton_build() in a new process: with the memo {statistics.median(w):.4f} s (median of {len(w)}), "
          f"without {statistics.median(wo):.4f} s; same value on every run: {len(values) == 1}")
    print(json.dumps({"with_s": w, "without_s": wo, "values": sorted(values)}))
    return 0 if len(values) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
