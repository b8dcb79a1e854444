"""The report as one self-contained HTML file: inline SVG timeline and tables, no network.

The timeline is drawn server-side as SVG (hover any bar for its details) so the page works
with scripts disabled; the only script sorts tables. For zooming into thousands of events,
`--format chrome` gives the same data to Perfetto.
"""
from __future__ import annotations

import datetime as _dt
import html
import math
from pathlib import Path

from pcompile.events import style
from pcompile.events.analysis import Analysis, job_boards

LABEL_W = 230
PLOT_W = 1000
ROW_H = 13
LANE_GAP = 5
GROUP_H = 18
AXIS_H = 22
MAX_DRAWN = 30000

_TEMPLATE = Path(__file__).with_name("report.html")


def render(a: Analysis) -> str:
    e = html.escape
    when = _dt.datetime.fromtimestamp(a.t0).strftime("%Y-%m-%d %H:%M:%S") if a.events else "-"
    boards = job_boards(a.events)
    parts = [f"<h1>pcompile report · job {e(a.job)}</h1>",
             f"<div class='sub'>started {e(when)}" + (f" · on {e(', '.join(boards))}" if boards else "")
             + f" · {len(a.events)} events from {e(a.path)}"
             + (f" · {a.bad_lines} unreadable line(s) skipped" if a.bad_lines else "") + "</div>",
             _cards(a), "<h2>Where compile time went</h2>", _legend(), _timeline(a),
             "<p class='note'>Lanes: one group per process (rank · host:pid), one lane per compile worker. Nested "
             "phases stack downwards. The top lane is the critical path (its steps are outlined in black below): "
             "walking back from the end of the process that finished last, each step is the event of that process, "
             "or of a compile worker it was waiting in, that finished last before the next step began; time between "
             "steps is the enclosing event's own (self) time, drawn pale, or untracked (grey). It is reconstructed "
             "from timings alone, so read it as an approximation.</p>",
             "<div class='two'>", _critical_table(a), _phase_table(a), "</div>",
             "<h2>Slowest graphs</h2>", _graph_table(a), "<h2>Slowest kernels</h2>", _kernel_table(a),
             "<h2>Cache hit rates by layer and tier</h2>", _lookup_table(a), _saved_note(a),
             "<h2>Processes</h2>", _process_table(a)]
    body = "\n".join(parts)
    title = f"pcompile report {a.job}"
    return _TEMPLATE.read_text().replace("{{TITLE}}", e(title)).replace("{{BODY}}", body)


def _cards(a: Analysis) -> str:
    s = a.summary()
    hit = f"{100 * s['hit_rate']:.0f}%" if s["hit_rate"] is not None else "–"
    ko = s["kernel_outcomes"]
    cards = [(f"{s['wall_s']:.1f} s", "compile activity (wall)"),
             (f"{s['critical_path_s']:.1f} s", "on the critical path"),
             (str(s["graphs"]), "graphs"),
             (str(s["kernels"]), "kernels: " + (", ".join(f"{v} {k}" for k, v in ko.items()) or "none")),
             (hit, f"cache hit rate ({s['lookup_hits']}/{s['lookups']} lookups)"),
             (f"{a.saved['net_s']:.1f} s" if a.saved["hits_with_cost"] else "–", "saved vs cold compile (net)"),
             (str(s["processes"]), "processes")]
    return "<div class='cards'>" + "".join(f"<div class='card'><b>{html.escape(v)}</b><span>{html.escape(l)}</span></div>"
                                           for v, l in cards) + "</div>"


def _legend() -> str:
    items = [(k, c) for k, c in style.OUTCOME_COLORS.items()]
    items += [(k, style.KIND_COLORS[k]) for k in ("graph_compile", "dynamo", "aot_autograd", "inductor_lowering",
                                                  "lease_wait", "warm_step")]
    return ("<div class='legend'>" + "".join(f"<span><i style='background:{c}'></i>{html.escape(n)}</span>" for n, c in items)
            + f"<span><i style='background:#fff;border:2px solid {style.CRITICAL}'></i>critical path</span></div>")


