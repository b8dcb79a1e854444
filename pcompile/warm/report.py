"""The end-of-warm report: what was compiled and written, what could not be warmed, and why."""
from __future__ import annotations

from typing import Any


def one_line(text: Any, limit: int = 240) -> str:
    """torch's reasons and errors span lines (a graph, a hint, a traceback excerpt): one summary
    line each, whitespace folded, long ones cut."""
    folded = " ".join(str(text).split())
    return folded if len(folded) <= limit else folded[: limit - 3] + "..."


def _c(report: dict[str, Any], group: str, key: str) -> int:
    return int(report.get("counters", {}).get(group, {}).get(key, 0))


def coverage(report: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(hits, lookups) per graph-cache layer as seen by this run, before it wrote anything."""
    fx_hit, fx_miss = _c(report, "inductor", "fxgraph_cache_hit"), _c(report, "inductor", "fxgraph_cache_miss")
    aot_hit, aot_miss = _c(report, "aot_autograd", "autograd_cache_hit"), _c(report, "aot_autograd", "autograd_cache_miss")
    return {"fx_graph": (fx_hit, fx_hit + fx_miss), "aot_autograd": (aot_hit, aot_hit + aot_miss)}


def failure_lines(result: Any) -> list[str]:
    """After a failed warm: the error once, then only what happened before it (what was
    compiled and written, the placeholder reads that may explain it, the user's files)."""
    r = result.report
    steps = int(r.get("steps_done") or 0)
    out = [f"warm failed after {steps} step{'s' if steps != 1 else ''} in {result.seconds:.1f}s: {one_line(r.get('error') or 'unknown error', 2000)}"]
    out.extend(_lookups(result))
    w = result.written
    if any(w.values()):
        out.append(f"before the failure, written to {result.cache_dir}: {w.get('fxgraph', 0)} FX graph entries, "
                   f"{w.get('aotautograd', 0)} AOTAutograd entries, {w.get('triton', 0)} Triton cubins (kept: the next warm reuses them)")
    for rk in r.get("ranks") or []:
        if rk.get("exit_code"):
            out.append(f"rank {rk['rank']} failed: {one_line(rk.get('error'))}")
    out.extend(_reads_and_writes(r))
    return out


def report_lines(result: Any, check: bool = False) -> list[str]:
    r = result.report
    if getattr(result, "failed", False):
        return failure_lines(result)
    out: list[str] = []
    status = r.get("status")
    steps, backwards = r.get("steps_done"), r.get("backward_calls")
    micro = f" ({backwards} backward calls)" if backwards and steps and backwards > steps else ""
    head = {"stopped": f"warm done: {steps} steps{micro}", "completed": "warm done: the script ran to its end"}
    out.append(f"{head.get(status, 'warm failed')} in {result.seconds:.1f}s on a virtual {result.profile.name} ({result.profile.arch}), torch {r.get('torch')}")
    out.extend(_compiled_steps(r))
    if r.get("after_stop"):
        out.append(f"after the stop, the script's cleanup raised {r['after_stop']} (on the interrupted step; "
                   "ignored: the GPU job runs on past that step)")
    w = result.written
    out.extend(_lookups(result, check))
    if getattr(result, "lookups", None) is None:  # events off (PCOMPILE_EVENTS=0): torch's own counters
        cov = coverage(r)
        fx_hit, fx_n = cov["fx_graph"]
        aot_hit, aot_n = cov["aot_autograd"]
        out.append(f"graphs: {fx_n - fx_hit} compiled, {fx_hit} from cache (FX graph); AOTAutograd {aot_n - aot_hit} compiled, "
                   f"{aot_hit} from cache; kernels: {w.get('triton', 0)} Triton cubins compiled")
        if check:
            pct = lambda h, n: f"{100.0 * h / n:.0f}%" if n else "n/a"  # noqa: E731
            out.append(f"coverage before this run: FX graph {fx_hit}/{fx_n} ({pct(fx_hit, fx_n)}), AOTAutograd {aot_hit}/{aot_n} ({pct(aot_hit, aot_n)})")
    aot_saved = _c(r, "aot_autograd", "autograd_cache_saved")
    out.append(f"written to {result.cache_dir}: {w.get('fxgraph', 0)} FX graph entries, {w.get('aotautograd', 0)} AOTAutograd entries, "
               f"{w.get('triton', 0)} Triton cubins" + (f" (AOTAutograd saves through all caches: {aot_saved})" if aot_saved != w.get("aotautograd", 0) else ""))
    bypassed = _c(r, "aot_autograd", "autograd_cache_bypass")
    if bypassed:  # torch's own choice (e.g. DDPOptimizer's split graphs): the GPU job bypasses them too
        reasons = r.get("aot_cache_bypassed") or {}
        why = ("torch's reason: " + "; ".join(f"{one_line(k)} x{n}" for k, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
               if reasons else "torch does not cache them, e.g. DDP's bucket-split graphs")
        out.append(f"not warmed: AOTAutograd of {bypassed} graphs ({why}; "
                   "the GPU job traces them again, then hits their FX graphs and kernels)")
    v = r.get("vdev", {})
    worker_calls = sum(int(s.get("launch", 0)) for s in result.worker_vdev)
    refused, missing = driver_gaps([v, *result.worker_vdev])
    out.append(f"virtual device: {v.get('launch', 0) + worker_calls} native launches swallowed, {v.get('cuModuleLoadData', 0)} kernels loaded, "
               f"{sum(refused.values())} refused driver calls" + _named(refused)
               + (f", {len(missing)} driver entry points or device attributes asked for but not provided" + _named(missing) if missing else ""))
    out.append(f"pcompile backend: {r.get('pcompile_backend', '?')}")
    unsel = r.get("autotune_unselected", {})
    if unsel:
        n_pred = int(r.get("autotune_predicted", 0))
        if n_pred:
            out.append(f"autotune: winners of {len(unsel)} kernels with several configs need GPU timings; predicted {n_pred} "
                       "(Inductor's no-benchmark choice; the GPU job uses them outside max-autotune modes, PCOMPILE_AUTOTUNE)")
        if n_pred < len(unsel):
            reasons = sorted(set((r.get("autotune_not_predicted") or {}).values()))
            if r.get("autotune_predict_error"):
                reasons.insert(0, str(r["autotune_predict_error"]))
            why = f"; no prediction: {'; '.join(reasons)}" if reasons else ""
            out.append(f"not warmed: autotune winners of {len(unsel) - n_pred} kernels with several configs "
                       f"(all configs compiled; the GPU job benchmarks once, then caches{why})")
    bypassed = r.get("fx_cache_bypassed") or {}
    if bypassed:
        why = "; ".join(f"{one_line(reason)} x{n}" for reason, n in sorted(bypassed.items(), key=lambda kv: -kv[1])[:3])
        out.append(f"not warmed: {sum(bypassed.values())} graphs Inductor does not cache ({why}); the GPU job compiles "
                   "them again, only their Triton kernels come from the cache")
    if r.get("cudagraphs_skipped"):
        out.append(f"not warmed: CUDA graph capture of {r['cudagraphs_skipped']} graphs (reduce-overhead, max-autotune: triton.cudagraphs) happens on the GPU's first runs; the graphs themselves are warmed")
    if r.get("pad_mm_guessed"):
        choice = r.get("pad_mm_prediction", "pad")
        out.append(f"predicted: {r['pad_mm_guessed']} pad_mm decisions need GPU timing; took \"{choice}\" (same results; "
                   "a GPU job that hits these graphs keeps that choice; PCOMPILE_WARM_PAD_MM=pad|nopad)")
    left = r.get("left_for_gpu_tuning") or {}
    if left:
        n_timed = sum((r.get("gpu_timings_faked") or {}).values())
        out.append(f"left for the GPU job to tune: {left.get('fx_graph', 0)} FX graphs, {left.get('aot_autograd', 0)} AOTAutograd entries "
                   f"not written ({n_timed} GPU timings asked for: max-autotune choices, fusion benchmarks); every candidate "
                   "kernel was compiled here, so the GPU job only benchmarks them, then publishes the winners for the jobs after it")
    elif r.get("max_autotune"):
        out.append("not warmed: coordinate-descent tuning's timings happen at the GPU job's first launches")
    cd = r.get("coordesc") or {}
    if cd.get("configs") or cd.get("late"):
        late = f"; {cd['late']} kernels' candidates were still compiling when the warm ended" if cd.get("late") else ""
        out.append(f"tuner candidates: compiled {cd.get('configs', 0)} configs around {cd.get('kernels', 0)} kernels the GPU job "
                   f"will coordinate-descent tune (its first rounds load them instead of compiling; "
                   f"PCOMPILE_WARM_COORDESC_STEPS){late}")
    for rk in r.get("ranks") or []:
        c = rk.get("counters") or {}
        fx = c.get("inductor", {})
        aot = c.get("aot_autograd", {})
        out.append(f"rank {rk['rank']}: {rk.get('status') if not rk.get('exit_code') else 'FAILED: ' + str(rk.get('error'))}; "
                   f"FX graph {fx.get('fxgraph_cache_hit', 0)} hit / {fx.get('fxgraph_cache_miss', 0)} compiled, "
                   f"AOTAutograd {aot.get('autograd_cache_hit', 0)} hit / {aot.get('autograd_cache_miss', 0)} compiled")
    out.extend(_reads_and_writes(r))
    from pcompile.warm.runner import software_line

    if software_line(r.get("software") or {}, result.profile.name):
        out.append(software_line(r.get("software") or {}, result.profile.name))
    out.extend(_builtin_note(result))
    out.extend(_threads_note(r))
    for line in result.version_warnings:
        out.append(f"warning: {line}")
    return out


def _lookups(result: Any, check: bool = False) -> list[str]:
    """The cache look-ups this run made (none when events are off: PCOMPILE_EVENTS=0)."""
    looked = getattr(result, "lookups", None)
    if looked is None:
        return []
    from pcompile.store import hits

    w = result.written
    out = [f"cache look-ups: {hits.summary(looked)}" + ("; nothing compiled" if hits.all_hit(looked) and not any(w.values()) else "")]
    if check:
        hit, n = hits.totals(looked)
        out.append(f"coverage before this run: {hit}/{n} look-ups hit ({100.0 * hit / n:.0f}%)" if n else
                   "coverage before this run: no look-ups")
    return out


def _compiled_steps(r: dict[str, Any]) -> list[str]:
    """Steps count only where compiled code ran (pcompile/warm/stop.py): say what did not count, and
    when no compiled code ran at all (the warm then warmed only what compiling alone writes)."""
    eager, replays = int(r.get("eager_steps") or 0), int(r.get("graph_replays") or 0)
    out = []
    if "compiled_runs" in r and not r["compiled_runs"]:
        out.append(f"note: the script ended before any compiled code ran ({eager} eager steps); nothing was run compiled, "
                   "so what its compiled steps would compile is not warmed: does it reach its torch.compile'd code?")
    elif eager:
        out.append(f"steps counted: those that ran compiled code; {eager} eager steps before them (e.g. a baseline) did not count")
    if replays:
        out.append(f"{replays} of the steps were CUDA graph replays")
    return out


def _builtin_note(result: Any) -> list[str]:
    """A built-in profile captured on other versions than this host's: said once, not as a warning."""
    from pcompile.warm.runner import builtin_profile_note

    try:
        note = builtin_profile_note(result.profile, result.report.get("software") or {})
    except Exception:
        return []
    return [note] if note else []


def _threads_note(r: dict[str, Any]) -> list[str]:
    """Programs written under this host's thread count, which the GPU job's guards check (host_threads.py)."""
    from pcompile.settings import PROGRAMS
    from pcompile.warm import host_threads

    threads = r.get("cpu_threads") or {}
    if not PROGRAMS.get():
        return []
    line = host_threads.note(threads.get("count"), threads.get("from"))
    return [line] if line else []


def driver_gaps(stats: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """({refused call: count}, {missing entry point or device attribute: count}) over every
    process's vdev counts: what a new torch/Triton/CUDA build asks of the virtual device that it
    does not answer."""
    refused: dict[str, int] = {}
    missing: dict[str, int] = {}
    for s in stats:
        for key, n in s.items():
            for prefix, into in (("unsupported:", refused), ("entry_point_missing:", missing), ("attr_unknown:", missing)):
                if key.startswith(prefix):
                    into[key[len(prefix):]] = into.get(key[len(prefix):], 0) + int(n)
    return refused, missing


def _named(counts: dict[str, int]) -> str:
    return f" ({', '.join(f'{k} x{n}' for k, n in sorted(counts.items()))})" if counts else ""


def _some(items: list[str], n: int, shown: int = 3) -> str:
    """The first `shown` of `n` items, and how many more: the count and the list always agree."""
    more = n - min(shown, len(items))
    return "; ".join(items[:shown]) + (f"; and {more} more" if more > 0 else "")


def _reads_and_writes(r: dict[str, Any]) -> list[str]:
    """Where the script read GPU values (zeros during warm) and what happened to its file writes."""
    out: list[str] = []
    rd = r.get("reads") or {}
    if rd.get("total"):
        out.append(f"GPU values read back: {rd['total']} reads at {rd['sites']} lines, each read as zero during warm "
                   "(a branch on one may differ on the GPU):")
        for ln in rd.get("lines", [])[:8]:
            out.append(f"  {ln['file']}:{ln['line']}: {ln['count']}x {'/'.join(ln['how'])}  `{ln['source']}`")
    sb = r.get("sandbox") or {}
    if sb.get("mode") in ("namespace", "userns"):
        ro = sb.get("readonly") or []
        out.append(f"file sandbox: {sb['mode']} (copy-on-write overlay of the whole file system; pcompile's cache, /dev, /proc, /sys "
                   f"passed through" + (f"; read-only: {', '.join(ro[:4])}" + (" ..." if len(ro) > 4 else "") if ro else "") + ")"
                   + (f"; could not overlay: {', '.join(sb['failed'][:3])}" if sb.get("failed") else ""))
    elif sb.get("mode") == "python":
        why = "; ".join(sb.get("why_not") or [])
        out.append(f"file sandbox: Python redirect (fallback{': ' + why if why else ''}); native code and non-Python "
                   "child processes write for real")
    w = r.get("writes") or {}
    if w.get("n_placeholder_saves"):
        out.append(f"{w['n_placeholder_saves']} checkpoints of virtual tensors written as placeholders (shapes and dtypes, "
                   "no data; they load back during the warm as zeros): " + _some(w["placeholder_saves"], w["n_placeholder_saves"]))
    if w.get("n_skipped_saves"):
        out.append(f"skipped {w['n_skipped_saves']} saves of virtual tensors (placeholder weights are never written): "
                   + _some(w["skipped_saves"], w["n_skipped_saves"]))
    if w.get("n_redirected"):
        out.append(f"the script wrote {w['n_redirected']} paths; they went to {w['dir']}/<original path>, not to your files")
    if w.get("n_deleted"):
        out.append(f"the script deleted {w['n_deleted']} paths in its view (your files are still there): " + _some(w["deleted"], w["n_deleted"]))
    if w.get("skipped_deletes"):
        out.append(f"skipped {len(w['skipped_deletes'])} deletions of your files: " + _some(w["skipped_deletes"], len(w["skipped_deletes"])))
    return out
