"""The benchmark scenarios, each stock torch.compile vs pcompile side by side, as ratios.

Cases are memoized per model (a `Plan`), so a run of several scenarios shares work: the hot
case reuses the cold case's cache dirs, and `run_all.py` never compiles the same cold case twice.
Every case is a fresh process; a case that must start cold gets fresh cache directories.
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import _harness as H
from _harness import Dirs, Launch, Options

SCENARIOS = ("cold", "hot", "warm", "shared", "ranks", "remote")
#: run only when named: `ddp` (--ranks N processes of one DDP job, restarted --repeats times)
EXTRA_SCENARIOS = ("ddp",)


class Services:
    """Shared by all plans of a run: the throwaway Redis, started on first use."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._redis: H.Redis | None = None
        self._profile: tuple[Path | None, str] | None = None

    def redis(self) -> H.Redis:
        if self._redis is None:
            self._redis = H.Redis(self.work / "redis")
        return self._redis

    def profile(self) -> tuple[Path | None, str]:
        """This GPU's device profile for `pcompile warm --target`, captured once with `pcompile profile`."""
        if self._profile is None:
            out = self.work / "device-profile.json"
            try:
                res = subprocess.run([H.python(), "-m", "pcompile.cli.main", "profile", "--out", str(out)],
                                       env=H.base_env({}), capture_output=True, text=True, timeout=300, cwd=H.REPO)
                ok = res.returncode == 0 and out.exists()
                why = "" if ok else (res.stderr.strip().splitlines() or ["no output"])[-1][:300]
            except (OSError, subprocess.TimeoutExpired) as exc:
                ok, why = False, str(exc)
            self._profile = (out if ok else None, why)
        return self._profile

    def close(self) -> None:
        if self._redis is not None:
            self._redis.stop()


class Plan:
    """The cases of one model, each run at most once, with the directories they share."""

    def __init__(self, model: str, opts: Options, services: Services) -> None:
        self.model, self.opts, self.services = model, opts, services
        self.root = opts.work_dir / model
        self.memo: dict[str, Any] = {}
        self._dirs: dict[str, Dirs] = {}
        self.stamp = time.strftime("%Y%m%d-%H%M%S")

    def dirs(self, name: str) -> Dirs:
        if name not in self._dirs:
            d = Dirs(self.root / name)
            shutil.rmtree(d.root, ignore_errors=True)
            d.root.mkdir(parents=True)
            self._dirs[name] = d
        return self._dirs[name]

    def case(self, name: str) -> Any:
        if name not in self.memo:
            try:
                self.memo[name] = _BUILDERS[name](self)
            except Exception as exc:  # a harness failure is one failed case, not a lost run
                import traceback

                traceback.print_exc()
                self.memo[name] = {"error": f"harness error: {type(exc).__name__}: {exc}"}
        return self.memo[name]

    # -- helpers
    def launch(self, label: str, backend: str, env: dict[str, str], rank: int | None = None) -> Launch:
        tag = f"{self.model}-{label}" + (f"-r{rank}" if rank is not None else "")
        result = self.root / "results" / f"{tag}.json"
        result.unlink(missing_ok=True)
        extra = dict(env, PCOMPILE_JOB_ID=f"bench-{self.stamp}-{tag}")
        if rank is not None:
            extra.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(self.opts.ranks))
            extra["PCOMPILE_JOB_ID"] = f"bench-{self.stamp}-{self.model}-{label}"  # one job: all ranks in one log
        return Launch(tag, [H.python(), *H.case_cmd(self.model, backend, self.opts, result)], H.base_env(extra), result)

    def one(self, label: str, backend: str, env: dict[str, str]) -> dict:
        return H.run_one(self.launch(label, backend, env), self.opts)

    def needs(self, name: str) -> dict | None:
        """A prerequisite case, or None when it failed (the dependent case then reports why)."""
        dep = self.case(name)
        first = dep[0] if isinstance(dep, list) else dep
        return None if first.get("error") else dep


def _failed(dep: str) -> dict:
    return {"error": f"skipped: needs case {dep}, which failed"}


def _stock_cold(p: Plan) -> dict:
    return p.one("stock-cold", "stock", p.dirs("stock").env())


def _stock_hot(p: Plan) -> dict:
    if p.needs("stock-cold") is None:
        return _failed("stock-cold")
    return p.one("stock-hot", "stock", p.dirs("stock").env())


def _pc_cold(p: Plan) -> dict:
    return p.one("pcompile-cold", "pcompile", p.dirs("pc").env())


def _pc_hot(p: Plan) -> dict:
    if p.needs("pcompile-cold") is None:
        return _failed("pcompile-cold")
    return p.one("pcompile-hot", "pcompile", p.dirs("pc").env())


def _tiers(p: Plan) -> dict[str, str]:
    env = {"PCOMPILE_SHARED_DIR": str(p.dirs("tiers").root / "shared")}
    url = p.services.redis().url
    if url:
        env["PCOMPILE_REMOTE"] = url.rsplit("/", 1)[0] + f"/{_db(p.model)}"
    return env


