"""Turning one job's events into what a person asks: where did compile time go, what hit, what it saved.

The timeline puts each process in its own group of lanes (one more lane per compile worker),
packing nested spans into rows. The critical path is reconstructed without explicit
dependencies: walking back from the end of the process that finished last, each step is the
event (of that process, or of any compile worker) that finished last before the current one
began, the usual approximation when only timings are known.
"""
from __future__ import annotations

import dataclasses
import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from pcompile.store import hits

MAX_ROWS = 12
EPS = 1e-6


@dataclasses.dataclass
class Lane:
    id: str
    label: str
    group: str
    rows: int = 1


@dataclasses.dataclass
class Analysis:
    job: str
    path: str
    bad_lines: int
    t0: float
    wall: float
    events: list[dict]
    lanes: list[Lane]
    critical: list[dict]
    critical_by_kind: dict[str, float]
    phases: dict[str, dict[str, float]]
    outcomes: dict[str, dict[str, int]]
    processes: list[dict]
    graphs: list[dict]
    kernels: list[dict]
    lookups: list[dict]
    saved: dict[str, float]
    script: str = ""

    def summary(self) -> dict[str, Any]:
        """The numbers the CLI prints and `--json` returns (hit rates: store/hits.py)."""
        layers = hits.from_events(self.events)
        hit, total = hits.totals(layers)
        ko = self.outcomes.get("kernel_compile", {})
        go = self.outcomes.get("graph_compile", {})
        return {
            "job": self.job, "log": self.path, "events": len(self.events), "bad_lines": self.bad_lines,
            "script": self.script, "start": self.t0, "boards": job_boards(self.events),
            "wall_s": round(self.wall, 3), "processes": len(self.processes),
            "ranks": sorted({p["rank"] for p in self.processes if p["rank"] is not None}),
            "hosts": sorted({p["host"] for p in self.processes}),
            "graphs": sum(go.values()), "graph_outcomes": go,
            "kernels": sum(ko.values()), "kernel_outcomes": ko,
            "lookups": total, "lookup_hits": hit, "hit_rate": round(hit / total, 4) if total else None,
            "layers": layers, "all_hit": hits.all_hit(layers),
            "saved": self.saved,
            "critical_path_s": round(sum(self.critical_by_kind.values()), 3),
            "critical_by_kind": {k: round(v, 3) for k, v in self.critical_by_kind.items()},
            "phases": self.phases,
        }

    def summary_lines(self) -> list[str]:
        """Four lines; the CLI adds a fifth naming the written file."""
        s = self.summary()
        ranks = f", ranks {_ranges(s['ranks'])}" if s["ranks"] else ""
        script = f" ({s['script']})" if s["script"] else ""
        script += f" on {', '.join(s['boards'])}" if s["boards"] else ""
        lines = [f"job {self.job}{script}: {s['wall_s']:.1f} s of compile activity, {s['processes']} process(es) on "
                 f"{len(s['hosts'])} host(s){ranks}, {s['events']} events"]
        slow = self.graphs[0] if self.graphs else None
        slow_txt = f"; slowest graph {slow['dur']:.2f} s: {slow['name']}" if slow else ""
        lines.append(f"graphs: {s['graphs']} ({_fmt_counts(s['graph_outcomes'])}){slow_txt}; "
                     f"kernels: {s['kernels']} ({_fmt_counts(s['kernel_outcomes'])})")
        if s["lookups"] or any(r["untimed"] for r in s["layers"].values()):
            rate = f"{100 * s['hit_rate']:.0f}%" if s["hit_rate"] is not None else "-"
            lines.append(f"cache lookups: {s['lookup_hits']}/{s['lookups']} hit ({rate}): {hits.summary(s['layers'])}")
        else:
            lines.append("cache lookups: none recorded")
        sv = self.saved
        if sv["hits_with_cost"]:
            extra = f", {int(sv['hits_without_cost'])} hit(s) had no recorded cost" if sv["hits_without_cost"] else ""
            lines.append(f"time saved vs cold compile: {sv['net_s']:.1f} s net ({sv['avoided_s']:.1f} s of first-compile "
                         f"time avoided by {int(sv['hits_with_cost'])} hit(s), all lookups cost {sv['lookup_s']:.2f} s){extra}")
        else:
            lines.append("time saved vs cold compile: unknown (no hit carried its first compile time)")
        return lines


