"""GPU benchmark of the corpus: for each public script, warm on the GPU host with the GPU unused,
then the GPU job through pcompile, side by side with stock torch.compile cold and hot.

    python benchmarks/corpus_bench.py [--cases a,b] [--steps 10] [--out DIR] [--small]

Per case, in fresh cache dirs under --out (the warms of all cases first, --parallel-warms at a time,
then each case's GPU jobs alone on the GPU):
1. `pcompile warm SCRIPT --target h100 -- ARGS` while nvidia-smi is sampled every 0.5 s: the warm
   must finish with no process on the GPU;
2. the GPU job with pcompile (`PCOMPILE=1`, the warm's cache dir), measured by corpus_probe.py;
3. stock cold (`PCOMPILE_DISABLE=1`, an empty Inductor cache dir) runs before 2, stock hot (same dir
   again) after it, so both compared runs find the host's page cache equally warm.
Prints one JSON line per case and a markdown table row: warm result, FX and AOTAutograd
hits/lookups of the GPU job, first step after warm / stock hot and / stock cold, and the largest
|loss difference| over the steps between the pcompile job and stock hot.
Torchrun cases run with as many ranks as the host has GPUs (at most the case's world size).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "corpus"
PROBE = ROOT / "benchmarks" / "corpus_probe.py"


def gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


class GpuWatch:
    """Samples nvidia-smi's compute processes while a warm runs."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"],
                                     capture_output=True, text=True, timeout=10).stdout
                self.seen.update(line.strip() for line in out.splitlines() if line.strip())
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._stop.wait(0.5)

    def __enter__(self) -> "GpuWatch":
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()


STACKS = False  # --stacks: each GPU job samples its main thread's stack into WORK/NAME.stacks.txt


def _run(cmd: list[str], env: dict[str, str], cwd: Path, log: Path, timeout: float) -> tuple[int, float]:
    if STACKS and log.stem not in ("setup", "warm", "rewarm"):
        env = dict(env, PROBE_STACKS=str(log.with_suffix(".stacks.txt")))
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, env=env, cwd=str(cwd), stdout=fh, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.perf_counter() - t0


def job_cmd(case: dict[str, Any], ranks: int, out_json: Path, steps: int, args: list[str], root: Path = CORPUS) -> list[str]:
    probe = [str(PROBE), "--out", str(out_json), "--steps", str(steps), "--", str(root / case["script"]), *args]
    if case.get("world_size"):
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", *probe]
    return [sys.executable, *probe]


def _case_args(case: dict[str, Any], small: bool) -> list[str]:
    value = case["args_small" if small else "args_full"]
    return shlex.split(value) if isinstance(value, str) else list(value)


def _ranks(case: dict[str, Any]) -> int:
    return min(int(case.get("world_size") or 0), max(gpus(), 1)) if case.get("world_size") else 0