def _db(model: str) -> int:
    return 1 + sum(map(ord, model)) % 14  # one Redis db per model keeps models apart


def _pc_populate(p: Plan) -> dict:
    return p.one("pcompile-populate-tiers", "pcompile", dict(p.dirs("populate").env(), **_tiers(p)))


def _pc_shared(p: Plan) -> dict:
    if p.needs("pcompile-populate-tiers") is None:
        return _failed("pcompile-populate-tiers")
    env = dict(p.dirs("shared-reader").env(), PCOMPILE_SHARED_DIR=_tiers(p)["PCOMPILE_SHARED_DIR"])
    return p.one("pcompile-shared", "pcompile", env)


def _pc_remote(p: Plan) -> dict:
    tiers = _tiers(p)
    if "PCOMPILE_REMOTE" not in tiers:
        return {"error": f"skipped: {p.services.redis().reason}"}
    if p.needs("pcompile-populate-tiers") is None:
        return _failed("pcompile-populate-tiers")
    return p.one("pcompile-remote", "pcompile", dict(p.dirs("remote-reader").env(), PCOMPILE_REMOTE=tiers["PCOMPILE_REMOTE"]))


def _stock_remote_env(p: Plan, fresh: str) -> dict[str, str] | None:
    r = p.services.redis()
    if not r.url:
        return None
    return dict(p.dirs(fresh).env(), TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE="1", TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE="1",
                TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE="1", TORCHINDUCTOR_REDIS_HOST="127.0.0.1",
                TORCHINDUCTOR_REDIS_PORT=str(r.port))


def _stock_remote_populate(p: Plan) -> dict:
    env = _stock_remote_env(p, "stock-remote-writer")
    if env is None:
        return {"error": f"skipped: {p.services.redis().reason}"}
    return p.one("stock-remote-populate", "stock", env)


def _stock_remote(p: Plan) -> dict:
    if p.needs("stock-remote-populate") is None:
        return _failed("stock-remote-populate")
    return p.one("stock-remote", "stock", _stock_remote_env(p, "stock-remote-reader"))


def _warm_run(p: Plan, label: str, env: dict[str, str]) -> dict:
    warm_args = list(p.opts.warm_args)
    if not any(a == "--target" or a.startswith("--target=") for a in warm_args):
        prof, why = p.services.profile()  # the GPU this job will run on, as the warm's target
        if prof is None:
            return {"error": f"skipped: no device profile for `pcompile warm --target` (`pcompile profile` failed: {why}); "
                             "pass --warm-arg=--target --warm-arg=PROFILE"}
        warm_args += ["--target", str(prof)]
    # The warm always targets CUDA (that is what it is for), even when --device cpu runs the other cases.
    case_args = H.case_cmd(p.model, "pcompile", p.opts, None, device="cuda")[1:]
    argv = [H.python(), "-m", "pcompile.cli.main", "warm", "--steps", "2", *warm_args, str(H.CASE), "--", *case_args]
    env = H.base_env(dict(env, PCOMPILE_JOB_ID=f"bench-{p.stamp}-{p.model}-{label}"))
    return H.run_warm(f"{p.model}-{label}", argv, env, p.opts)


def _pc_warm(p: Plan) -> dict:
    return _warm_run(p, "pcompile-warm", p.dirs("warm").env())


_WRITTEN = re.compile(r"(\d+) FX graph entries, (\d+) AOTAutograd entries, (\d+) Triton cubins")


def _pc_rewarm(p: Plan) -> dict:
    """`pcompile warm` again into the same store after the GPU jobs published what they tuned
    (fresh Inductor dirs, as on another warm host): it should lower and compile nothing."""
    if p.needs("pcompile-next-job") is None:
        return _failed("pcompile-next-job")
    r = _warm_run(p, "pcompile-rewarm", p.dirs("rewarm").env(pcompile_dir=p.dirs("warm").pcompile))
    try:
        m = _WRITTEN.findall(Path(r["log"]).read_text(errors="replace"))
    except (KeyError, OSError):
        m = []
    if m:
        r["written"] = dict(zip(("fxgraph", "aotautograd", "triton"), map(int, m[-1])))
    return r


def _pc_after_warm(p: Plan) -> dict:
    if p.needs("pcompile-warm") is None:
        return _failed("pcompile-warm")
    # Only pcompile's store carries over from the warm; Inductor's and Triton's own dirs start empty,
    # as on a GPU node that never ran this model.
    env = p.dirs("after-warm").env(pcompile_dir=p.dirs("warm").pcompile)
    return p.one("pcompile-after-warm", "pcompile", env)


