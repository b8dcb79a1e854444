"""`pcompile clear`: empty the local cache tier (ccache -C): entries, their blobs, Inductor's
working files and the Python bytecode kept for torch's modules (inductor/bytecode.py).
Statistics, job event logs, warm run dirs and shared/remote tiers stay.

Why it refuses while something writes: a job or a busy compile daemon publishing into a tree
being deleted would leave half-entries and fail its own reads; an idle daemon is stopped first
(it would keep serving files from the old tree), which costs nothing but its start next time.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
from pathlib import Path

from pcompile.cli.common import add_common, emit, settings_from
from pcompile.errors import PcompileError
from pcompile.store.stats import pid_alive

#: what `clear` removes, under the cache dir (the local tier and what is built from it)
CLEARED = ("store", "inductor", "bytecode")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("clear", help="empty the local cache tier (entries and Inductor's working files); asks nothing",
                       description="Remove every entry of the local tier and Inductor/Triton's working files under "
                                   "the cache dir. Statistics, job event logs and the shared and remote tiers stay "
                                   "(`pcompile stats --zero` zeroes the counters). Refuses while a job or a busy "
                                   "compile daemon is using this cache; an idle daemon is stopped first.")
    add_common(p)
    p.set_defaults(func=run)


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def running_jobs(cache_dir: Path, daemon_pids: set[int]) -> list[int]:
    """Live processes of this host that counted look-ups into this cache (their stats files),
    other than this one, the daemons and the daemons' workers."""
    host = socket.gethostname()
    found = []
    for path in (cache_dir / "stats").glob("*.*.json"):
        name, _, pid = path.stem.rpartition(".")
        if name != host or not pid.isdigit():
            continue
        p = int(pid)
        if p != os.getpid() and p not in daemon_pids and _ppid(p) not in daemon_pids and pid_alive(p):
            found.append(p)
    return sorted(found)


def settle_daemons(cache_dir: Path) -> list[int]:
    """Stop this cache's idle compile daemons; refuse (PcompileError) while one compiles. Returns their pids.
    A job connected between compiles is caught by `running_jobs` (its own stats file)."""
    import json
    import time

    from pcompile.pool import protocol
    from pcompile.pool.launcher import connect
    from pcompile.pool.paths import PoolPaths

    pids = []
    for pidfile in (cache_dir / "pool").glob("*/daemon.pid"):
        try:
            info = json.loads(pidfile.read_text())
            pid, sock_path, identity = int(info["pid"]), Path(info["socket"]), str(info["identity"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not pid_alive(pid):
            continue
        pids.append(pid)
        paths = PoolPaths(pidfile.parent, sock_path, pidfile.parent / "start.lock", pidfile, pidfile.parent / "daemon.log", identity)
        try:
            sock, _hello = connect(paths, timeout=5)
        except Exception:
            continue  # not answering: on its way out
        with sock:
            try:
                protocol.send(sock, {"op": "status", "id": 0})
                status = protocol.recv(sock, time.monotonic() + 5)
            except Exception:
                continue
            if status.get("queued") or any(s.get("busy") for s in status.get("slots", [])):
                raise PcompileError(f"a compile daemon (pid {pid}) is compiling into {cache_dir}: run `pcompile clear` when its jobs end")
        try:
            sock, _hello = connect(paths, timeout=5)
            with sock:
                protocol.send(sock, {"op": "stop"})
        except Exception:
            pass
    return pids


def _du(path: Path) -> tuple[int, int]:
    files = size = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            try:
                size += os.lstat(os.path.join(root, n)).st_size
                files += 1
            except OSError:
                pass
    return files, size


def run(args: argparse.Namespace) -> int:
    from pcompile.cli.stats_cmd import _human as format_size

    cache_dir = settings_from(args).cache_dir
    if not cache_dir.is_dir():
        emit(args, {"cache_dir": str(cache_dir), "removed": {}, "bytes": 0}, f"nothing to clear: {cache_dir} does not exist")
        return 0
    daemons = settle_daemons(cache_dir)
    jobs = running_jobs(cache_dir, set(daemons))
    if jobs:
        raise PcompileError(f"{len(jobs)} running process(es) use {cache_dir} (pid {', '.join(map(str, jobs))}): "
                            "run `pcompile clear` when they end")
    removed: dict[str, dict[str, int]] = {}
    for name in CLEARED:
        path = cache_dir / name
        if not path.exists():
            continue
        files, size = _du(path)
        shutil.rmtree(path)
        removed[name] = {"files": files, "bytes": size}
    total = sum(r["bytes"] for r in removed.values())
    entries = removed.get("store", {}).get("files", 0)
    if not removed:
        text = f"nothing to clear in {cache_dir}"
    else:
        parts = [f"{name}/ ({r['files']} files, {format_size(r['bytes'])})" for name, r in removed.items()]
        text = (f"cleared {cache_dir}: removed {', '.join(parts)}, {format_size(total)} in all"
                + (f"; stopped {len(daemons)} idle compile daemon(s)" if daemons else "")
                + "; statistics and event logs stay (`pcompile stats --zero` zeroes the counters)")
    emit(args, {"cache_dir": str(cache_dir), "removed": removed, "bytes": total, "files": entries,
                "daemons_stopped": daemons}, text)
    return 0
