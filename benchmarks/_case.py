"""One benchmark case in its own process: build a model, compile it, time a few training steps
(or, with BENCH_INFERENCE=1, forward-only steps under inference_mode).

Run by the scenario scripts (never imported by them), and also usable under `pcompile warm`,
which runs it on a virtual CUDA device: then no timing or `.item()` is done (the values are fake).

    python benchmarks/_case.py --model gpt2 --backend stock --steps 20 --result out.json
"""
from __future__ import annotations

import time

T_START = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))


def _warming() -> bool:
    try:
        import pcompile

        return pcompile.warming()
    except ImportError:
        return os.environ.get("PCOMPILE_WARMING") == "1"


def _cpu_seconds() -> float:
    """CPU seconds of this process and all its descendants so far (compile workers included)."""
    try:
        import psutil

        me = psutil.Process()
        t = me.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in me.children(recursive=True):
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.Error:
                pass
        return total
    except ImportError:
        import resource

        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _counters() -> dict:
    from torch._dynamo.utils import counters

    out = {}
    for section in ("inductor", "aot_autograd", "stats", "frames"):
        out[section] = {k: v for k, v in counters[section].items() if isinstance(v, int)}
    return out


_TIMELINE_KINDS = ("graph_compile", "backward_worker_start", "backward_ship", "backward_ahead")


def _events_summary(step0_wall: float | None = None) -> dict | None:
    """pcompile's own view of this process's job: lookups per layer/tier and outcomes, and when
    (seconds from the first step's start) its graphs and backward-ahead events happened."""
    try:
        from pcompile.events import analysis, job_id, log_path, reader

        path = log_path()
        if not path.exists():
            return None
        evs, bad = reader.load(path)
        s = analysis.analyze([e for e in evs if e.get("pid") == os.getpid()], job=job_id()).summary()
        a = analysis.analyze(evs, job=job_id())
        timeline = [{"kind": e["kind"], "t": round(e["ts"] - step0_wall, 2), "dur": round(e.get("dur", 0.0), 2),
                     **{k: e[k] for k in ("outcome", "waited_for_claim_s", "restrided", "differs", "differences")
                        if e.get(k) is not None}}
                    for e in evs if e.get("pid") == os.getpid() and e.get("kind") in _TIMELINE_KINDS
                    and step0_wall is not None and "ts" in e]
        return {"job": job_id(), "log": str(path), "lookups": a.lookups, "graph_outcomes": s["graph_outcomes"],
                "kernel_outcomes": s["kernel_outcomes"], "saved": s["saved"], "critical_by_kind": s["critical_by_kind"],
                "timeline": timeline}
    except Exception as exc:  # the summary is extra information, never a reason to fail a case
        return {"error": f"{type(exc).__name__}: {exc}"}


def _thread_cpu_delta(before: dict[int, tuple[str, float]], main_tid: int) -> dict[str, float]:
    """Per-thread-group CPU seconds since `before` (groups: names with their numbers stripped)."""
    from _cpu_sampler import thread_cpu, thread_group

    groups: dict[str, float] = {}
    for tid, (name, cpu) in thread_cpu().items():
        spent = cpu - (before.get(tid, (name, 0.0))[1])
        group = "main" if tid == main_tid else thread_group(name)
        groups[group] = groups.get(group, 0.0) + spent
    return {k: round(v, 2) for k, v in sorted(groups.items(), key=lambda kv: -kv[1]) if v >= 0.01}


def _machine_busy_s() -> float | None:
    """CPU seconds all processes of the machine spent busy so far (who else competed for the cores)."""
    try:
        import psutil

        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0)
    except Exception:
        return None


def _phases() -> dict[str, float]:
    """Inductor/Dynamo's own phase timers (wall seconds, summed over calls), largest first."""
    try:
        from torch._dynamo.utils import compilation_time_metrics

        totals = {k: sum(v) for k, v in compilation_time_metrics.items()}
        return {k: round(v, 3) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])[:40] if v >= 0.01}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}  # type: ignore[dict-item]