def _pc_after_warm_bench(p: Plan) -> dict:
    """The same first GPU job, but benchmarking the kernels the warm could only predict
    (PCOMPILE_AUTOTUNE=benchmark): it publishes measured winners to the warm's store."""
    if p.needs("pcompile-after-warm") is None:
        return _failed("pcompile-after-warm")
    env = p.dirs("after-warm-bench").env(pcompile_dir=p.dirs("warm").pcompile)
    return p.one("pcompile-after-warm-bench", "pcompile", dict(env, PCOMPILE_AUTOTUNE="benchmark"))


def _pc_next_job(p: Plan) -> dict:
    """A later GPU job on another fresh node: the warm's graphs plus the measured winners."""
    if p.needs("pcompile-after-warm-bench") is None:
        return _failed("pcompile-after-warm-bench")
    env = p.dirs("next-job").env(pcompile_dir=p.dirs("warm").pcompile)
    return p.one("pcompile-next-job", "pcompile", env)


def _ranks(p: Plan, backend: str, label: str, dirs: str | None = None, extra: dict[str, str] | None = None) -> list[dict]:
    d = p.dirs(dirs or label)
    launches = [p.launch(label, backend, dict(d.env(), **(extra or {})), rank=r) for r in range(p.opts.ranks)]
    res = H.run_together(launches, p.opts)
    for r in res:
        if p.opts.verbose:
            H._say(f"  {r['label']}: " + (f"ERROR {r['error'][:200]}" if r.get("error") else
                                          f"first step {r.get('first_step_s')} s, compile CPU {r.get('compile_cpu_s')} s"))
    return res


_BUILDERS: dict[str, Callable[[Plan], Any]] = {
    "stock-cold": _stock_cold, "stock-hot": _stock_hot, "pcompile-cold": _pc_cold, "pcompile-hot": _pc_hot,
    "pcompile-populate-tiers": _pc_populate, "pcompile-shared": _pc_shared, "pcompile-remote": _pc_remote,
    "stock-remote-populate": _stock_remote_populate, "stock-remote": _stock_remote,
    "pcompile-warm": _pc_warm, "pcompile-after-warm": _pc_after_warm,
    "pcompile-after-warm-bench": _pc_after_warm_bench, "pcompile-next-job": _pc_next_job,
    "pcompile-rewarm": _pc_rewarm,
    "stock-ranks": lambda p: _ranks(p, "stock", "stock-ranks"),
    "pcompile-ranks": lambda p: _ranks(p, "pcompile", "pcompile-ranks"),
}


# ---------------------------------------------------------------- summaries and ratios

def _hits(r: dict, section: str, name: str) -> int | None:
    c = r.get("counters") or {}
    return (c.get(section) or {}).get(name) if c else None


def summarize(r: dict) -> dict:
    """The columns of one case."""
    if isinstance(r, list):
        return {"ranks": [summarize(x) for x in r]}
    keys = ("first_step_s", "steady_step_s", "kernel_ms_per_step", "startup_s", "process_wall_s", "wall_s", "compile_cpu_s", "rusage_cpu_s",
            "machine_cpu_s_all", "peak_mem_gib", "gpu", "torch", "triton", "cuda", "device", "amp", "description",
            "params_m", "gpu_used_by_warm", "error", "log", "threads_cpu_s", "machine_busy_first_step_s", "phases_s",
            "kernel_router_counts", "cpu_by_group_s", "cpu_timeline", "cpu_sampler_error", "gc_first_step", "floor")
    out = {k: r[k] for k in keys if r.get(k) is not None}
    out["fxgraph_hit"] = _hits(r, "inductor", "fxgraph_cache_hit") or 0
    out["fxgraph_miss"] = _hits(r, "inductor", "fxgraph_cache_miss") or 0
    out["aot_hit"] = _hits(r, "aot_autograd", "autograd_cache_hit") or 0
    out["aot_miss"] = _hits(r, "aot_autograd", "autograd_cache_miss") or 0
    out["graphs"] = _hits(r, "stats", "unique_graphs")
    out["frames_traced"] = _hits(r, "frames", "total") or 0  # Dynamo's own count of frames it converted
    if r.get("compile_call_s") is not None:
        out["compile_call_s"] = r["compile_call_s"]
    if r.get("losses"):
        out["losses"] = r["losses"][:20]
    if isinstance(r.get("events"), dict) and r["events"].get("lookups"):
        lk = r["events"]["lookups"]
        out["pcompile_lookups"] = f"{sum(x['hit'] for x in lk)}/{sum(x['n'] for x in lk)}"
        out["pcompile_lookups_by_layer"] = {f"{x.get('layer')}/{x.get('tier')}": f"{x['hit']}/{x['n']}" for x in lk}
    if isinstance(r.get("events"), dict):
        out["pcompile_events"] = {k: r["events"].get(k) for k in ("job", "log", "graph_outcomes", "kernel_outcomes", "saved", "error", "timeline")}
    return out


def _ratio(name: str, num: float | None, den: float | None, target: float | None, note: str = "") -> dict:
    if num is None or den in (None, 0):
        return {"name": name, "value": None, "target": target, "met": None, "note": note or "not measured"}
    v = num / den
    return {"name": name, "value": round(v, 3), "target": target, "met": (v <= target) if target else None, "note": note}


