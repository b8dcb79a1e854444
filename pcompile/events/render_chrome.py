"""The job as a Chrome/Perfetto trace (JSON object format): open it in ui.perfetto.dev or chrome://tracing.

One trace process per OS process, one trace thread per timeline lane; complete ("X") events
carry every recorded field in `args`, so hits, keys and workers stay visible when zoomed in.
"""
from __future__ import annotations

from typing import Any

from pcompile.events.analysis import Analysis, display_name

_NAMED = ("graph_compile", "kernel_compile")

_SKIP = {"v", "ts", "dur", "start", "end", "idx", "lane", "row", "kind", "pid", "tid", "host"}


def render(a: Analysis) -> dict[str, Any]:
    pids: dict[str, int] = {}
    tids: dict[str, int] = {}
    trace: list[dict[str, Any]] = []
    for lane in a.lanes:
        if lane.group not in pids:
            pid = pids[lane.group] = len(pids) + 1
            trace.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": lane.group}})
            trace.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        tids[lane.id] = len(tids) + 1
        trace.append({"ph": "M", "name": "thread_name", "pid": pids[lane.group], "tid": tids[lane.id],
                      "args": {"name": lane.label}})
    crit = {seg["idx"] for seg in a.critical if not seg["self"]}
    for ev in a.events:
        group = ev["lane"].rsplit(" / ", 1)[0]
        args = {k: v for k, v in ev.items() if k not in _SKIP}
        args["os_pid"] = ev.get("pid")
        args["host"] = ev.get("host")
        if ev["idx"] in crit:
            args["critical_path"] = True
        label = f"{ev['kind']} {display_name(ev)}".strip() if ev["kind"] in _NAMED else ev["kind"]
        trace.append({"name": label, "cat": "pcompile," + str(ev.get("outcome") or "none"), "ph": "X",
                      "ts": round((a.t0 + ev["start"]) * 1e6, 1), "dur": round(ev["dur"] * 1e6, 1),
                      "pid": pids[group], "tid": tids[ev["lane"]], "args": args})
    cpid = len(pids) + 1  # the critical path as its own track, on top
    trace.append({"ph": "M", "name": "process_name", "pid": cpid, "tid": 0, "args": {"name": "critical path"}})
    trace.append({"ph": "M", "name": "process_sort_index", "pid": cpid, "tid": 0, "args": {"sort_index": 0}})
    for seg in a.critical:
        trace.append({"name": seg["kind"], "cat": "pcompile,critical", "ph": "X",
                      "ts": round((a.t0 + seg["start"]) * 1e6, 1), "dur": round((seg["end"] - seg["start"]) * 1e6, 1),
                      "pid": cpid, "tid": 1, "args": {"event_index": seg["idx"], "self_time": seg["self"]}})
    return {"traceEvents": trace, "displayTimeUnit": "ms",
            "otherData": {"pcompile_job": a.job, "summary": a.summary()}}
