"""N ranks on one node compiling the same Triton kernels: stock per-rank pools vs pcompile's node pool.

Why: DESIGN.md's multi-rank target is "total compile CPU-seconds <= 1.25 x one rank's". Stock
Inductor gives every rank its own worker pool and every rank compiles every kernel; pcompile's
ranks share one node daemon and one store, so each kernel compiles once.

Workload: the real Inductor kernels of a small GPT forward for sm_90 (captured on this CPU-only
host by tools/measure_compile_split.py) plus tests/data's kernels. Each rank is a fresh process;
all ranks start compiling at the same instant (a barrier file), after their pools are warm.

  stock     each rank: a fork ProcessPoolExecutor of W workers (what Inductor's SubprocPool forks),
            running the stock `_worker_compile_triton` on every kernel; one shared TRITON_CACHE_DIR.
  pcompile  each rank: pcompile's Inductor pool (node daemon with W workers + store), submitting
            exactly what `AsyncCompile.triton` submits.

CPU-seconds are those of the compile workers (stock: the rank's children; pcompile: the daemon's
workers), measured with getrusage/psutil.

    python tools/bench_pool.py [--ranks 4] [--workers 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

COMMON = """
import functools, json, os, sys, time
from pathlib import Path
KERNELS = json.load(open(sys.argv[1]))["kernels"]
BARRIER, INDEX, WORKERS = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
import torch
from torch._inductor.codecache import _load_triton_kernel_from_source
from torch._inductor.runtime.compile_tasks import _worker_compile_triton
EXTRA_ENV = {"TORCHINDUCTOR_CACHE_DIR": os.environ["TORCHINDUCTOR_CACHE_DIR"], "TRITON_CACHE_DIR": os.environ["TRITON_CACHE_DIR"]}
EXTRA_CONFIG = {"use_static_triton_launcher": torch._inductor.config.use_static_triton_launcher}

def barrier():
    (BARRIER / f"ready-{INDEX}").touch()
    while not (BARRIER / "go").exists():
        time.sleep(0.002)
"""

STOCK = COMMON + """
import multiprocessing, resource
from concurrent.futures import ProcessPoolExecutor
from pcompile.inductor import triton_jobs  # the stock worker (+ 2.11's driver no-op) and its software report
ex = ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context("fork"))
list(ex.map(abs, range(4 * WORKERS)))
barrier()
t0 = time.perf_counter()
futures = [ex.submit(triton_jobs.run_triton_job, k["name"], k["source"], EXTRA_ENV, EXTRA_CONFIG) for k in KERNELS]
for f in futures:
    f.result()
wall = time.perf_counter() - t0
ex.shutdown(wait=True)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "worker_cpu": ru.ru_utime + ru.ru_stime, "compiled": len(KERNELS)}))
"""

PCOMPILE = COMMON + """
from pcompile.inductor import pool_install
import torch._inductor.async_compile as ac
assert pool_install.install_pool()
ac.AsyncCompile.process_pool()  # what Inductor's first kernel does: builds the router
router = pool_install.router()
assert router.jobs.wait_connected(300)
while not all(s["pid"] for s in router.jobs.status()["slots"]):
    time.sleep(0.05)
pool = ac.AsyncCompile.process_pool()
barrier()
t0 = time.perf_counter()
futures = [pool.submit(_worker_compile_triton, functools.partial(_load_triton_kernel_from_source, k["name"], k["source"]), EXTRA_ENV, EXTRA_CONFIG) for k in KERNELS]
for f in futures:
    f.result()