def _loss_delta(a: dict, b: dict) -> float | None:
    la, lb = a.get("losses") or [], b.get("losses") or []
    n = min(len(la), len(lb))
    return round(max(abs(x - y) for x, y in zip(la[:n], lb[:n])), 5) if n else None


def _common(stock: dict, pc: dict) -> list[dict]:
    out = [_ratio("steady-state step, pcompile / stock", pc.get("steady_step_s"), stock.get("steady_step_s"), None,
                  "should be 1.0 within noise: same kernels"),
           _ratio("GPU kernel time per step, pcompile / stock", pc.get("kernel_ms_per_step"),
                  stock.get("kernel_ms_per_step"), None, "profiler; same kernels give 1.0")]
    d = _loss_delta(stock, pc)
    out.append({"name": "max abs loss difference over the steps", "value": d, "target": None, "met": None,
                "note": "bf16 noise expected" if d is not None else "not measured"})
    return out


def scenario(name: str, p: Plan) -> dict:
    """Run one scenario for one model; returns its row (cases, ratios, notes)."""
    fn = {"cold": _cold, "hot": _hot, "warm": _warm, "shared": _shared, "ranks": _ranks_scn, "remote": _remote,
          "ddp": _ddp_scn}[name]
    t0 = time.monotonic()
    cases, ratios, notes = fn(p)
    return {"scenario": name, "model": p.model, "steps": p.opts.steps, "seconds": round(time.monotonic() - t0, 1),
            "cases": {k: summarize(v) for k, v in cases.items()}, "ratios": ratios, "notes": notes}


def _cold(p: Plan):
    s, c = p.case("stock-cold"), p.case("pcompile-cold")
    cases = {"stock-cold": s, "pcompile-cold": c}
    ratios = [_ratio("first step, pcompile cold / stock cold", c.get("first_step_s"), s.get("first_step_s"), 0.7)]
    for label, env in p.opts.cold_variants:  # diagnostics: the same cold case with some settings changed
        name = f"pcompile-cold-{label}"
        if name not in p.memo:
            p.memo[name] = p.one(name, "pcompile", dict(p.dirs(name).env(), **env))
        cases[name] = v = p.memo[name]
        ratios.append(_ratio(f"first step, pcompile cold ({label}: {' '.join(f'{k}={x}' for k, x in env.items())}) / stock cold",
                             v.get("first_step_s"), s.get("first_step_s"), None))
    return cases, ratios + _common(s, c), []


def _hot(p: Plan):
    s, c = p.case("stock-hot"), p.case("pcompile-hot")
    sc, cc = p.case("stock-cold"), p.case("pcompile-cold")
    cases = {"stock-cold": sc, "stock-hot": s, "pcompile-cold": cc, "pcompile-hot": c}
    extra, repeat_ratios = _hot_repeats(p, s, c)
    cases.update(extra)
    ratios = [_ratio("first step, pcompile hot / stock hot", c.get("first_step_s"), s.get("first_step_s"),
                     None if repeat_ratios else 1.0), *repeat_ratios,
              _ratio("first step, pcompile hot / stock cold", c.get("first_step_s"), sc.get("first_step_s"), None)]
    return cases, ratios + _common(s, c), []


def _hot_repeats(p: Plan, s: dict, c: dict) -> tuple[dict, list[dict]]:
    """With --repeats N: N stock-hot / pcompile-hot pairs, alternating, judged on their medians
    (identical hot processes of a few seconds differ by up to ~25%); each --hot-variant runs N
    times on pcompile-cold's populated caches (after one uncounted priming run) and is compared
    with stock hot's median too."""
    if s.get("error") or c.get("error"):
        return {}, []
    cases: dict = {}
    stock_t, pc_t = [s.get("first_step_s")], [c.get("first_step_s")]
    variant_t: dict[str, list] = {label: [] for label, _ in p.opts.hot_variants}
    for label, env in p.opts.hot_variants:  # a variant's first run may write what it reads (programs): not counted
        cases[f"pcompile-hot-{label}-prime"] = p.one(f"pcompile-hot-{label}-prime", "pcompile", dict(p.dirs("pc").env(), **env))
    for i in range(1, p.opts.repeats + 1):
        if p.opts.time_left() < 90:
            break
        if i > 1:
            cases[f"stock-hot-r{i}"] = r_s = p.one(f"stock-hot-r{i}", "stock", p.dirs("stock").env())
            cases[f"pcompile-hot-r{i}"] = r_c = p.one(f"pcompile-hot-r{i}", "pcompile", p.dirs("pc").env())
            stock_t.append(r_s.get("first_step_s"))
            pc_t.append(r_c.get("first_step_s"))
        for label, env in p.opts.hot_variants:
            name = f"pcompile-hot-{label}" + (f"-r{i}" if i > 1 else "")
            cases[name] = r_v = p.one(name, "pcompile", dict(p.dirs("pc").env(), **env))
            variant_t[label].append(r_v.get("first_step_s"))
    ratios = []
    if len(stock_t) > 1:
        ratios.append(_median_ratio("first step, pcompile hot / stock hot (medians)", pc_t, stock_t, 1.0))
    for label, env in p.opts.hot_variants:
        what = f"{label}: {' '.join(f'{k}={x}' for k, x in env.items())}"
        ratios.append(_median_ratio(f"first step, pcompile hot ({what}) / stock hot (medians)", variant_t[label], stock_t, None))
    return cases, ratios