def _base_env(case: dict[str, Any]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PCOMPILE", "TORCHINDUCTOR", "TRITON_CACHE"))}
    base.update({k: str(v) for k, v in (case.get("env") or {}).items()})  # the case's own variables (cases.json "env")
    return base


def warm_case(case: dict[str, Any], work: Path, small: bool, timeout: float, root: Path = CORPUS,
              target: str = "h100") -> dict[str, Any]:
    """Setup, then the warm with the GPU watched. Needs no GPU, so several run side by side."""
    work.mkdir(parents=True, exist_ok=True)
    cwd = root / case.get("cwd", ".")
    ranks, base = _ranks(case), _base_env(case)
    res: dict[str, Any] = {"case": case["name"], "ranks": ranks or 1}
    if case.get("setup"):
        setup = shlex.split(case["setup"]) if isinstance(case["setup"], str) else list(case["setup"])
        setup = [sys.executable if a == "python" else a for a in setup] + ([] if small else ["--full"])
        rc, _ = _run(setup, dict(base), cwd, work / "setup.log", timeout)
        if rc != 0:
            res["error"] = f"setup failed ({rc}), see {work / 'setup.log'}"
            return res
    rc, secs, seen, rep = _warm(case, work, small, timeout, root, target, "warm")
    res.update(warm_rc=rc, warm_s=round(secs, 1), gpu_used_by_warm=seen, warm_error=(rep.get("report") or {}).get("error"))
    return res


def _warm(case: dict[str, Any], work: Path, small: bool, timeout: float, root: Path, target: str,
          label: str) -> tuple[int, float, list[str], dict[str, Any]]:
    """`pcompile warm --json` of the case into work/pcompile-cache, the GPU watched: (rc, seconds,
    GPU processes seen, the warm's JSON). A torchrun case's warm writes every rank's program
    (`--ranks all`, as the README advises for DDP jobs): rank 0 alone leaves the others tracing."""
    cwd, ranks = root / case.get("cwd", "."), _ranks(case)
    warm = [sys.executable, "-m", "pcompile.cli.main", "warm", str(root / case["script"]), "--target", target,
            "--cache-dir", str(work / "pcompile-cache"), "--json"] + (["--world-size", str(ranks), "--ranks", "all"] if ranks else []) + \
        list(case.get("warm_args") or []) + ["--", *_case_args(case, small)]
    with GpuWatch() as watch:
        rc, secs = _run(warm, dict(_base_env(case), PCOMPILE_PROGRESS="0"), cwd, work / f"{label}.log", timeout)
    lines = [ln for ln in (work / f"{label}.log").read_text(errors="replace").splitlines() if ln.startswith("{")]
    return rc, secs, sorted(watch.seen), (json.loads(lines[-1]) if lines else {})


def after_jobs(case: dict[str, Any], res: dict[str, Any], work: Path, steps: int, small: bool, timeout: float,
               root: Path, target: str) -> dict[str, Any]:
    """Issue 34's later rows: the next GPU job on the store the first one published its tuning
    into (fresh Inductor dirs, as another node), then a rewarm of the same store (it should lower
    and compile nothing: `written` all zero)."""
    cwd, ranks, base, args = root / case.get("cwd", "."), _ranks(case), _base_env(case), _case_args(case, small)
    env = dict(base, PCOMPILE="1", PCOMPILE_CACHE_DIR=str(work / "pcompile-cache"),
               TORCHINDUCTOR_CACHE_DIR=str(work / "next-inductor"), TRITON_CACHE_DIR=str(work / "next-triton"))
    out = work / "pcompile_next_job.json"
    rc, _ = _run(job_cmd(case, ranks, out, steps, args, root), env, cwd, work / "pcompile_next_job.log", timeout)
    r = json.loads(out.read_text()) if out.exists() else {}
    res["pcompile_next_job"] = {"rc": rc, "first_step_s": r.get("first_step_s"), "fx": r.get("fx"), "aot": r.get("aot"),
                                "frames": r.get("frames"), "losses": r.get("losses"), "status": r.get("status")}
    hot = (res.get("stock_hot") or {}).get("first_step_s")
    if r.get("first_step_s") and hot:
        res["next_job_over_stock_hot"] = round(r["first_step_s"] / hot, 3)
    rc, secs, seen, rep = _warm(case, work, small, timeout, root, target, "rewarm")
    res["rewarm"] = {"rc": rc, "s": round(secs, 1), "gpu_used": seen, "written": rep.get("written"),
                     "error": (rep.get("report") or {}).get("error")}
    return res


def gpu_jobs(case: dict[str, Any], res: dict[str, Any], work: Path, steps: int, small: bool, timeout: float,
             root: Path = CORPUS, cold: bool = False, pairs: int = 1) -> dict[str, Any]:
    """The GPU job after the warm, stock cold and stock hot (and pcompile cold), one after another.

    With `pairs` > 1, that many more (after warm, stock hot) pairs follow, in alternating order
    (run order alone moved a no-compile script by 10-19%), each pcompile job on a fresh copy of
    the cache as the warm left it (a job publishes what it tuned: the next would be a restart)."""
    cwd, ranks, base, args = root / case.get("cwd", "."), _ranks(case), _base_env(case), _case_args(case, small)
    # stock cold first: it also pays the host's one-time costs (libraries into the page cache, the
    # data files read once), which the two compared runs, pcompile after the warm and stock hot, then share
    stock = dict(base, PCOMPILE_DISABLE="1", TORCHINDUCTOR_CACHE_DIR=str(work / "stock"), TRITON_CACHE_DIR=str(work / "stock" / "triton"))
    runs = {"stock_cold": stock, "pcompile_after_warm": dict(base, PCOMPILE="1", PCOMPILE_CACHE_DIR=str(work / "pcompile-cache")),
            "stock_hot": stock}
    if cold:  # pcompile with an empty cache (no warm), against stock cold
        runs["pcompile_cold"] = dict(base, PCOMPILE="1", PCOMPILE_CACHE_DIR=str(work / "pcompile-cold"))
    if pairs > 1:
        shutil.rmtree(work / "pcompile-cache-as-warmed", ignore_errors=True)
        shutil.copytree(work / "pcompile-cache", work / "pcompile-cache-as-warmed", symlinks=True,
                        ignore=shutil.ignore_patterns("pool", "*.sock", "*.lock"))
    for name, env in runs.items():
        out = work / f"{name}.json"
        rc, secs = _run(job_cmd(case, ranks, out, steps, args, root), env, cwd, work / f"{name}.log", timeout)
        r = json.loads(out.read_text()) if out.exists() else {}
        res[name] = {"rc": rc, "first_step_s": r.get("first_step_s"), "fx": r.get("fx"), "aot": r.get("aot"),
                     "frames": r.get("frames"), "losses": r.get("losses"), "status": r.get("status")}
    extra = []
    for i in range(1, pairs):
        fresh = work / f"pcompile-cache-pair{i}"
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.copytree(work / "pcompile-cache-as-warmed", fresh, symlinks=True)
        order = [("stock_hot", stock), ("pcompile_after_warm", dict(base, PCOMPILE="1", PCOMPILE_CACHE_DIR=str(fresh)))]
        got = {}
        for name, env in (order if i % 2 else order[::-1]):
            out = work / f"{name}-pair{i}.json"
            _run(job_cmd(case, ranks, out, steps, args, root), env, cwd, work / f"{name}-pair{i}.log", timeout)
            got[name] = (json.loads(out.read_text()) if out.exists() else {}).get("first_step_s")
        res.setdefault("pair_runs", []).append(got)
        if got.get("stock_hot") and got.get("pcompile_after_warm"):
            extra.append(round(got["pcompile_after_warm"] / got["stock_hot"], 3))
    pcj, hot, cold_run = res["pcompile_after_warm"], res["stock_hot"], res["stock_cold"]
    if pcj.get("first_step_s") and hot.get("first_step_s") and cold_run.get("first_step_s"):
        res["after_warm_over_stock_hot"] = round(pcj["first_step_s"] / hot["first_step_s"], 3)
        res["after_warm_over_stock_cold"] = round(pcj["first_step_s"] / cold_run["first_step_s"], 3)
    if extra and res.get("after_warm_over_stock_hot"):
        ratios = [res["after_warm_over_stock_hot"], *extra]
        res["pair_ratios"] = ratios
        res["after_warm_over_stock_hot"] = round(statistics.median(ratios), 3)
    if res.get("pcompile_cold", {}).get("first_step_s") and cold_run.get("first_step_s"):
        res["pcompile_cold_over_stock_cold"] = round(res["pcompile_cold"]["first_step_s"] / cold_run["first_step_s"], 3)
    la, lb = pcj.get("losses") or [], hot.get("losses") or []
    pairs = [(x, y) for x, y in zip(la, lb) if x is not None and y is not None]
    res["max_abs_dloss"] = round(max((abs(x - y) for x, y in pairs), default=float("nan")), 5) if pairs else None
    return res


def row(r: dict[str, Any]) -> str:
    p = r.get("pcompile_after_warm") or {}
    fx, aot = p.get("fx") or ["?", "?"], p.get("aot") or ["?", "?"]
    warm = "ok" if r.get("warm_rc") == 0 else f"FAILED ({r.get('warm_error') or r.get('error')})"
    gpu = "unused" if not r.get("gpu_used_by_warm") else "USED"
    return (f"| {r['case']} | {r.get('ranks')} | {warm}, {r.get('warm_s')} s, GPU {gpu} | {fx[0]}/{fx[1]} | {aot[0]}/{aot[1]} | "
            f"{p.get('first_step_s') and round(p['first_step_s'], 2)} | {(r.get('stock_hot') or {}).get('first_step_s') and round(r['stock_hot']['first_step_s'], 2)} | "
            f"{(r.get('stock_cold') or {}).get('first_step_s') and round(r['stock_cold']['first_step_s'], 2)} | "
            f"{r.get('after_warm_over_stock_hot')}{' (' + ', '.join(map(str, r['pair_ratios'])) + ')' if r.get('pair_ratios') else ''} | {r.get('after_warm_over_stock_cold')} | {r.get('max_abs_dloss')} | "
            f"{r.get('pcompile_cold_over_stock_cold', '')} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", default="/tmp/corpus-bench")
    ap.add_argument("--small", action="store_true", help="the CI-size arguments (a quick check of the harness)")
    ap.add_argument("--timeout", type=float, default=400)
    ap.add_argument("--cold", action="store_true", help="also run pcompile with an empty cache (cold) against stock cold")
    ap.add_argument("--parallel-warms", type=int, default=1,
                    help="warm this many cases side by side first (CPU only), then run the GPU jobs one by one")
    ap.add_argument("--target", default="h100", help="`pcompile warm --target`: a board name or a `pcompile profile` JSON")
    ap.add_argument("--pairs", type=int, default=1,
                    help="(after warm, stock hot) pairs per case; >1 reports the median ratio (pairs in alternating order)")
    ap.add_argument("--next-job", action="store_true",
                    help="then the next GPU job on the store the first one published into, and a rewarm of that store")
    ap.add_argument("--cases-file", default=str(CORPUS / "cases.json"), help="cases.json; scripts and cwd are relative to its folder")
    ap.add_argument("--stacks", action="store_true",
                    help="each GPU job writes its main thread's sampled stacks beside its log (tools/stack_diff.py compares two)")
    a = ap.parse_args()
    global STACKS
    STACKS = a.stacks
    cases_file = Path(a.cases_file).resolve()
    cases = json.loads(cases_file.read_text())
    wanted = [c for c in a.cases.split(",") if c]
    cases = [c for c in cases if not wanted or c["name"] in wanted]
    print("| case | ranks | warm | FX hits | AOT hits | first step after warm (s) | stock hot (s) | stock cold (s) | / stock hot | / stock cold | max abs dloss | pcompile cold / stock cold |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    root = cases_file.parent
    work = {c["name"]: Path(a.out) / c["name"] for c in cases}
    with ThreadPoolExecutor(max(1, a.parallel_warms)) as pool:  # warms use CPUs only: side by side
        warmed = dict(zip((c["name"] for c in cases),
                          pool.map(lambda c: warm_case(c, work[c["name"]], a.small, a.timeout, root, a.target), cases)))
    for case in cases:
        r = warmed[case["name"]]
        if "error" not in r and r.get("warm_rc") == 0:  # a failed warm's row says so; no GPU time spent on it
            r = gpu_jobs(case, r, work[case["name"]], a.steps, a.small, a.timeout, root, a.cold, a.pairs)
            if a.next_job:
                r = after_jobs(case, r, work[case["name"]], a.steps, a.small, a.timeout, root, a.target)
        Path(work[case["name"]], "result.json").write_text(json.dumps(r))
        print(row(r), flush=True)
        print("json:", json.dumps(r, default=str), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
