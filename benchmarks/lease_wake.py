"""How long a waiting process takes to notice that the lease holder published (single flight).

Two real processes share one cache dir. For each of --trials keys, the holder takes the key's
lease, "compiles" (a sleep of 0.5-1.5x --compile-s, a different length per key, as graphs differ)
and publishes; the waiter asks for the same key 0.2 s after the holder took the lease, waits on
it, and returns the entry. The wake delay is the waiter's return minus the holder's publish. It
sits on a cold multi-rank job's critical path once per graph one rank waits for (a DDP job's
ranks take turns through its bucket graphs), and on a cold single process's once per backward
graph the backward-ahead worker compiles.

    python benchmarks/lease_wake.py [--trials 12] [--compile-s 1.5] [--tree PATH]

--tree: the pcompile checkout to import (default: this one), to compare two versions.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPACING_S = 0.6  # between trials, beyond the longest compile

_CHILD = r"""
import json, sys, time
from pcompile.config import Settings
from pcompile.keys import make_key
from pcompile.store.compose import open_store
from pcompile.store.entry import Entry

role, trials, compile_s, start_at, spacing = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
store = open_store(Settings.from_env())
out = []
for i in range(trials):
    begin = start_at + i * (1.5 * compile_s + 0.2 + spacing)
    key, inputs = make_key("graph", f"lease-wake-{start_at}-{i}", {"torch": "bench"})
    while time.time() < begin + (0.2 if role == "waiter" else 0.0):
        time.sleep(0.001)
    if role == "holder":
        lease = store.acquire_or_wait(key)
        time.sleep(compile_s * (0.5 + ((i * 7919) % 101) / 100))
        store.put(Entry(key, {"code": b"x" * 1024}, inputs))
        out.append(time.time())
        lease.release()
    else:
        got = store.acquire_or_wait(key)
        out.append(time.time() if isinstance(got, Entry) else None)
store.close()
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--compile-s", type=float, default=1.5)
    ap.add_argument("--tree", type=Path, default=ROOT)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pcompile-lease-wake-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(args.tree.resolve()), "PCOMPILE_CACHE_DIR": tmp, "PCOMPILE_EVENTS": "0"}
        start_at = time.time() + 3.0
        procs = {role: subprocess.Popen([sys.executable, "-c", _CHILD, role, str(args.trials), str(args.compile_s), str(start_at),
                                         str(SPACING_S)], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp)  # not a checkout: --tree decides
                 for role in ("holder", "waiter")}
        got = {role: json.loads(p.communicate(timeout=900)[0].strip().splitlines()[-1]) for role, p in procs.items()}
    delays = [w - h for h, w in zip(got["holder"], got["waiter"]) if w is not None]
    if len(delays) != args.trials:
        print(f"the waiter got no entry in {args.trials - len(delays)} of {args.trials} trials")
        return 1
    print(f"tree {args.tree}: wake delay after the publish, {len(delays)} trials: median {statistics.median(delays) * 1000:.0f} ms, "
          f"max {max(delays) * 1000:.0f} ms, sum {sum(delays):.2f} s")
    print(json.dumps({"delays_s": [round(d, 4) for d in delays]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