def _median_ratio(name: str, nums: list, dens: list, target: float | None) -> dict:
    a = [x for x in nums if x is not None]
    b = [x for x in dens if x is not None]
    if not a or not b:
        return _ratio(name, None, None, target)
    note = f"{', '.join(f'{x:.2f}' for x in a)} s against {', '.join(f'{x:.2f}' for x in b)} s"
    return _ratio(name, statistics.median(a), statistics.median(b), target, note)


def _warm(p: Plan):
    # Stock first: the first GPU process after the machine starts pays one-time costs (libraries
    # into the page cache, driver state) that the cases after it do not.
    sc, s = p.case("stock-cold"), p.case("stock-hot")
    w = p.case("pcompile-warm")
    c = p.case("pcompile-after-warm")
    notes = []
    if not w.get("error"):
        notes.append(f"warm on this host took {w.get('wall_s')} s; GPU used by the warm process: {w.get('gpu_used_by_warm')}")
    if c.get("device") == "cpu":
        notes.append("the job after the warm ran on cpu (no GPU here), the warm compiled CUDA graphs: misses are "
                     "expected; this run checks the plumbing only")
    if not c.get("error"):
        sc_ = summarize(c)
        notes.append(f"GPU job after warm: FX graph misses {sc_['fxgraph_miss']}, AOTAutograd misses {sc_['aot_miss']}, "
                     f"pcompile lookups hit {sc_.get('pcompile_lookups', '-')} (target: every graph a hit)")
    extra_cases, repeat_ratios = _warm_repeats(p, s, c)  # before -bench: it publishes measured winners
    b, n = p.case("pcompile-after-warm-bench"), p.case("pcompile-next-job")
    rw = p.case("pcompile-rewarm") if p.opts.time_left() >= 120 else {"error": "skipped: the budget ran out"}
    if rw.get("written") is not None:
        notes.append(f"rewarm into the same store after the GPU jobs: {rw['wall_s']} s, wrote {rw['written']['fxgraph']} FX, "
                     f"{rw['written']['aotautograd']} AOTAutograd entries and {rw['written']['triton']} cubins "
                     "(target: nothing lowered or compiled)")
    single = None if repeat_ratios else 1.1  # with repeats, the target is judged on the medians
    ratios = [
        _ratio("first step, after warm / stock hot", c.get("first_step_s"), s.get("first_step_s"), single,
               "predicted autotune winners (default)" + ("; first pair only" if repeat_ratios else "")),
        *repeat_ratios,
        _ratio("first step, after warm / stock cold", c.get("first_step_s"), sc.get("first_step_s"), None),
        _ratio("first step, after warm, PCOMPILE_AUTOTUNE=benchmark / stock hot", b.get("first_step_s"),
               s.get("first_step_s"), None, "benchmarks the predicted kernels, publishes winners"),
        _ratio("first step, next job after that / stock hot", n.get("first_step_s"), s.get("first_step_s"), None,
               "measured winners from the job before"),
        _ratio("GPU kernel time per step, predicted winners / measured winners", c.get("kernel_ms_per_step"),
               b.get("kernel_ms_per_step"), None, "the cost of not benchmarking"),
        _ratio("GPU kernel time per step, predicted winners / stock hot", c.get("kernel_ms_per_step"),
               s.get("kernel_ms_per_step"), None),
    ]
    cases = {"pcompile-warm": w, "pcompile-after-warm": c, "pcompile-after-warm-bench": b, "pcompile-next-job": n,
             "pcompile-rewarm": rw,
             "stock-cold": sc, "stock-hot": s, **extra_cases}
    return cases, ratios + _common(sc, c), notes


def _warm_repeats(p: Plan, s: dict, c: dict) -> tuple[dict, list[dict]]:
    """More stock-hot / after-warm pairs, alternating, each after-warm on fresh local dirs:
    single first-step samples of a few seconds differ by 10-20% between identical processes."""
    if p.opts.repeats <= 1 or s.get("error") or c.get("error"):
        return {}, []
    cases: dict = {}
    stock_t, warm_t = [s.get("first_step_s")], [c.get("first_step_s")]
    for i in range(2, p.opts.repeats + 1):
        if p.opts.time_left() < 120:
            break
        r_s = p.one(f"stock-hot-r{i}", "stock", p.dirs("stock").env())
        env = p.dirs(f"after-warm-r{i}").env(pcompile_dir=p.dirs("warm").pcompile)
        r_c = p.one(f"pcompile-after-warm-r{i}", "pcompile", env)
        cases[f"stock-hot-r{i}"], cases[f"pcompile-after-warm-r{i}"] = r_s, r_c
        stock_t.append(r_s.get("first_step_s"))
        warm_t.append(r_c.get("first_step_s"))
    pairs = [(a, b) for a, b in zip(warm_t, stock_t) if a is not None and b is not None]
    if len(pairs) < 2:
        return cases, []
    return cases, [_median_ratio("first step, after warm / stock hot (medians)", [a for a, _ in pairs], [b for _, b in pairs], 1.1)]


