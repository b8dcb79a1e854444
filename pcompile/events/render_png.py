"""A static picture of the timeline (matplotlib, headless) for READMEs, issues and Slack."""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from pcompile.errors import PcompileError
from pcompile.events import style
from pcompile.events.analysis import Analysis, display_name

MAX_ROWS_DRAWN = 60


def render(a: Analysis, out: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise PcompileError("--format png needs matplotlib: pip install 'pcompile[report]' (or pip install matplotlib)") from None

    held: dict[tuple[str, int], Counter] = defaultdict(Counter)
    for ev in a.events:
        held[(ev.get("lane"), ev.get("row"))][ev["kind"]] += 1
    rows: list[tuple[str, str, int]] = [("critical path", "__critical__", 0)]
    for lane in a.lanes:
        for r in range(lane.rows):
            kinds = "/".join(k for k, _ in held[(lane.id, r)].most_common(2)) or "-"
            rows.append((f"{lane.group} / {lane.label}: {kinds}" if r == 0 else f"{lane.label}: {kinds}", lane.id, r))
    rows = rows[:MAX_ROWS_DRAWN]
    index = {(lane_id, r): i for i, (_, lane_id, r) in enumerate(rows)}
    fig_h = min(2.2 + 0.22 * len(rows), 30)
    fig, ax = plt.subplots(figsize=(14, fig_h), dpi=110)
    per_row: dict[int, tuple[list, list, list]] = {}

    from matplotlib.colors import to_rgba

    minw = a.wall / 2000 if a.wall else 1e-4

    def add(i: int, start: float, dur: float, fill: str, edge: str, alpha: float = 1.0) -> None:
        bars, colors, edges = per_row.setdefault(i, ([], [], []))
        bars.append((start, max(dur, minw)))
        colors.append(to_rgba(fill, alpha))
        edges.append(edge)

    for seg in a.critical:
        fill, alpha = style.segment_color(a.events, seg)
        add(0, seg["start"], seg["end"] - seg["start"], fill, style.CRITICAL, alpha)
    for ev in a.events:
        i = index.get((ev.get("lane"), ev.get("row")))
        if i is not None:
            add(i, ev["start"], ev["dur"], style.color(ev), style.CRITICAL if ev.get("critical") else "none")
    for i, (bars, colors, edges) in per_row.items():
        ax.broken_barh(bars, (len(rows) - 1 - i - 0.4, 0.8), facecolors=colors, edgecolors=edges, linewidth=0.8)
    span = max(a.wall, 1e-3)
    for ev in a.events:  # name the bars wide enough to carry it: graphs by function, kernels by Inductor's name
        i = index.get((ev.get("lane"), ev.get("row")))
        if i is None or ev["kind"] not in ("graph_compile", "kernel_compile") or ev["dur"] < span * 0.06:
            continue
        name = display_name(ev)
        room = int(ev["dur"] / span * 14 * 110 * 0.8 / 6.5) - 1  # characters that fit: ~80% of the width is plot, ~6.5 px a character
        if room >= 6 and name:
            ax.text(ev["start"] + span * 0.003, len(rows) - 1 - i, name if len(name) <= room else name[: room - 1] + "…",
                    va="center", ha="left", fontsize=6.5, clip_on=True,
                    color="#1d2733" if ev["kind"] == "graph_compile" else "white")
    ax.set_yticks([len(rows) - 1 - i for i in range(len(rows))])
    ax.set_yticklabels([lbl for lbl, _, _ in rows], fontsize=8)
    ax.set_xlim(0, max(a.wall, 1e-3) * 1.01)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("seconds since the job's first compile event")
    ax.grid(axis="x", color="#e5e9ef", linewidth=0.6)
    ax.set_axisbelow(True)
    lines = a.summary_lines()
    ax.set_title(f"pcompile · job {a.job}\n" + "\n".join(lines[1:4]), fontsize=9, loc="left")
    legend = [Patch(color=c, label=k) for k, c in style.OUTCOME_COLORS.items()]
    legend += [Patch(color=style.KIND_COLORS[k], label=k) for k in ("graph_compile", "dynamo", "aot_autograd",
                                                                     "inductor_lowering", "lease_wait", "warm_step")]
    legend.append(Patch(facecolor="white", edgecolor=style.CRITICAL, label="critical path"))
    legend_h = 0.5 / fig_h  # inches of legend as a fraction of the figure
    fig.legend(handles=legend, fontsize=7, ncol=6, loc="lower center", frameon=False)
    fig.tight_layout(rect=(0, legend_h + 0.01, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    plt.close(fig)
    return out