def analyze(events: list[dict], job: str = "?", path: str | Path = "", bad_lines: int = 0) -> Analysis:
    script = job_script(sorted((e for e in events if e.get("kind") == "process"), key=lambda e: e["ts"]))
    evs = sorted((dict(e) for e in events if e.get("kind") != "process"), key=lambda e: (e["ts"], -e["dur"]))
    t0 = evs[0]["ts"] if evs else 0.0
    for i, e in enumerate(evs):
        e["start"] = e["ts"] - t0
        e["end"] = e["start"] + e["dur"]
        e["idx"] = i
    wall = max((e["end"] for e in evs), default=0.0)
    lanes = _layout(evs)
    critical = _critical_path(evs)
    crit_kind: dict[str, float] = defaultdict(float)
    for seg in critical:
        if not seg["self"]:
            evs[seg["idx"]]["critical"] = True
        crit_kind[seg["kind"]] += seg["end"] - seg["start"]
    return Analysis(
        job=job, path=str(path), bad_lines=bad_lines, t0=t0, wall=wall, events=evs, lanes=lanes,
        critical=critical, critical_by_kind=dict(sorted(crit_kind.items(), key=lambda kv: -kv[1])),
        phases=_phases(evs), outcomes=_outcomes(evs), processes=_processes(evs),
        graphs=_top(evs, "graph_compile", 15) or _top_any(evs, ("dynamo", "aot_autograd", "inductor_lowering"), 15),
        kernels=_top(evs, "kernel_compile", 15), lookups=_lookups(evs), saved=_saved(evs), script=script,
    )


def job_script(evs: list[dict]) -> str:
    """What the job ran, from the first `process` record that names it."""
    for e in evs:
        if e["kind"] == "process" and e.get("script"):
            return str(e["script"])
    return ""


def job_boards(evs: list[dict]) -> list[str]:
    """The boards (CUDA device names) a job's graph look-ups were keyed for: what it ran on, or
    for a warm the virtual board it warmed (graph entries serve that board only)."""
    return sorted({str(e["board"]) for e in evs if e.get("kind") == "cache_lookup" and e.get("board")})


def process_label(e: dict) -> str:
    r = e.get("rank")
    base = f"{e.get('host', '?')}:{e.get('pid', '?')}"
    return f"rank {r} · {base}" if r is not None else base


def _lane_key(e: dict) -> tuple[str, str]:
    group = process_label(e)
    w = e.get("worker")
    return group, (f"worker {w}" if w is not None else "main")


