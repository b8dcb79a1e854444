"""One compile worker: a process that runs pickled jobs one at a time for the daemon.

Why one process per worker, each watched on its own (not a ProcessPoolExecutor): a worker that
segfaults or hangs must take down only its own job. ProcessPoolExecutor marks the whole pool
broken when one worker dies; here the daemon sees EOF on this worker's pipe (or kills it at the
job's deadline), fails that one job, and starts a replacement.

Why a forkserver: a worker's cost is importing torch and Triton (seconds of CPU). The daemon's
multiprocessing forkserver imports them once (`preload`) and forks every worker from that warm
process, as Inductor's own sidecar does, so N workers cost one import, not N, and a replacement
for a crashed worker is ready in milliseconds.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import pickle
import signal
import sys
import time
import traceback
from typing import Any


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL us when our parent (the forkserver) goes, so no worker outlives the pool."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def run_job(payload: bytes) -> dict[str, Any]:
    """Unpickle (fn, args, kwargs), run it, and describe the outcome as a reply frame."""
    t0 = time.perf_counter()
    try:
        fn, args, kwargs = pickle.loads(payload)
        result = fn(*args, **kwargs)
        data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        return {"ok": True, "data": data, "seconds": time.perf_counter() - t0}
    except BaseException as exc:  # the job's own failure: report it, stay alive
        try:
            exc_bytes: bytes | None = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            exc_bytes = None
        return {
            "ok": False,
            "kind": "raised",
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
            "exc": exc_bytes,
            "seconds": time.perf_counter() - t0,
        }


def serve(conn: Any, preload: tuple[str, ...] = ()) -> None:
    """Worker main loop over a multiprocessing Connection: ready, then run jobs until EOF/exit."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is the daemon's business
    try:
        os.dup2(2, 1)  # stray prints from compilers land in the daemon log
    except OSError:
        pass
    for name in preload:  # already imported by the forkserver; cheap here
        try:
            importlib.import_module(name)
        except Exception as exc:  # a job that needs it fails with the real error
            print(f"pcompile worker {os.getpid()}: preload {name} failed: {exc}", file=sys.stderr)
    conn.send_bytes(pickle.dumps({"op": "ready", "pid": os.getpid()}))
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if msg.get("op") == "exit":
            return
        reply = run_job(msg["payload"])
        reply["op"] = "done"
        conn.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
