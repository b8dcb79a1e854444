"""`pcompile report`: one job's compile as a page (HTML), a picture (PNG) or a Perfetto trace, plus a 5-line summary."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from pcompile.cli.common import add_common, emit, settings_from

FORMATS = ("html", "png", "chrome")
_EXT = {"html": ".html", "png": ".png", "chrome": ".trace.json"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="show where one job's compile time went (HTML, PNG or Chrome trace)",
                              description="Render one job's compile events: a timeline with the critical path, the "
                                          "slowest graphs and kernels, hit rates per layer and tier, and time saved.")
    p.add_argument("--job", default=None, help="job id (or a unique prefix); default: the newest job")
    p.add_argument("--out", default=None, help="output file (default ./pcompile-report-JOB.html|.png|.trace.json)")
    p.add_argument("--format", choices=FORMATS, default=None, help="default: from --out's extension, else html")
    p.add_argument("--list", action="store_true", help="list the jobs that have event logs, newest first")
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pcompile.events import analysis, reader
    from pcompile.events._sink import events_dir

    directory = events_dir(settings_from(args).cache_dir)
    if args.list:
        jobs = reader.list_jobs(directory)
        emit(args, [{"job": j.job, "path": str(j.path), "mtime": j.mtime, "bytes": j.size} for j in jobs],
             "\n".join(f"{j.job}  {j.size / 1024:.0f} KiB  {j.path}" for j in jobs) or f"no event logs in {directory}")
        return 0
    log = reader.find_job(directory, args.job)
    events, bad = reader.load(log.path)
    a = analysis.analyze(events, job=log.job, path=log.path, bad_lines=bad)
    fmt = args.format or _format_from(args.out)
    out = Path(args.out) if args.out else Path(f"pcompile-report-{log.job}{_EXT[fmt]}")
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


def _format_from(out: str | None) -> str:
    if out:
        low = out.lower()
        if low.endswith(".png"):
            return "png"
        if low.endswith(".json"):
            return "chrome"
    return "html"