def _ticks(wall: float) -> list[float]:
    if wall <= 0:
        return [0.0]
    raw = wall / 8
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=mag * 10)
    return [i * step for i in range(int(wall / step) + 1)]


def _timeline(a: Analysis) -> str:
    if not a.events:
        return "<div class='timeline'><p>No events.</p></div>"
    wall = a.wall or 1e-3
    scale = PLOT_W / wall
    drawn = a.events
    dropped = 0
    if len(drawn) > MAX_DRAWN:  # keep the page light: drop the shortest bars
        keep = sorted(drawn, key=lambda ev: -ev["dur"])[:MAX_DRAWN]
        dropped = len(drawn) - len(keep)
        drawn = keep
    y = AXIS_H
    lane_y: dict[str, float] = {}
    out: list[str] = []
    # top lane: the critical path
    out.append(f"<text x='4' y='{y + 11}'>critical path</text>")
    for seg in a.critical:
        out.append(_segment(a, seg, y, scale))
    y += ROW_H + LANE_GAP
    group = None
    for lane in a.lanes:
        if lane.group != group:
            group = lane.group
            out.append(f"<line x1='0' x2='{LABEL_W + PLOT_W}' y1='{y + 2}' y2='{y + 2}' stroke='#dde3ea'/>")
            out.append(f"<text x='4' y='{y + 14}' font-weight='bold'>{html.escape(group)}</text>")
            y += GROUP_H
        out.append(f"<text x='14' y='{y + 10}'>{html.escape(lane.label)}</text>")
        lane_y[lane.id] = y
        y += lane.rows * ROW_H + LANE_GAP
    for ev in drawn:
        out.append(_bar(ev, lane_y[ev["lane"]] + ev["row"] * ROW_H, scale, critical=bool(ev.get("critical"))))
    height = y + 6
    axis = []
    for t in _ticks(wall):
        x = LABEL_W + t * scale
        axis.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{AXIS_H - 4}' y2='{height}' stroke='#eef1f5'/>"
                    f"<text x='{x + 2:.1f}' y='12'>{t:g} s</text>")
    note = f"<p class='note'>{dropped} of the shortest events are not drawn.</p>" if dropped else ""
    return (f"<div class='timeline'><svg xmlns='http://www.w3.org/2000/svg' width='{LABEL_W + PLOT_W + 10}' "
            f"height='{height}' role='img' aria-label='compile timeline'>" + "".join(axis) + "".join(out)
            + "</svg></div>" + note)


def _bar(ev: dict, y: float, scale: float, critical: bool) -> str:
    x = LABEL_W + ev["start"] * scale
    w = max(ev["dur"] * scale, 0.8)
    from pcompile.events.analysis import display_name

    tip = [ev["kind"]] + ([display_name(ev)] if display_name(ev) != ev.get("key") else [])
    for k in ("key", "layer", "tier", "worker", "artifact", "outcome"):
        if ev.get(k) is not None:
            tip.append(f"{k}={ev[k]}")
    tip.append(f"{ev['dur'] * 1000:.1f} ms at +{ev['start']:.3f} s")
    if ev.get("saved_s") is not None:
        tip.append(f"saved {ev['saved_s']} s")
    stroke = f" stroke='{style.CRITICAL}' stroke-width='1.5'" if critical else ""
    return (f"<rect class='ev' x='{x:.2f}' y='{y + 1:.1f}' width='{w:.2f}' height='{ROW_H - 2}' rx='1.5' "
            f"fill='{style.color(ev)}'{stroke}><title>{html.escape(' · '.join(map(str, tip)))}</title></rect>")


def _segment(a: Analysis, seg: dict, y: float, scale: float) -> str:
    fill, alpha = style.segment_color(a.events, seg)
    x, w = LABEL_W + seg["start"] * scale, max((seg["end"] - seg["start"]) * scale, 0.8)
    tip = f"{seg['kind']}: {seg['end'] - seg['start']:.3f} s at +{seg['start']:.3f} s"
    if seg["idx"] is not None and a.events[seg["idx"]].get("key"):
        tip += f" · key={a.events[seg['idx']]['key']}"
    return (f"<rect class='ev' x='{x:.2f}' y='{y + 1:.1f}' width='{w:.2f}' height='{ROW_H - 2}' fill='{fill}' "
            f"fill-opacity='{alpha}' stroke='{style.CRITICAL}' stroke-width='0.6'><title>{html.escape(tip)}</title></rect>")


