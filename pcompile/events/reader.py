"""Reading job logs back: which jobs exist, and one job's events (tolerating torn or foreign lines)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from pcompile.errors import PcompileError
from pcompile.events._context import sanitize
from pcompile.events._sink import SUFFIX


@dataclasses.dataclass(frozen=True)
class JobLog:
    job: str
    path: Path
    mtime: float
    size: int


def list_jobs(directory: Path) -> list[JobLog]:
    """Job logs in `directory`, newest first."""
    jobs = []
    if not directory.is_dir():
        return jobs
    for p in directory.glob("*" + SUFFIX):
        try:
            st = p.stat()
        except OSError:
            continue
        jobs.append(JobLog(p.name[: -len(SUFFIX)], p, st.st_mtime, st.st_size))
    jobs.sort(key=lambda j: j.mtime, reverse=True)
    return jobs


def find_job(directory: Path, job: str | None) -> JobLog:
    """The named job's log, or the newest one; a one-line error saying what exists otherwise."""
    jobs = list_jobs(directory)
    if not jobs:
        raise PcompileError(f"no event logs in {directory}; run a compile with pcompile first "
                            "(or pass --cache-dir / --job to point at another one)")
    if job is None:
        return jobs[0]
    want = sanitize(job)
    for j in jobs:
        if j.job == want:
            return j
    prefix = [j for j in jobs if j.job.startswith(want)]
    if len(prefix) == 1:
        return prefix[0]
    names = ", ".join(j.job for j in jobs[:5])
    raise PcompileError(f"no event log for job {job!r} in {directory}; newest jobs: {names}")


def load(path: Path) -> tuple[list[dict], int]:
    """All well-formed events of one log, and how many lines were skipped as unreadable."""
    events: list[dict] = []
    bad = 0
    with open(path, "rb") as fh:
        for raw in fh:
            try:
                ev = json.loads(raw)
            except ValueError:
                bad += 1
                continue
            if not isinstance(ev, dict) or not isinstance(ev.get("kind"), str):
                bad += 1
                continue
            try:
                ev["ts"] = float(ev["ts"])
                ev["dur"] = max(float(ev.get("dur") or 0.0), 0.0)
            except (KeyError, TypeError, ValueError):
                bad += 1
                continue
            events.append(ev)
    return events, bad