def _natural(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _layout(evs: list[dict]) -> list[Lane]:
    first: dict[str, float] = {}
    by_lane: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for e in evs:
        key = _lane_key(e)
        by_lane[key].append(e)
        first.setdefault(key[0], e["start"])
    order = sorted(by_lane, key=lambda k: (first[k[0]], k[0], k[1] != "main", _natural(k[1])))
    lanes = []
    for key in order:
        lane_id = f"{key[0]} / {key[1]}"
        rows_end: list[float] = []
        row_of: dict[str, int] = {}
        for e in by_lane[key]:  # already sorted by start, longest first
            lo = row_of.get(e.get("parent"), -1) + 1 if e.get("parent") in row_of else 0
            r = lo
            while r < len(rows_end) and rows_end[r] > e["start"] + EPS:
                r += 1
            r = min(r, MAX_ROWS - 1)
            if r == len(rows_end):
                rows_end.append(e["end"])
            else:
                rows_end[r] = max(rows_end[r], e["end"])
            if e.get("id"):
                row_of[e["id"]] = r
            e["lane"], e["row"] = lane_id, r
        lanes.append(Lane(lane_id, key[1], key[0], max(len(rows_end), 1)))
    return lanes


def _critical_path(evs: list[dict]) -> list[dict]:
    """Segments of the critical path, oldest first: {kind, start, end, idx, self}.

    Steps are leaf events of the process that finished last, or compile-worker events that
    ended while that process was inside one of its events (so it may have waited on them).
    Time between steps goes to the innermost event of that process covering it ("self" time,
    e.g. Dynamo tracing inside a step), or to "untracked" when none does."""
    if not evs:
        return []
    parents = {e["parent"] for e in evs if e.get("parent")}
    last = max(evs, key=lambda e: e["end"])
    proc = (last.get("host"), last.get("pid"))
    own = [e for e in evs if (e.get("host"), e.get("pid")) == proc]
    spans = _union([(e["start"], e["end"]) for e in own])

    def inside(t: float) -> bool:
        return any(a - EPS <= t <= b + EPS for a, b in spans)

    leaves = [e for e in evs if (e.get("id") is None or e["id"] not in parents) and e["dur"] > 0
              and (((e.get("host"), e.get("pid")) == proc) or (e.get("worker") is not None and inside(e["end"])))]
    leaves.sort(key=lambda e: (e["end"], e["dur"]))
    segs: list[dict] = []
    t = last["end"]
    i = len(leaves) - 1
    while i >= 0:
        while i >= 0 and leaves[i]["end"] > t + EPS:
            i -= 1
        if i < 0:
            break
        e = leaves[i]
        _gap(segs, own, e["end"], t)
        segs.append({"kind": e["kind"], "start": e["start"], "end": e["end"], "idx": e["idx"], "self": False})
        t = e["start"]
        i -= 1
    _gap(segs, own, min(a for a, _ in spans), t)
    segs.reverse()
    return segs


def _gap(segs: list[dict], own: list[dict], a: float, b: float) -> None:
    """Attribute [a, b] to the innermost covering event of the critical process (its self time)."""
    if b - a <= 1e-4:
        return
    mid = (a + b) / 2
    cover = [e for e in own if e["start"] - EPS <= mid <= e["end"] + EPS]
    if cover:
        inner = min(cover, key=lambda e: e["dur"])
        segs.append({"kind": inner["kind"] + " (self)", "start": a, "end": b, "idx": inner["idx"], "self": True})
    else:
        segs.append({"kind": "untracked", "start": a, "end": b, "idx": None, "self": True})


def _union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1] + EPS:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _phases(evs: list[dict]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for e in evs:
        p = out.setdefault(e["kind"], {"count": 0, "total_s": 0.0, "max_s": 0.0})
        p["count"] += 1
        p["total_s"] += e["dur"]
        p["max_s"] = max(p["max_s"], e["dur"])
    for p in out.values():
        p["total_s"] = round(p["total_s"], 4)
        p["max_s"] = round(p["max_s"], 4)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["total_s"]))


def _outcomes(evs: list[dict]) -> dict[str, dict[str, int]]:
    out: dict[str, Counter] = defaultdict(Counter)
    for e in evs:
        if e.get("inner"):
            continue  # built inside another entry's compile: that one is the unit
        if e["kind"] in ("graph_compile", "kernel_compile", "cache_lookup", "warm_step"):
            out[e["kind"]][str(e.get("outcome") or "unknown")] += 1
    return {k: dict(v) for k, v in out.items()}


def _processes(evs: list[dict]) -> list[dict]:
    procs: dict[tuple, dict] = {}
    for e in evs:
        k = (e.get("host"), e.get("pid"))
        p = procs.setdefault(k, {"host": e.get("host"), "pid": e.get("pid"), "rank": e.get("rank"),
                                 "start": e["start"], "end": e["end"], "events": 0})
        p["end"] = max(p["end"], e["end"])
        p["events"] += 1
        if p["rank"] is None and e.get("rank") is not None:
            p["rank"] = e["rank"]
    return sorted(procs.values(), key=lambda p: p["start"])