def _table(headers: list[str], rows: list[list], numeric: set[int] = frozenset()) -> str:
    if not rows:
        return "<p class='note'>none recorded</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for r in rows:
        cells = []
        for i, v in enumerate(r):
            if i in numeric:
                num = v if isinstance(v, (int, float)) else ""
                txt = f"{v:.3f}" if isinstance(v, float) else str(v)
                cells.append(f"<td class='n' data-v='{num}'>{html.escape(txt)}</td>")
            else:
                cells.append(f"<td>{html.escape('' if v is None else str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class='sortable'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _short(key: str, n: int = 48) -> str:
    return key if len(key) <= n else key[: n - 1] + "…"


def _graph_table(a: Analysis) -> str:
    rows = [[_short(g["name"], 72), g["kind"], g["process"], g["outcome"], g["dur"],
             ", ".join(f"{k} {v:.2f}s" for k, v in sorted(g.get("phases", {}).items(), key=lambda kv: -kv[1])),
             "yes" if g["critical"] else ""] for g in a.graphs]
    return _table(["graph", "kind", "process", "outcome", "seconds", "phases", "critical"], rows, {4})


def _kernel_table(a: Analysis) -> str:
    rows = [[_short(k["name"], 72), k["key"], k["process"], k["worker"], k["outcome"], k["dur"], "yes" if k["critical"] else ""]
            for k in a.kernels]
    return _table(["kernel", "key (for pcompile explain)", "process", "worker", "outcome", "seconds", "critical"], rows, {5})


def _lookup_table(a: Analysis) -> str:
    rows = [[r["layer"], r["tier"], r["n"], r["hit"], r["miss"], r["error"], f"{100 * r['hit_rate']:.0f}%",
             r["mean_ms"], r["p95_ms"]] for r in a.lookups]
    return _table(["layer", "tier", "lookups", "hits", "misses", "errors", "hit rate", "mean ms", "p95 ms"], rows,
                  {2, 3, 4, 5, 7, 8})


def _saved_note(a: Analysis) -> str:
    sv = a.saved
    if not sv["hits_with_cost"]:
        return "<p class='note'>Time saved: unknown (no hit carried the time its entry first took to compile).</p>"
    return (f"<p class='note'>Time saved versus a cold compile: <b>{sv['net_s']:.2f} s</b> net = {sv['avoided_s']:.2f} s "
            f"that {int(sv['hits_with_cost'])} hit entries took when first compiled, minus {sv['lookup_s']:.2f} s spent "
            f"on all lookups. Compile-seconds, summed over processes and workers: parallel compiles would have "
            f"overlapped, so the wall-clock saving can be smaller."
            + (f" {int(sv['hits_without_cost'])} hit(s) carried no first-compile time and are not counted."
               if sv["hits_without_cost"] else "") + "</p>")


def _critical_table(a: Analysis) -> str:
    total = sum(a.critical_by_kind.values()) or 1.0
    rows = [[k, v, f"{100 * v / total:.0f}%"] for k, v in a.critical_by_kind.items()]
    return "<div><h2>Critical path by phase</h2>" + _table(["phase", "seconds", "share"], rows, {1}) + "</div>"


def _phase_table(a: Analysis) -> str:
    rows = [[k, int(p["count"]), p["total_s"], p["max_s"]] for k, p in a.phases.items()]
    return ("<div><h2>All events by kind</h2>" + _table(["kind", "count", "total s (summed)", "longest s"], rows, {1, 2, 3})
            + "</div>")


def _process_table(a: Analysis) -> str:
    rows = [[p["host"], p["pid"], p["rank"], p["events"], p["start"], p["end"], p["end"] - p["start"]]
            for p in a.processes]
    return _table(["host", "pid", "rank", "events", "first +s", "last +s", "span s"], rows, {3, 4, 5, 6})
