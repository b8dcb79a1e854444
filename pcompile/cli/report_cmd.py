"""`pcompile report`: one job's compile as a page (HTML), a picture (PNG) or a Perfetto trace, plus a 5-line summary."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pcompile.cli.common import add_common, emit, settings_from

FORMATS = ("html", "png", "chrome")
_EXT = {"html": ".html", "png": ".png", "chrome": ".trace.json"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="show where one job's compile time went (HTML, PNG or Chrome trace)",
                              description="Render one job's compile events: a timeline with the critical path, the "
                                          "slowest graphs and kernels, hit rates per layer and tier, and time saved.")
    p.add_argument("--job", default=None, help="job id (or a unique prefix); default: the newest job")
    p.add_argument("--out", default=None, help="output file (default CACHE_DIR/reports/pcompile-report-JOB.html|.png|.trace.json)")
    p.add_argument("--format", choices=FORMATS, default=None, help="default: from --out's extension, else html")
    p.add_argument("--list", action="store_true", help="list the jobs that have event logs, newest first")
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pcompile.events import analysis, reader
    from pcompile.events._sink import events_dir

    directory = events_dir(settings_from(args).cache_dir)
    if args.list:
        rows = [_job_row(j) for j in reader.list_jobs(directory)]
        emit(args, rows, "\n".join(_list_line(r) for r in rows) or f"no event logs in {directory}")
        return 0
    log = reader.find_job(directory, args.job)
    events, bad = reader.load(log.path)
    a = analysis.analyze(events, job=log.job, path=log.path, bad_lines=bad)
    fmt = args.format or _format_from(args.out)
    out = Path(args.out) if args.out else default_out(settings_from(args).cache_dir, log.job, fmt)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "html":
        from pcompile.events import render_html

        out.write_text(render_html.render(a), encoding="utf-8")
    elif fmt == "png":
        from pcompile.events import render_png

        render_png.render(a, out)
    else:
        from pcompile.events import render_chrome

        out.write_text(json.dumps(render_chrome.render(a), default=str), encoding="utf-8")
    lines = a.summary_lines() + [f"wrote {fmt} report to {out}"]
    emit(args, dict(a.summary(), out=str(out), format=fmt), "\n".join(lines))
    return 0


def default_out(cache_dir: Path, job: str, fmt: str) -> Path:
    """Where a report goes unasked: beside the job's event log in the cache dir, never the
    working directory (a report is no file of the user's project; `git status` must not see it)."""
    return Path(cache_dir) / "reports" / f"pcompile-report-{job}{_EXT[fmt]}"


def _job_row(log: Any) -> dict[str, Any]:
    """One job of `--list`: what ran, when, and its hit rate (store/hits.py, as everywhere)."""
    from pcompile.events import analysis, reader
    from pcompile.store import hits

    try:
        events, _bad = reader.load(log.path)
    except OSError:
        events = []
    procs = sorted((e for e in events if e.get("kind") == "process"), key=lambda e: e["ts"])
    layers = hits.from_events(events)
    hit, total = hits.totals(layers)
    start = min((e["ts"] for e in events), default=log.mtime)
    return {"job": log.job, "path": str(log.path), "mtime": log.mtime, "bytes": log.size, "start": start,
            "script": analysis.job_script(procs), "boards": analysis.job_boards(events), "lookups": total, "lookup_hits": hit,
            "hit_rate": round(hit / total, 4) if total else None, "layers": layers}


def _list_line(r: dict[str, Any]) -> str:
    import time

    rate = f"{r['lookup_hits']}/{r['lookups']} hit ({100 * r['hit_rate']:.0f}%)" if r["lookups"] else "no look-ups"
    board = f"  [{', '.join(r['boards'])}]" if r.get("boards") else ""
    return f"{r['job']}  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r['start']))}  {r['script'] or '?'}{board}  {rate}"


def _format_from(out: str | None) -> str:
    if out:
        low = out.lower()
        if low.endswith(".png"):
            return "png"
        if low.endswith(".json"):
            return "chrome"
    return "html"