def _shared(p: Plan):
    pop, c, s = p.case("pcompile-populate-tiers"), p.case("pcompile-shared"), p.case("stock-hot")
    return ({"pcompile-populate-tiers": pop, "pcompile-shared": c, "stock-hot": s},
            [_ratio("first step, empty local + shared tier / stock hot local", c.get("first_step_s"),
                    s.get("first_step_s"), 1.15)] + _common(s, c), [])


def _remote(p: Plan):
    pop, c, s = p.case("pcompile-populate-tiers"), p.case("pcompile-remote"), p.case("stock-hot")
    cases = {"pcompile-populate-tiers": pop, "pcompile-remote": c, "stock-hot": s}
    ratios = [_ratio("first step, empty local + remote tier / stock hot local", c.get("first_step_s"),
                     s.get("first_step_s"), None)]
    if p.opts.stock_remote:
        sr = p.case("stock-remote")
        cases["stock-remote"] = sr
        ratios.append(_ratio("first step, pcompile remote / stock's own Redis remote cache", c.get("first_step_s"),
                             sr.get("first_step_s"), None,
                             "stock remote caches FX graphs/AOT/autotune only; Triton kernels still compile"))
    return cases, ratios + _common(s, c), []


def _ranks_scn(p: Plan):
    sr, cr = p.case("stock-ranks"), p.case("pcompile-ranks")
    sc, cc = p.case("stock-cold"), p.case("pcompile-cold")
    n = p.opts.ranks

    def agg(rs: list[dict]) -> dict:
        ok = [r for r in rs if not r.get("error")]
        firsts = [r["first_step_s"] for r in ok if r.get("first_step_s") is not None]
        cpu = [r["compile_cpu_s"] for r in ok if r.get("compile_cpu_s") is not None]
        ru = [r["rusage_cpu_s"] for r in ok if r.get("rusage_cpu_s") is not None]
        return {"ok": len(ok), "slowest_first_step_s": max(firsts) if firsts else None,
                "fastest_first_step_s": min(firsts) if firsts else None,
                "median_first_step_s": statistics.median(firsts) if firsts else None,
                "compile_cpu_s_total": round(sum(cpu), 2) if len(cpu) == n else None,
                "rusage_cpu_s_total": round(sum(ru), 2) if len(ru) == n else None,
                "machine_cpu_s_all": rs[0].get("machine_cpu_s_all") if rs else None}

    a, b = agg(sr), agg(cr)
    def fmt(x: dict) -> str:
        return (f"{x['ok']}/{n} ok, first step {_f(x['fastest_first_step_s'])}-{_f(x['slowest_first_step_s'])} s, "
                f"compile CPU-s total {_f(x['compile_cpu_s_total'])}, rusage CPU-s total {_f(x['rusage_cpu_s_total'])}, "
                f"machine CPU-s {_f(x['machine_cpu_s_all'])}")

    notes = [f"{n} processes started at once, one cache dir per side", f"stock: {fmt(a)}", f"pcompile: {fmt(b)}",
             "compile CPU-s = CPU of a process and its descendants during its first step (psutil); "
             "rusage = whole-process CPU incl. reaped children (os.wait4); machine = all cores, /proc/stat, "
             "whole launch (includes imports)"]
    ratios = [
        _ratio(f"pcompile {n} ranks: total compile CPU-s / one process's", b["compile_cpu_s_total"],
               cc.get("compile_cpu_s"), 1.25),
        _ratio(f"pcompile {n} ranks: slowest first step / stock single cold", b["slowest_first_step_s"],
               sc.get("first_step_s"), 1.1),
        _ratio(f"stock {n} ranks: total compile CPU-s / one process's", a["compile_cpu_s_total"],
               sc.get("compile_cpu_s"), None, "the baseline: stock compiles once per rank"),
        _ratio(f"slowest first step, pcompile / stock, {n} ranks", b["slowest_first_step_s"],
               a["slowest_first_step_s"], None),
        _ratio(f"machine CPU-s of the {n}-rank launch, pcompile / stock", b["machine_cpu_s_all"],
               a["machine_cpu_s_all"], None, "catches compile daemons that are no process's child"),
    ]
    cases = {"stock-cold": sc, "pcompile-cold": cc, "stock-ranks": sr, "pcompile-ranks": cr}
    return cases, ratios, notes


