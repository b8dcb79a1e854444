"""One definition of a hit per layer, for every place that shows one: the warm summary,
`pcompile stats`, `pcompile report` and `warm --check`.

A lookup is accounted once per layer, where pcompile answers it (`inductor/store_gateway.py`, the
one way in for every Inductor layer, the kernel router's included), as one of:

- `hit`: the artifact came from the store (or from another process's compile, waited for);
- `miss`: it had to be built here;
- `untimed` (autotune only): no measured winner and no prediction, on a host that cannot time
  kernels (a warm): the GPU job benchmarks that kernel once. Nothing the cache could have held,
  so not a miss;
- `predicted` (autotune only, not a look-up): a warm filed Inductor's no-benchmark choice for a
  kernel it found `untimed`; the GPU job uses it outside tuning modes (PCOMPILE_AUTOTUNE). Counted
  beside `untimed`, so every view says how many of those the GPU job still times;
- `inner`: a look-up made while building another layer's entry (Triton's per-config cubins
  while an Inductor kernel compiles, a measured-winner probe before the prediction decides).
  Counted for the curious, never in a rate: the owning layer's lookup already says hit or miss.

An AOTAutograd hit brings its FX graphs and kernels without graph or kernel look-ups, so a
second run shows hits on the layers that were asked, and no look-ups on the others.

Counters have the shape {layer: {"hits", "misses", "untimed", "inner"}} (Stats files, events).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

LAYERS: tuple[str, ...] = ("program", "graph", "autograd", "kernel", "autotune")
OUTCOMES = ("hit", "miss", "untimed", "inner", "predicted")
#: outcome -> counter name
COUNTER = {"hit": "hits", "miss": "misses", "untimed": "untimed", "inner": "inner", "predicted": "predicted"}
_NAMES = {"program": "program", "graph": "FX graph", "autograd": "AOTAutograd", "kernel": "kernel", "autotune": "autotune"}


def zero() -> dict[str, int]:
    return {c: 0 for c in COUNTER.values()}


def table(counters: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Per layer: hits, misses, untimed, inner, lookups (hits + misses) and rate (None: no lookups).

    Raw layer names of older stats files fold in: `autotune-predicted` was a second autotune
    look-up (its hits are autotune hits, the measured probe before it was inner). A layer this
    pcompile does not have (`program`, from removed whole-program entries) keeps its row only
    while it counts something: old stats files carry its zeros."""
    out = {layer: zero() for layer in LAYERS}
    for layer, c in (counters or {}).items():
        if layer == "autotune-predicted":  # pre-accounting stats files: fold the prediction in
            hit = int(c.get("hits", 0))
            out["autotune"]["hits"] += hit
            out["autotune"]["misses"] -= hit
            out["autotune"]["inner"] += hit + int(c.get("misses", 0))
            continue
        if layer not in out and not any(int(c.get(name, 0)) for name in COUNTER.values()):
            continue
        target = out.setdefault(layer, zero())
        for name in COUNTER.values():
            target[name] += int(c.get(name, 0))
    for row in out.values():
        row["misses"] = max(row["misses"], 0)
        row["lookups"] = row["hits"] + row["misses"]
        row["rate"] = round(row["hits"] / row["lookups"], 4) if row["lookups"] else None
    return out


def from_events(events: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The same table from one job's `cache_lookup` events."""
    counters: dict[str, dict[str, int]] = {}
    for e in events:
        if e.get("kind") != "cache_lookup":
            continue
        outcome = "inner" if e.get("inner") else str(e.get("outcome") or "miss")
        name = COUNTER.get(outcome)
        if name is None:
            continue  # an error: the caller compiled without the cache, reported elsewhere
        c = counters.setdefault(str(e.get("layer") or "?"), zero())
        c[name] += 1
    return table(counters)


def totals(t: Mapping[str, Mapping[str, Any]]) -> tuple[int, int]:
    """(hits, lookups) over every layer."""
    return sum(r["hits"] for r in t.values()), sum(r["lookups"] for r in t.values())


#: Layers whose miss costs no compile, only a Dynamo trace: a job after a warm (which writes no
#: programs) misses its program and still hits everything the warm compiled.
TRACE_ONLY: tuple[str, ...] = ("program",)


def all_hit(t: Mapping[str, Mapping[str, Any]]) -> bool:
    """Every compiled layer with a look-up hit every time (and at least one was asked); a program
    miss (TRACE_ONLY) is shown beside it, not counted in it."""
    asked = [r for layer, r in t.items() if r["lookups"] and layer not in TRACE_ONLY]
    return bool(asked) and all(r["misses"] == 0 for r in asked)


def describe(layer: str, row: Mapping[str, Any]) -> str:
    """`AOTAutograd 3/3 hit`, `autotune 35/35 hit, 13 left for the GPU to time (...)`; '' if unasked."""
    if not row["lookups"] and not row["untimed"]:
        return ""
    name = _NAMES.get(layer, layer)
    untimed = untimed_words(row)
    if not row["lookups"]:
        return f"{name}: {untimed}"
    return f"{name} {row['hits']}/{row['lookups']} hit" + (f", {untimed}" if untimed else "")


def untimed_words(row: Mapping[str, Any]) -> str:
    """`38 predicted, 9 left for the GPU to time (this host cannot)`: the autotune look-ups a warm
    found no winner for, split by whether it predicted one; '' if none."""
    untimed = int(row.get("untimed", 0))
    if not untimed:
        return ""
    predicted = min(int(row.get("predicted", 0)), untimed)
    left = f"{untimed - predicted} left for the GPU to time (this host cannot)"
    return f"{predicted} predicted, {left}" if predicted else left


def summary(t: Mapping[str, Mapping[str, Any]]) -> str:
    """One line: each asked layer in LAYERS order (whatever order `t` was built in: the warm
    summary, stats and report must print the same line), or that nothing was looked up."""
    order = [layer for layer in LAYERS if layer in t] + [layer for layer in t if layer not in LAYERS]
    parts = [d for d in (describe(layer, t[layer]) for layer in order) if d]
    return ", ".join(parts) if parts else "no cache look-ups"