def _kernel_ms_per_step(step, sync, n: int) -> float | None:
    """GPU time in kernels per step (profiler, after the timed steps): compares the kernels two
    processes chose without the CPU-side noise of wall-clock steps of a few ms."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                step()
            sync()
        total_us = sum(e.self_device_time_total for e in prof.key_averages())
        return round(total_us / 1000.0 / n, 3)
    except Exception as exc:  # a profiler that cannot start is a missing column, not a failed case
        print(f"kernel time not measured: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def _process_started_wall() -> float | None:
    """When the OS started this process (the restart floor counts from there, interpreter included)."""
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:
        return None


def _time_cubin_loads() -> dict[str, float]:
    """Diagnostics for the restart floor: wall seconds and count of Triton's per-kernel module loads
    and launcher builds (`CompiledKernel._init_handles`), wrapped here in the benchmark only."""
    tally = {"s": 0.0, "n": 0}
    try:
        from triton.compiler import compiler as tc

        original = tc.CompiledKernel._init_handles

        def timed(self):  # type: ignore[no-untyped-def]
            if getattr(self, "module", None) is not None:
                return original(self)
            t0 = time.perf_counter()
            try:
                return original(self)
            finally:
                tally["s"] += time.perf_counter() - t0
                tally["n"] += 1

        tc.CompiledKernel._init_handles = timed
    except Exception:
        pass
    return tally


def _ddp_start(torch, device: str) -> dict:  # type: ignore[no-untyped-def]
    """BENCH_DDP=1 (the ddp scenario): join the job's process group before the model is built.
    Ranks that share one GPU (no 2-GPU machine lent: N processes stand in for a node's ranks) use
    gloo, since NCCL refuses two ranks on one device; with a GPU per rank, NCCL."""
    import torch.distributed as dist

    world, local = int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0"))
    gpus = torch.cuda.device_count() if device == "cuda" else 0
    if device == "cuda":
        torch.cuda.set_device(local % gpus)
    pg = "nccl" if device == "cuda" and gpus >= world else "gloo"
    dist.init_process_group(pg)
    return {"world_size": world, "process_group": pg, "gpus": gpus}


def run(args: argparse.Namespace) -> dict:
    t_import = time.perf_counter()
    import torch

    import_torch_s = time.perf_counter() - t_import

    import _models

    warming = _warming()
    device = args.device or ("cuda" if (torch.cuda.is_available() or warming) else "cpu")
    res: dict = {"model": args.model, "backend": args.backend, "device": device, "pid": os.getpid(),
                 "rank": os.environ.get("RANK"), "warming": warming, "torch": torch.__version__}
    ddp = _ddp_start(torch, device) if os.environ.get("BENCH_DDP") == "1" and not warming else None
    if ddp is not None:
        res["ddp"] = ddp
    # The restart floor's parts (issue 21): interpreter start, `import torch`, CUDA init, model build.
    started = _process_started_wall()
    floor: dict[str, float] = {"import_torch_s": round(import_torch_s, 3)}
    if started is not None:
        floor["interpreter_s"] = round(T_START - started, 3)
    if device == "cuda" and not warming:
        t_cuda = time.perf_counter()
        torch.cuda.init()
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
        floor["cuda_init_s"] = round(time.perf_counter() - t_cuda, 3)
    cubins = _time_cubin_loads() if device == "cuda" and not warming else None
    t_build = time.perf_counter()
    try:
        import triton

        res["triton"] = triton.__version__
    except ImportError:
        res["triton"] = None
    if device == "cuda" and not warming:
        res["gpu"] = torch.cuda.get_device_name(0)
        res["cuda"] = torch.version.cuda
    w = _models.build(args.model, device)
    res["description"] = w.description
    res["params_m"] = round(sum(p.numel() for p in w.model.parameters()) / 1e6, 1)
    floor["model_build_s"] = round(time.perf_counter() - t_build, 3)
    backend = "pcompile" if args.backend == "pcompile" else "inductor"
    # torch.compile(...) itself is timed into the first step: pcompile acts at this call (it
    # imports Inductor's compiler and turns its hooks on), stock does little here.
    kwargs = dict(w.compile_kwargs)
    if os.environ.get("BENCH_COMPILE_MODE"):  # e.g. max-autotune: steady state on tuned winners (issue 24 item 4)
        kwargs["mode"] = res["compile_mode"] = os.environ["BENCH_COMPILE_MODE"]
    t_compile = time.perf_counter()
    target = w.model
    if ddp is not None:  # torch's recommended order for DDP: wrap, then compile (DDPOptimizer splits by bucket)
        from torch.nn.parallel import DistributedDataParallel

        target = DistributedDataParallel(w.model, device_ids=[torch.cuda.current_device()] if device == "cuda" else None)
    cmodel = torch.compile(target, backend=backend, **kwargs)
    res["compile_call_s"] = round(time.perf_counter() - t_compile, 4)
    opt = torch.optim.AdamW(w.model.parameters(), lr=1e-4, fused=(device == "cuda") or None)
    amp = args.amp if args.amp != "auto" else ("bf16" if device == "cuda" else "none")
    res["amp"] = amp
    # An inference loop (issue 34's GPT-2 max-autotune row): the forward alone, under inference_mode.
    inference = os.environ.get("BENCH_INFERENCE") == "1"
    res["workload"] = "inference" if inference else "training"
    if inference:
        w.model.eval()

    def step():
        if inference:
            with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16,
                                                         enabled=(amp == "bf16")):
                return w.loss(cmodel, w.batch)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=(amp == "bf16")):
            loss = w.loss(cmodel, w.batch)
        loss.backward()
        opt.step()
        return loss

    def sync() -> None:
        if device == "cuda" and not warming:
            torch.cuda.synchronize()

    steps = min(args.steps, 2) if warming else args.steps
    sync()
    res["startup_s"] = round(time.time() - T_START, 3)  # imports + model build, before any compile
    cpu0 = _cpu_seconds()
    from _cpu_sampler import thread_cpu

    threads0, busy0, main_tid = thread_cpu(), _machine_busy_s(), threading.get_native_id()
    from _gc_clock import GcClock

    gc_clock = GcClock().start()
    sampler = None
    if os.environ.get("PCOMPILE_BENCH_CPU_SAMPLE") == "1" and not warming:  # diagnostics: who used the CPUs, when
        from _cpu_sampler import CpuSampler

        sampler = CpuSampler().start()
    times, losses = [], []
    prof_path = os.environ.get("PCOMPILE_BENCH_PROFILE_DIR")
    only = [x for x in os.environ.get("PCOMPILE_BENCH_PROFILE_LABELS", "").split(",") if x]
    if only and not (args.result and any(args.result.stem.endswith(x) for x in only)):
        prof_path = None
    res["first_step_start_wall"] = time.time()
    for i in range(steps):
        t0 = time.perf_counter()
        if i == 0 and prof_path and not warming:  # diagnostics: where the first step's CPU time goes
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
            loss = step()
            sync()
            prof.disable()
            os.makedirs(prof_path, exist_ok=True)
            prof.dump_stats(os.path.join(prof_path, f"{args.result.stem if args.result else args.model}.prof"))
        else:
            loss = step()
            sync()
        times.append(time.perf_counter() - t0)
        if not warming:
            losses.append(float(loss.detach().float().item()))
        if i == 0:
            res["compile_cpu_s"] = round(_cpu_seconds() - cpu0, 3)  # first step: compile + one run
            res["first_step_end_wall"] = time.time()
            # Where the first step's CPU went: this process's threads, and the whole machine.
            res["threads_cpu_s"] = _thread_cpu_delta(threads0, main_tid)
            busy1 = _machine_busy_s()
            res["machine_busy_first_step_s"] = round(busy1 - busy0, 2) if busy0 is not None and busy1 is not None else None
            res["phases_s"] = _phases()
            if cubins is not None:
                floor["cubin_loads_s"] = round(cubins["s"], 3)
                floor["cubin_loads_n"] = cubins["n"]
            if started is not None:
                floor["process_to_first_step_end_s"] = round(res["first_step_end_wall"] - started, 3)
            res["floor"] = floor
            res["gc_first_step"] = gc_clock.stop()
            if sampler is not None:
                sampler.stop()
                res["cpu_by_group_s"] = sampler.totals()
                res["cpu_timeline"] = sampler.timeline()
                if sampler.error:
                    res["cpu_sampler_error"] = sampler.error
    res["first_step_s"] = round(times[0] + res["compile_call_s"], 4) if times else None
    tail = times[2:] if len(times) > 3 else times[1:]  # skip step 2 too: it may recompile
    res["steady_step_s"] = round(statistics.median(tail), 5) if tail else None
    res["step_times_s"] = [round(t, 5) for t in times]
    res["losses"] = losses
    res["counters"] = _counters()
    if device == "cuda" and not warming and args.kernel_steps > 0:
        res["kernel_ms_per_step"] = _kernel_ms_per_step(step, sync, args.kernel_steps)
    if device == "cuda" and not warming:
        res["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    if args.backend == "pcompile":
        res["events"] = _events_summary(res.get("first_step_start_wall"))
        try:
            from pcompile.inductor import pool_install

            res["kernel_router_counts"] = pool_install.counts()
        except Exception:
            pass
    return res


def _ddp_end() -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", choices=("stock", "pcompile"), required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--amp", choices=("auto", "bf16", "none"), default="auto", help="auto: bf16 autocast on cuda only")
    ap.add_argument("--result", type=Path, default=None, help="write the result JSON here")
    ap.add_argument("--kernel-steps", type=int, default=5, help="extra profiled steps for GPU kernel time per step (0: off)")
    args = ap.parse_args()
    try:
        res = run(args)
        rc = 0
    except BaseException as exc:  # record why, so a failed case is a row, not a hole
        res = {"model": args.model, "backend": args.backend, "error": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc()[-4000:]}
        rc = 1
    res["process_wall_s"] = round(time.time() - T_START, 3)
    _ddp_end()
    text = json.dumps(res, indent=1, default=str)
    if args.result and not res.get("warming"):
        args.result.parent.mkdir(parents=True, exist_ok=True)
        args.result.write_text(text)
    print(f"CASE {args.backend} {args.model}: first step {res.get('first_step_s')} s, "
          f"steady {res.get('steady_step_s')} s{' ERROR ' + res['error'] if 'error' in res else ''}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