def _ddp_job(p: Plan, backend: str, label: str, dirs: str) -> list[dict]:
    """One DDP job: --ranks processes of one process group, one cache dir per side (a node's)."""
    port = str(H.free_port())
    return _ranks(p, backend, label, dirs, {"BENCH_DDP": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})


def _ddp_scn(p: Plan):
    """Issue 33's DDP row: a DDP job (DDP-wrapped, then compiled) cold on each side, then --repeats
    restarts of each on its own caches, the order alternating. Judged on the slowest rank, as the
    job waits for it: its first step (the `torch.compile` call included) and its process start to
    the end of that step, medians of the restarts."""
    n = p.opts.ranks
    cases: dict[str, Any] = {"stock-ddp-cold": _ddp_job(p, "stock", "stock-ddp-cold", "stock-ddp"),
                             "pcompile-ddp-cold": _ddp_job(p, "pcompile", "pcompile-ddp-cold", "pc-ddp")}
    firsts: dict[str, list] = {"stock": [], "pcompile": []}
    ends: dict[str, list] = {"stock": [], "pcompile": []}
    for i in range(1, p.opts.repeats + 1):
        if p.opts.time_left() < 90:
            break
        for side in (("stock", "pcompile") if i % 2 else ("pcompile", "stock")):
            label = f"{side}-ddp-hot-r{i}"
            cases[label] = rs = _ddp_job(p, side, label, "stock-ddp" if side == "stock" else "pc-ddp")
            ok = [r for r in rs if not r.get("error")]
            if len(ok) == n:
                firsts[side].append(max(r["first_step_s"] for r in ok))
                e = [(r.get("floor") or {}).get("process_to_first_step_end_s") for r in ok]
                if None not in e:
                    ends[side].append(max(e))
    ratios = [_median_ratio(f"slowest rank's first step, pcompile / stock, DDP restart, {n} ranks (medians)",
                            firsts["pcompile"], firsts["stock"], 0.5),
              _median_ratio(f"slowest rank's process start to first step end, pcompile / stock, DDP restart (medians)",
                            ends["pcompile"], ends["stock"], 0.7)]
    r0 = [rs[0] for rs in (cases.get("stock-ddp-hot-r1"), cases.get("pcompile-ddp-hot-r1")) if rs]
    if len(r0) == 2:
        d = _loss_delta(r0[0], r0[1])
        ratios.append({"name": "max abs loss difference, rank 0, first restart", "value": d, "target": None,
                       "met": None, "note": "bf16 noise expected" if d is not None else "not measured"})
    pg = next((r.get("ddp") for rs in cases.values() for r in rs if r.get("ddp")), None)
    notes = [f"{n} ranks of one DDP job per side, process group {pg}", f"stock first steps {firsts['stock']}",
             f"pcompile first steps {firsts['pcompile']}"]
    return cases, ratios, notes


# ---------------------------------------------------------------- CLI shared by the scenario scripts

def add_args(ap: argparse.ArgumentParser, default_models: str = "gpt2,llama,resnet50") -> None:
    ap.add_argument("--models", default=None, help=f"comma-separated (default {default_models}; "
                                                   f"with --quick: tiny-gpt2,tiny-llama,tiny-resnet)")
    ap.add_argument("--steps", type=int, default=None, help="training steps per case (default 20; --quick: 3)")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--amp", choices=("auto", "bf16", "none"), default="auto", help="auto: bf16 on cuda, none on cpu")
    ap.add_argument("--ranks", type=int, default=None, help="processes for the ranks scenario (default 4; --quick: 2)")
    ap.add_argument("--quick", action="store_true", help="tiny models on CPU: a smoke test, not a measurement")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per case")
    ap.add_argument("--work-dir", type=Path, default=None, help="where fresh cache dirs go (default: a new temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (cache dirs, logs, per-case JSON)")
    ap.add_argument("--repeats", type=int, default=1, help="warm and hot scenarios: stock-hot / after-warm (or pcompile-hot) pairs, compared by medians")
    ap.add_argument("--cold-variant", action="append", default=[], dest="cold_variants", metavar="LABEL:K=V[,K=V]",
                    help="an extra pcompile cold case with these environment variables (repeat), e.g. pool-off:PCOMPILE_POOL=off")
    ap.add_argument("--hot-variant", action="append", default=[], dest="hot_variants", metavar="LABEL:K=V[,K=V]",
                    help="an extra pcompile hot case (each repeat) on pcompile-cold's caches with these environment variables")
    ap.add_argument("--warm-arg", action="append", default=[], dest="warm_args",
                    help="extra argument for `pcompile warm` (repeat), e.g. --warm-arg=--target --warm-arg=h100.json")
    ap.add_argument("--no-stock-remote", action="store_true", help="remote scenario: skip stock's own Redis cache")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    ap._default_models = default_models  # type: ignore[attr-defined]