wall = time.perf_counter() - t0
print(json.dumps({"wall": wall, "counts": pool_install.counts(), "compiled": pool_install.counts().get("compiled", 0)}))
"""


def worker_cpu(cache_dir: Path) -> float:
    import psutil

    from pcompile.pool.client import NodePool

    total = 0.0
    for slot in NodePool(cache_dir, connect_now=False).status()["slots"]:
        if slot["pid"]:
            t = psutil.Process(slot["pid"]).cpu_times()
            total += t.user + t.system
    return total


def run(mode: str, ranks: int, workers: int, kernels: Path, tmp: Path) -> dict:
    run_id = f"{mode}-{ranks}-{len(list(tmp.glob('barrier-*')))}"
    barrier = tmp / f"barrier-{run_id}"
    barrier.mkdir()
    cache = tmp / f"cache-{run_id}"
    env = dict(os.environ)
    env.update(
        {
            "PCOMPILE_CACHE_DIR": str(cache),
            "PCOMPILE_POOL": "node",
            "PCOMPILE_POOL_WORKERS": str(workers),
            "PCOMPILE_POOL_IDLE_EXIT": "30",
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
            "TRITON_CACHE_DIR": str(cache / "triton"),
        }
    )
    for name in ("PCOMPILE_SHARED_DIR", "PCOMPILE_REMOTE"):
        env.pop(name, None)
    code = STOCK if mode == "stock" else PCOMPILE
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(kernels), str(barrier), str(i), str(workers)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(ranks)
    ]
    try:
        while len(list(barrier.glob("ready-*"))) < ranks:
            if any(p.poll() not in (None, 0) for p in procs):
                raise SystemExit(next(p.stderr.read() for p in procs if p.poll() not in (None, 0))[-3000:])
            time.sleep(0.01)
        base = worker_cpu(cache) if mode == "pcompile" else 0.0
        (barrier / "go").touch()
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=1800)
            if p.returncode != 0:
                raise SystemExit(err[-3000:])
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:  # never leave a rank waiting at the barrier
            if p.poll() is None:
                p.kill()
                p.wait()
    if mode == "pcompile":
        cpu = worker_cpu(cache) - base
        from pcompile.pool.client import NodePool

        NodePool(cache, connect_now=False).stop_daemon()
    else:
        cpu = sum(o["worker_cpu"] for o in outs)
    walls = [o["wall"] for o in outs]
    return {
        "mode": mode,
        "ranks": ranks,
        "workers_per_pool": workers,
        "slowest_rank_s": round(max(walls), 3),
        "fastest_rank_s": round(min(walls), 3),
        "worker_cpu_s": round(cpu, 3),
        "kernels_compiled_total": sum(o["compiled"] for o in outs),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    # The ranks' PYTHONPATH, here too: it is part of the pool identity this process looks up.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    import torch

    version = ".".join(torch.__version__.split(".")[:2])
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        kernels = tmp / "kernels.json"
        env = dict(os.environ, PCOMPILE_DUMP_KERNELS=str(kernels), TORCHINDUCTOR_CACHE_DIR=str(tmp / "capture"),
                   TORCHINDUCTOR_FX_GRAPH_CACHE="0", TRITON_CACHE_DIR=str(tmp / "capture-triton"))
        subprocess.run([sys.executable, str(REPO / "tools" / "measure_compile_split.py"), "triton"], env=env, check=True, capture_output=True)
        data = json.loads(kernels.read_text())
        extra = REPO / "tests" / "data" / f"triton_kernels_{version}.json"
        if extra.exists():
            data["kernels"] += json.loads(extra.read_text())["kernels"]
        kernels.write_text(json.dumps(data))
        results = []
        for mode in ("stock", "pcompile"):
            for ranks in (1, args.ranks):
                results.append(run(mode, ranks, args.workers, kernels, tmp))
                print(json.dumps(results[-1]), flush=True)
    one = {r["mode"]: r for r in results if r["ranks"] == 1}
    many = {r["mode"]: r for r in results if r["ranks"] == args.ranks}
    summary = {
        "torch": torch.__version__,
        "cpus": len(os.sched_getaffinity(0)),
        "kernels": len(data["kernels"]),
        f"stock_{args.ranks}_ranks_cpu_vs_one_rank": round(many["stock"]["worker_cpu_s"] / one["stock"]["worker_cpu_s"], 2),
        f"pcompile_{args.ranks}_ranks_cpu_vs_one_rank": round(many["pcompile"]["worker_cpu_s"] / one["pcompile"]["worker_cpu_s"], 2),
        "pcompile_slowest_rank_vs_stock_single": round(many["pcompile"]["slowest_rank_s"] / one["stock"]["slowest_rank_s"], 2),
        "stock_slowest_rank_vs_stock_single": round(many["stock"]["slowest_rank_s"] / one["stock"]["slowest_rank_s"], 2),
        "results": results,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
