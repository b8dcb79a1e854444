"""Soak: many back-to-back compiles of varied small models by concurrent processes, GC under a
tight budget running beside them. Why: faults that only show under churn (a blob collected
under a reader, a lease left behind, a descriptor or process leaked per compile).

    python tools/soak.py [--compiles 200] [--procs 8] [--max-bytes 2000000]

Checks and prints: every job exited 0; one model config gives one digest in every process;
`pcompile verify` finds nothing bad; the store's bytes after a final GC are within the budget
(and the most sampled during the run); no lease files, open descriptors or child processes left.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORKER = r'''
import hashlib, os, struct, sys, torch
start_fds = len(os.listdir("/proc/self/fd"))
seed, count, configs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
acts = [torch.nn.ReLU, torch.nn.GELU, torch.nn.Tanh, torch.nn.SiLU]
for i in range(count):
    c = (seed * 7 + i) % configs
    torch.manual_seed(c)
    width = 8 + 4 * (c % 5)
    m = torch.nn.Sequential(torch.nn.Linear(8, width), acts[c % 4](), torch.nn.Linear(width, 2 + c // 20))
    with torch.no_grad():
        out = torch.compile(m, backend="pcompile")(torch.randn(4, 8))
    v = out.flatten().tolist()
    print("CFG", c, hashlib.sha256(struct.pack(f"<{len(v)}f", *v)).hexdigest()[:16], flush=True)
    torch._dynamo.reset()
import gc; gc.collect()
print("FDS", start_fds, len(os.listdir("/proc/self/fd")), flush=True)
'''


def _env(cache: Path, max_bytes: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PCOMPILE", "TORCHINDUCTOR", "TRITON_CACHE"))}
    env.update(PYTHONPATH=str(REPO), PCOMPILE_CACHE_DIR=str(cache), PCOMPILE_MAX_BYTES=str(max_bytes))
    return env


def _store_bytes(root: Path) -> int:
    from pcompile.store.fsio import du

    return sum(du(root / "store" / sub) for sub in ("blobs", "manifests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiles", type=int, default=200)
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--configs", type=int, default=60, help="distinct model configs (the rest are hits)")
    parser.add_argument("--max-bytes", type=int, default=2_000_000)
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="pcompile-soak-"))
    env = _env(cache, args.max_bytes)
    per = max(1, args.compiles // args.procs)
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(seed), str(per), str(args.configs)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in range(args.procs)]
    peak, stop = [0], threading.Event()

    def gc_loop() -> None:  # an operator's cron GC, beside the jobs' own background GC
        while not stop.is_set():
            subprocess.run([sys.executable, "-m", "pcompile.cli.main", "gc", "--max-bytes", str(args.max_bytes),
                            "--cache-dir", str(cache)], env=env, capture_output=True)
            peak[0] = max(peak[0], _store_bytes(cache))
            stop.wait(2.0)

    gc_thread = threading.Thread(target=gc_loop, daemon=True)
    gc_thread.start()
    digests: dict[str, set[str]] = {}
    failed, fd_growth, lines = 0, [], []
    for proc in procs:
        out, err = proc.communicate()
        failed += proc.returncode != 0
        for line in out.splitlines():
            parts = line.split()
            if parts[0] == "CFG":
                digests.setdefault(parts[1], set()).add(parts[2])
            elif parts[0] == "FDS":
                fd_growth.append(int(parts[2]) - int(parts[1]))
        lines += [ln for ln in err.splitlines() if "pcompile" in ln.lower()]
        if proc.returncode != 0:
            print(err[-2000:], file=sys.stderr)
    stop.set()
    gc_thread.join()
    elapsed = time.monotonic() - t0
    subprocess.run([sys.executable, "-m", "pcompile.cli.main", "gc", "--max-bytes", str(args.max_bytes),
                    "--cache-dir", str(cache)], env=env, capture_output=True)
    verify = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "verify", "--json", "--cache-dir", str(cache)],
                            env=env, capture_output=True, text=True)
    bad = len(json.loads(verify.stdout).get("bad", [])) if verify.stdout.strip() else -1
    leases = [p.name for p in (cache / "store" / "leases").glob("*") if p.is_file()]
    children = subprocess.run(["pgrep", "-f", str(cache)], capture_output=True, text=True).stdout.split()
    summary = {
        "compiles": per * args.procs, "procs": args.procs, "seconds": round(elapsed, 1), "failed_jobs": failed,
        "configs_with_two_digests": sum(1 for d in digests.values() if len(d) > 1),
        "verify_bad": bad, "bytes_after_gc": _store_bytes(cache), "peak_bytes_sampled": peak[0],
        "budget": args.max_bytes, "lease_files_left": len(leases), "fd_growth_max": max(fd_growth or [0]),
        "processes_left": len(children), "pcompile_lines": sorted(set(lines))[:5],
    }
    print(json.dumps(summary, indent=1))
    ok = (failed == 0 and summary["configs_with_two_digests"] == 0 and bad == 0 and summary["bytes_after_gc"] <= args.max_bytes
          and summary["peak_bytes_sampled"] <= args.max_bytes
          and not leases and not children and summary["fd_growth_max"] <= 2)
    print("soak:", "PASS" if ok else "FAIL")
    if ok:
        import shutil

        shutil.rmtree(cache, ignore_errors=True)  # a failed soak keeps its cache dir for inspection
    else:
        print("cache dir kept:", cache)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
