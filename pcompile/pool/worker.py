"""One compile worker: a subprocess that runs pickled jobs one at a time for the daemon.

Why a plain subprocess per worker (not multiprocessing/ProcessPoolExecutor): a worker that
segfaults or hangs must take down only its own job. ProcessPoolExecutor marks the whole pool
broken when one worker dies; here the daemon sees EOF on this worker's pipe (or kills it at the
job's deadline), fails that one job, and starts a replacement.

The protocol runs over two inherited pipe fds, never stdout: compilers print, and stdout is
redirected to stderr (the daemon's log) so a stray print cannot corrupt a frame.
"""
from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import pickle
import signal
import sys
import time
import traceback

from pcompile.pool import protocol


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL us if the daemon dies, so a busy worker never outlives it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def run_job(payload: bytes) -> dict:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pcompile.pool.worker")
    parser.add_argument("--read-fd", type=int, required=True)
    parser.add_argument("--write-fd", type=int, required=True)
    parser.add_argument("--preload", default="", help="comma-separated modules to import before signalling ready")
    args = parser.parse_args(argv)
    _die_with_parent()
    os.dup2(2, 1)  # stray prints go to the log, never into the protocol
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is the daemon's business
    for name in filter(None, args.preload.split(",")):
        try:
            importlib.import_module(name)
        except Exception as exc:  # a job that needs it will fail with the real error
            print(f"pcompile worker {os.getpid()}: preload {name} failed: {exc}", file=sys.stderr)
    protocol.write_frame_fd(args.write_fd, {"op": "ready", "pid": os.getpid()})
    while True:
        try:
            msg = protocol.read_frame_fd(args.read_fd)
        except protocol.PeerClosed:
            return 0
        if msg.get("op") == "exit":
            return 0
        reply = run_job(msg["payload"])
        reply["op"] = "done"
        protocol.write_frame_fd(args.write_fd, reply)


if __name__ == "__main__":
    sys.exit(main())
