"""The backward worker: a child process that compiles shipped backward graphs, one at a time.

Started by pcompile.inductor.backward_ahead with the parent's environment (same cache directory,
same node pool for its kernels). It speaks length-prefixed pickles (pcompile.pool.protocol):

  parent -> worker   {"op": "job", "id": n, "data": bytes}       a compat.backward_graph shipment
  worker -> parent   {"op": "ready", "pid": ...}                  hooks installed, jobs welcome
                     {"op": "claimed", "id": n, "key": ..., "outcome": hit|leased|miss}
                     {"op": "done", "id": n, "ok": bool, "error": str, "seconds": float}

"claimed" is sent as soon as the job's FX graph lookup has an answer (normally: this worker
holds the key's lease), so that the parent's own lookup of that key waits for this compile
instead of racing it. The compiled graph reaches the parent through the store. The worker exits
at EOF (its parent is gone) or after `IDLE_EXIT_S` without work, so an idle job does not keep a
CUDA context and a torch import resident.

It is a fresh interpreter, so it pays torch's and Inductor's imports (~12-13 s on the H100 host)
before its first graph: backward_ahead starts it at torch.compile, so that those imports overlap
Dynamo's tracing and the joint graph's trace.
(Forking it from the node pool's warm forkserver was tried: the fork saw no CUDA device, took the
CPU path of the key fingerprint and hung in Inductor's ISA probe; see benchmarks/RESULTS.md.)
"""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Any

IDLE_EXIT_S = 120.0

_out_fd = -1
_send_lock = threading.Lock()
_current: dict[str, Any] = {"id": None, "claimed": False}


def _send(msg: dict[str, Any]) -> None:
    from pcompile.pool import protocol

    with _send_lock:
        protocol.write_frame_fd(_out_fd, msg)


def _on_lookup(kind: str, key: str, outcome: str) -> None:
    if kind != "graph" or _current["id"] is None or _current["claimed"]:
        return
    _current["claimed"] = True
    _send({"op": "claimed", "id": _current["id"], "key": key, "outcome": outcome})


def _run(job_id: int, data: bytes) -> None:
    from pcompile.inductor import store_gateway
    from pcompile.compat import backward_graph

    _current.update(id=job_id, claimed=False)
    t0 = time.perf_counter()
    try:
        with store_gateway.scope():
            backward_graph.compile_shipped(data)
        reply: dict[str, Any] = {"ok": True, "error": ""}
    except BaseException as exc:  # the job's failure is the parent's information, not our exit
        reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)}
    _current.update(id=None)
    reply.update(op="done", id=job_id, seconds=time.perf_counter() - t0)
    _send(reply)


def _prewarm() -> None:
    """What the first graph would otherwise pay on the critical path: pcompile's key fingerprints
    (software hash, device probe, CPU ISA probe) and Inductor's one-time set-up."""
    from pcompile.compat import backward_graph
    from pcompile.inductor.layer_keys import layer_fingerprint

    for kind in ("graph", "autograd", "triton", "autotune"):
        try:
            layer_fingerprint(kind)
        except Exception:
            pass
    backward_graph.prewarm()


def _yield_cpu_to_the_job() -> None:
    """Speculation runs at the lowest CPU priority: the worker starts at the torch.compile call,
    and in a job whose graphs then all hit, its import competed with the job's own start-up (a
    ResNet-50 restart after a warm: the worker's 5-7 CPU-s beside a first step 0.4-3.5 s slower
    than stock hot, H200). Where cores are idle, as on a cold compile, nice changes nothing."""
    try:
        os.nice(19 - os.nice(0))
    except OSError:
        pass


def serve(in_fd: int, out_fd: int) -> int:
    """Install the hooks, prewarm, say ready, then run jobs until EOF or idle."""
    global _out_fd
    _out_fd = out_fd
    from pcompile.settings import BACKWARD_AHEAD

    os.environ[BACKWARD_AHEAD.name] = "0"  # never speculate from inside the speculation
    from pcompile.inductor import board_notice

    board_notice.silence()  # the job's own process names a board mismatch, once
    _yield_cpu_to_the_job()
    import torch  # noqa: F401

    from pcompile.inductor import store_gateway, hooks
    from pcompile.pool import protocol

    import faulthandler

    t0 = time.perf_counter()
    faulthandler.dump_traceback_later(30.0, exit=False)  # a stuck start-up names where it is stuck
    hooks.install_hooks()
    _prewarm()
    faulthandler.cancel_dump_traceback_later()
    store_gateway.add_listener(_on_lookup)
    _send({"op": "ready", "pid": os.getpid(), "prewarm_s": time.perf_counter() - t0})
    while True:
        try:
            msg = protocol.read_frame_fd(in_fd, deadline=time.monotonic() + IDLE_EXIT_S)
        except (protocol.ProtocolError, protocol.DeadlineExceeded, OSError):
            return 0  # parent gone, or idle long enough
        if msg.get("op") == "job":
            _run(int(msg["id"]), msg["data"])
        elif msg.get("op") == "exit":
            return 0


def main() -> int:
    """Entry point: `python -m pcompile.inductor.backward_worker`, talking over stdin/stdout."""
    from pcompile.pool.worker import _die_with_parent

    _die_with_parent()
    out_fd = os.dup(1)  # the protocol owns the real stdout; compilers' stray prints go to stderr
    os.dup2(2, 1)
    return serve(sys.stdin.fileno(), out_fd)


if __name__ == "__main__":
    sys.exit(main())