def display_name(e: dict) -> str:
    """What a person calls this graph or kernel: the function and file:line of a graph, Inductor's
    kernel name (triton_poi_fused_add_0); the store key only when nothing better was recorded."""
    name = e.get("name") or e.get("kernel") or ""
    if name and e["kind"] == "kernel_compile":
        name = re.sub(r"\.(json|cubin|so|ptx|ttir|ttgir|llir|hsaco)$", "", str(name))
    if e["kind"] == "graph_compile" and e.get("compile_id") and name:
        name = f"{name} [{e['compile_id']}]"
    return str(name or e.get("key") or "")


def _row(e: dict) -> dict:
    return {"kind": e["kind"], "name": display_name(e), "key": e.get("key") or "", "process": process_label(e),
            "worker": e.get("worker"), "outcome": e.get("outcome"), "dur": e["dur"], "start": e["start"],
            "critical": bool(e.get("critical"))}


def _top(evs: list[dict], kind: str, n: int) -> list[dict]:
    sel = sorted((e for e in evs if e["kind"] == kind and not e.get("inner")), key=lambda e: -e["dur"])[:n]
    rows = [_row(e) for e in sel]
    if kind == "graph_compile":  # how each slow graph's time split into phases
        kids: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for e in evs:
            if e.get("parent"):
                kids[e["parent"]][e["kind"]] += e["dur"]
        for row, e in zip(rows, sel):
            row["phases"] = {k: round(v, 3) for k, v in kids.get(e.get("id"), {}).items()}
    return rows


def _top_any(evs: list[dict], kinds: tuple[str, ...], n: int) -> list[dict]:
    return [_row(e) for e in sorted((e for e in evs if e["kind"] in kinds), key=lambda e: -e["dur"])[:n]]


def _lookups(evs: list[dict]) -> list[dict]:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for e in evs:
        if e["kind"] == "cache_lookup" and not e.get("inner") and e.get("outcome") != "predicted":  # a prediction is no look-up
            groups[(str(e.get("layer") or "?"), str(e.get("tier") or "?"))].append(e)
    rows = []
    for (layer, tier), es in sorted(groups.items()):
        lat = sorted(_num(e.get("latency"), e["dur"]) for e in es)
        c = Counter(e.get("outcome") for e in es)
        rows.append({"layer": layer, "tier": tier, "n": len(es), "hit": c.get("hit", 0), "miss": c.get("miss", 0),
                     "untimed": c.get("untimed", 0),
                     "error": c.get("error", 0), "hit_rate": round(c.get("hit", 0) / len(es), 4),
                     "mean_ms": round(1000 * statistics.fmean(lat), 3),
                     "p95_ms": round(1000 * lat[min(len(lat) - 1, int(0.95 * len(lat)))], 3)})
    return rows


def _saved(evs: list[dict]) -> dict[str, float]:
    """Hits' recorded first-compile seconds, less what every lookup (hit or miss) cost."""
    avoided = lookup = 0.0
    with_cost = without = 0
    for e in evs:
        if e["kind"] != "cache_lookup":
            continue
        if e.get("inner"):
            lookup += _num(e.get("latency"), e["dur"])
            continue
        lookup += _num(e.get("latency"), e["dur"])
        if e.get("outcome") != "hit":
            continue
        try:
            s = float(e["saved_s"])
        except (KeyError, TypeError, ValueError):
            without += 1
            continue
        with_cost += 1
        avoided += s
    return {"avoided_s": round(avoided, 3), "lookup_s": round(lookup, 3), "net_s": round(avoided - lookup, 3),
            "hits_with_cost": with_cost, "hits_without_cost": without}


def _num(v: Any, default: float) -> float:
    """A field as seconds; absent or unreadable values fall back to `default`."""
    try:
        return float(v) if v is not None else default
    except (TypeError, ValueError):
        return default


def _fmt_counts(c: dict[str, int]) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(c.items(), key=lambda kv: -kv[1])) or "none"


def _ranges(nums: list[int]) -> str:
    if not nums:
        return ""
    if nums == list(range(nums[0], nums[-1] + 1)) and len(nums) > 2:
        return f"{nums[0]}-{nums[-1]}"
    return ",".join(map(str, nums))
