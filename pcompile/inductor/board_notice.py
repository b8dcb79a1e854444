"""Say, in one line, when a GPU job misses because the cache was warmed for another board.

The board identity is what the graph keys hold: the CUDA device name (torch's FX key hashes
`get_device_properties().name` through `CacheBase.get_system()`; pcompile's fingerprint the same
name as `target_name`). A warm for `--target h100` keys its graphs "NVIDIA H100 80GB HBM3"; a
job on an H200 ("NVIDIA H200") misses every one of them.

Cost: an all-hit job never gets here. The first graph or AOTAutograd publish of a process leaves
its board's marker (store/boards.py: one stat, and one small write the first time); the first
miss reads the markers once. Nothing scans the store.
"""
from __future__ import annotations

import logging
import shlex
import threading
from typing import Any, Mapping

from pcompile.store import boards

log = logging.getLogger("pcompile.inductor")

_lock = threading.Lock()
_state = {"marked": False, "checked": False, "silent": False}


def silence() -> None:
    """This process works for another (the backward worker): its parent says it, once."""
    _state["silent"] = True


def reset() -> None:
    """Forget what this process did (tests)."""
    _state.update(marked=False, checked=False, silent=False)


def _first(flag: str) -> bool:
    with _lock:
        if _state[flag]:
            return False
        _state[flag] = True
        return True


def _board(fingerprint: Mapping[str, str]) -> tuple[str, str] | None:
    name, arch = str(fingerprint.get("target_name") or ""), str(fingerprint.get("target_arch") or "")
    return (name, arch) if name and arch.startswith("sm_") else None


def _directory_roots(st: Any, writing: bool) -> list[Any]:
    tiers = st.writable_tiers() if writing else st.tiers
    return [t.root for t in tiers if getattr(t.capabilities, "directory", False) and getattr(t, "root", None) is not None]


def note_publish(st: Any, fingerprint: Mapping[str, str]) -> None:
    """The first graph entry this process publishes: leave its board's marker in every
    directory tier it writes. A warm records its command (it replaces an older warm's)."""
    board = _board(fingerprint)
    if st is None or board is None or not _first("marked"):
        return
    from pcompile.settings import JOB_SCRIPT, WARMING

    warming = bool(WARMING.get())
    software = {k: str(fingerprint[k]) for k in ("torch", "triton", "cuda", "python") if k in fingerprint}
    for root in _directory_roots(st, writing=True):
        try:
            boards.write_marker(root, board[0], board[1], by="warm" if warming else "job",
                                command=JOB_SCRIPT.get() if warming else None, software=software, replace=warming)
        except OSError as exc:  # a marker is advice: never fail a publish over it
            log.debug("pcompile: no board marker in %s: %s", root, exc)


def note_miss(st: Any, fingerprint: Mapping[str, str]) -> None:
    """The first graph miss of a GPU job (not a warm, not a helper process, rank 0 only): if the
    cache holds graph entries for other boards and none for this one, say so in one line."""
    board = _board(fingerprint)  # a CPU graph's miss says nothing about boards: wait for a GPU one
    if st is None or board is None or _state["silent"] or not _first("checked"):
        return
    from pcompile.events import _context
    from pcompile.settings import WARMING

    if WARMING.get() or (_context.rank() or 0) != 0:
        return
    line = mismatch_line(board[0], board[1], boards.read_markers(_directory_roots(st, writing=False)))
    if line:
        from pcompile.warn import warn_once

        warn_once("board-mismatch", line, logger=log)


def mismatch_line(name: str, arch: str, markers: list[dict[str, Any]]) -> str | None:
    """The line for a job on board `name` whose cache has graph-entry `markers`, or None when
    the cache holds entries for this board (its misses are new graphs) or for no board at all."""
    if not markers or any(m.get("name") == name for m in markers):
        return None
    from pcompile.vdev.profile import builtin_for

    warmed = sorted({str(m["name"]) for m in markers})
    warms = sorted((m for m in markers if m.get("by") == "warm" and m.get("command")), key=lambda m: float(m.get("at") or 0))
    command = str(warms[-1]["command"]) if warms else None
    target = builtin_for(name)
    head = (f"this job runs on {name} but the cache holds graph entries for {', '.join(warmed)} only "
            f"(graph entries are per board): it compiles its graphs")
    if target is None:
        return (f"{head}; capture this board's profile here with `pcompile profile --out board.json`, then warm for it: "
                f"{warm_command(command, 'board.json')}")
    every = [t for t in (builtin_for(w) for w in warmed) if t] + [target]
    both = f" (or --target {','.join(every)} to warm every board in one run)" if len(every) > 1 else ""
    return f"{head}; warm for this board: {warm_command(command, target)}{both}"


def warm_command(command: str | None, target: str) -> str:
    """The warm that made the other board's entries, for `target` instead: its --target
    replaced (its --check and --json dropped), or a template when no warm recorded one."""
    try:
        argv = shlex.split(command or "")
    except ValueError:
        argv = []
    if argv[:2] != ["pcompile", "warm"]:
        return f"pcompile warm SCRIPT --target {target}"
    out: list[str] = []
    rest = list(argv)
    tail: list[str] = []
    if "--" in rest:
        i = rest.index("--")
        rest, tail = rest[:i], rest[i:]
    skip = False
    for arg in rest:
        if skip:
            skip = False
            continue
        if arg == "--target":
            skip = True
            continue
        if arg.startswith("--target=") or arg in ("--check", "--json"):
            continue
        out.append(arg)
    return shlex.join(out + ["--target", target] + tail)