def _variant(text: str) -> tuple[str, dict[str, str]]:
    label, _, assigns = text.partition(":")
    env = dict(a.split("=", 1) for a in assigns.split(",") if "=" in a)
    if not label or not env or not label.replace("-", "").isalnum():
        raise SystemExit(f"--cold-variant {text!r}: expected LABEL:NAME=VALUE[,NAME=VALUE], e.g. pool-off:PCOMPILE_POOL=off")
    return label, env


def options(args: argparse.Namespace, default_models: str) -> Options:
    models = args.models or ("tiny-gpt2,tiny-llama,tiny-resnet" if args.quick else default_models)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="pcompile-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    return Options(models=[m.strip() for m in models.split(",") if m.strip()],
                   steps=args.steps or (3 if args.quick else 20),
                   device=args.device or ("cpu" if args.quick else None), amp=args.amp,
                   ranks=args.ranks or (2 if args.quick else 4), timeout_s=args.timeout, work_dir=work,
                   log_dir=work / "logs", warm_args=list(args.warm_args), stock_remote=not args.no_stock_remote,
                   cold_variants=[_variant(v) for v in args.cold_variants],
                   hot_variants=[_variant(v) for v in args.hot_variants], repeats=max(1, args.repeats))


def run_scenarios(names: list[str], opts: Options, on_row: Callable[[dict], None] | None = None,
                  order: str = "scenario", skip: set[tuple[str, str]] = frozenset(),
                  min_left_s: float = 30.0) -> list[dict]:
    """Run scenarios x models (scenario-major by default), stopping when the deadline nears."""
    services = Services(opts.work_dir)
    plans = {m: Plan(m, opts, services) for m in opts.models}
    pairs = ([(s, m) for s in names for m in opts.models] if order == "scenario"
             else [(s, m) for m in opts.models for s in names])
    rows = []
    try:
        for s, m in pairs:
            if (s, m) in skip:
                continue
            known = plans[m].memo.get("stock-cold")
            need = max(min_left_s, 1.1 * float(known.get("process_wall_s") or 0)) if isinstance(known, dict) else min_left_s
            if opts.time_left() < need:  # not even one more case of this model would fit
                rows.append({"scenario": s, "model": m, "skipped": "time budget spent"})
                H._say(f"== {s} / {m}: skipped, time budget spent")
                continue
            H._say(f"== {s} / {m}")
            row = scenario(s, plans[m])
            rows.append(row)
            print_row(row)
            if on_row:
                on_row(row)
    finally:
        services.close()
    return rows


def print_row(row: dict) -> None:
    if row.get("skipped"):
        return
    H._say(f"-- {row['scenario']} / {row['model']} ({row['seconds']} s)")
    hdr = (f"   {'case':<28}{'first step s':>13}{'steady ms':>11}{'compile CPU-s':>15}{'fx hit/miss':>13}"
           f"{'aot hit/miss':>14}{'pcompile hits':>15}{'frames':>8}")
    H._say(hdr)
    for name, c in row["cases"].items():
        for sub_name, sub in ([(f"{name}[{i}]", r) for i, r in enumerate(c["ranks"])] if "ranks" in c else [(name, c)]):
            if sub.get("error"):
                H._say(f"   {sub_name:<28}  {sub['error'][:110]}")
                continue
            st = sub.get("steady_step_s")
            H._say(f"   {sub_name:<28}{_f(sub.get('first_step_s')):>13}{_f(st * 1000 if st else None):>11}"
                   f"{_f(sub.get('compile_cpu_s')):>15}{str(sub['fxgraph_hit']) + '/' + str(sub['fxgraph_miss']):>13}"
                   f"{str(sub['aot_hit']) + '/' + str(sub['aot_miss']):>14}{sub.get('pcompile_lookups', '-'):>15}"
                   f"{sub.get('frames_traced', '-'):>8}")
    for r in row["ratios"]:
        mark = "" if r["met"] is None else ("  [target <= %g: met]" % r["target"] if r["met"]
                                             else "  [target <= %g: NOT met]" % r["target"])
        H._say(f"   {r['name']}: {_f(r['value'], 3)}{mark}" + (f"  ({r['note']})" if r.get("note") else ""))
    for n in row.get("notes", []):
        H._say(f"   note: {n}")


def _f(v: Any, nd: int = 2) -> str:
    return "-" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))


def main_for(scn: str, doc: str) -> int:
    """The entry of benchmarks/<scenario>.py: one scenario over the chosen models."""
    import json

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(ap)
    args = ap.parse_args()
    opts = options(args, "gpt2,llama,resnet50")
    H._say(f"work dir {opts.work_dir}")
    try:
        rows = run_scenarios([scn], opts)
    finally:
        if not args.keep:
            shutil.rmtree(opts.work_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 0 if all(not _any_error(r) for r in rows) else 1


def _any_error(row: dict) -> bool:
    for c in row.get("cases", {}).values():
        for sub in c.get("ranks", [c]):
            err = str(sub.get("error") or "")
            if err and (not err.startswith("skipped") or "budget" in err):  # other skips are permanent
                return True
    return False
