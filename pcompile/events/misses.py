"""`pcompile explain JOB`: every miss of one job, each set beside the nearest earlier look-up of
the same graph or kernel, with the key inputs that differ named in words.

Why from the event logs: a user who asks "why did this job miss" holds no keys. Each job's log
names every look-up (layer, key, the graph or kernel it was for); the store keeps each key's
inputs beside its entry (keys/key.py KeyInputs). So for each miss: find the newest earlier job
that looked up the same name in the same layer, and diff the two keys' stored inputs.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from pcompile.keys.explain import Difference, diff_inputs
from pcompile.keys.key import Key, KeyInputs

#: fingerprint fields (keys/fingerprint.py) as a person names them
FIELD_WORDS = {
    "torch": "torch build", "triton": "triton build", "python": "Python version", "cuda": "CUDA version",
    "cudnn": "cuDNN version", "machine": "CPU architecture", "target_arch": "target GPU architecture",
    "target_name": "target GPU", "ptxas": "ptxas version", "fingerprint_version": "pcompile's key format",
}
LAYER_WORDS = {"graph": "FX graph", "autograd": "AOTAutograd graph", "kernel": "kernel", "autotune": "autotune choice"}
#: what a changed source hash means per layer: the source is Inductor's own key for that layer
SOURCE_WORDS = {
    "graph": "the graph itself changed: its code (model code or a traced value), an input's shape, dtype or "
             "stride, or an Inductor config value (Inductor's FX graph key differs)",
    "autograd": "the graph itself changed: its code (model code or a traced value), an input's shape, dtype "
                "or requires_grad, or a functorch/Inductor config value (Inductor's AOTAutograd key differs)",
    "kernel": "the kernel's generated source differs (a different graph, shape or config produced it)",
    "autotune": "the kernel being tuned differs (its source, sizes or the choices offered)",
}


def describe(d: Difference, layer: str) -> str:
    """One difference in words: `torch build: 2.14.1+cu130 -> 2.15.0+cu132`."""
    if d.field == "source_hash":
        return SOURCE_WORDS.get(layer, "the source the key was made from differs")
    if d.field == "layer":
        return f"different layers ({d.a} and {d.b}): not two versions of one thing"
    name = d.field.split(".", 1)[1] if d.field.startswith("fingerprint.") else d.field
    words = FIELD_WORDS.get(name) or (f"setting {name[2:]}" if name.startswith("x.") else name)
    return f"{words}: {d.a if d.a is not None else '(none)'} -> {d.b if d.b is not None else '(none)'}"


def because(layer: str, diffs: list[Difference], before: list[str] | None, now: list[str] | None) -> list[str]:
    """Each difference in words; a changed source (Inductor's own key) named by what changed in
    it when both keys' descriptions were kept (keys/key_details.py)."""
    from pcompile.keys import key_details

    out = []
    for d in diffs:
        if d.field == "source_hash" and before and now:
            out += key_details.describe(before, now) or [describe(d, layer)]
        else:
            out.append(describe(d, layer))
    return out or ["identical inputs (a key format change)"]


@dataclasses.dataclass
class Miss:
    layer: str
    key: str
    name: str
    earlier_job: str | None = None
    earlier_key: str | None = None
    reasons: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _names(events: list[dict]) -> tuple[dict[str, str], dict[str, str]]:
    """(event id -> graph name, key -> kernel name) from one job's events."""
    from pcompile.events.analysis import display_name

    graphs = {str(e["id"]): display_name(e) for e in events if e.get("kind") == "graph_compile" and e.get("id")}
    kernels: dict[str, str] = {}
    for e in events:
        if e.get("kind") == "kernel_compile" and e.get("key") and (e.get("name") or e.get("kernel")):
            kernels.setdefault(str(e["key"]), display_name(e))
    return graphs, kernels


def lookups(events: list[dict]) -> list[tuple[str, str, str, str]]:
    """(layer, key, name, outcome) of each counted look-up, in order; the name is the graph's
    (function file:line [compile id]) for graph-level layers, the kernel's for kernels."""
    graphs, kernels = _names(events)
    by_id = {str(e.get("id")): e for e in events if e.get("id")}
    out = []
    for e in sorted((e for e in events if e.get("kind") == "cache_lookup" and not e.get("inner") and e.get("key")), key=lambda e: e["ts"]):
        key, layer = str(e["key"]), str(e.get("layer") or "?")
        name, parent = kernels.get(key) or "", e.get("parent")
        while not name and parent:
            name = graphs.get(str(parent), "")
            parent = by_id.get(str(parent), {}).get("parent")
        out.append((layer, key, name or key, str(e.get("outcome") or "miss")))
    return out


def _stem(name: str) -> str:
    """A graph's name without its compile id: `forward (cpu_demo.py:28)`: ids are per process."""
    return name.rsplit(" [", 1)[0] if name.endswith("]") else name


def explain_job(job_events: list[dict], earlier: list[tuple[str, list[dict]]],
                inputs_of: Callable[[Key], KeyInputs | None],
                details_of: Callable[[str], list[str] | None] = lambda key: None) -> list[Miss]:
    """Every counted miss of the job; `earlier` is older jobs' (job id, events), newest first."""
    seen: dict[tuple[str, str, int], tuple[str, str]] = {}  # (layer, name stem, n-th) -> newest earlier (job, key)
    looked_up: dict[str, str] = {}  # key -> newest earlier job that looked it up
    for job, events in reversed(earlier):  # oldest first, so newer ones overwrite
        count: dict[tuple[str, str], int] = {}
        for layer, key, name, _outcome in lookups(events):
            nth = count[(layer, _stem(name))] = count.get((layer, _stem(name)), -1) + 1
            seen[(layer, _stem(name), nth)] = (job, key)
            looked_up[key] = job
    misses = []
    count = {}
    for layer, key, name, outcome in lookups(job_events):
        nth = count[(layer, _stem(name))] = count.get((layer, _stem(name)), -1) + 1  # a graph's forward and backward share a name
        if outcome != "miss":
            continue
        miss = Miss(layer, key, name)
        before = (looked_up[key], key) if key in looked_up else seen.get((layer, _stem(name), nth))
        if before is None:
            miss.reasons.append(f"first time: no earlier job of this cache looked this {LAYER_WORDS.get(layer, layer)} up")
        else:
            miss.earlier_job, miss.earlier_key = before
            if before[1] == key:
                miss.reasons.append(f"job {before[0]} looked up this same key; its entry is gone since "
                                    "(gc, `pcompile clear`, or that job could not write it)")
            else:
                a, b = inputs_of(Key.parse(before[1])), inputs_of(Key.parse(key))
                if a is None or b is None:
                    miss.reasons.append(f"the key differs from job {before[0]}'s ({before[1]}), whose inputs this cache "
                                        "no longer holds: compare by hand with `pcompile explain KEY KEY`")
                else:
                    miss.reasons += because(layer, diff_inputs(a, b), details_of(before[1]), details_of(key))
        misses.append(miss)
    for m in misses:  # torch describes AOTAutograd keys only when debugging: point at the graphs it wraps
        if m.layer == "autograd" and m.reasons == [SOURCE_WORDS["autograd"]] and any(
                g.layer == "graph" and _stem(g.name) == _stem(m.name) and g.reasons != [SOURCE_WORDS["graph"]] for g in misses):
            m.reasons.append("the FX graph misses of this graph below say what changed")
    return misses


def load_jobs(events_dir: Path, job: str | None, depth: int = 20) -> tuple[str, list[dict], list[tuple[str, list[dict]]]]:
    """(job id, its events, [(older job id, events)] newest first) from the cache's event logs."""
    from pcompile.events import reader

    log = reader.find_job(events_dir, job)
    events, _bad = reader.load(log.path)
    older = []
    for other in reader.list_jobs(events_dir):
        if other.mtime < log.mtime and other.job != log.job and len(older) < depth:
            try:
                older.append((other.job, reader.load(other.path)[0]))
            except OSError:
                continue
    return log.job, events, older
