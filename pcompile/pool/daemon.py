"""The node's compile daemon: one per (cache dir, host, environment), shared by every rank.

Started detached by the first client (`python -m pcompile.pool.daemon ...`, see launcher.py);
later clients connect to its Unix socket. It owns N worker processes (worker.py, forked from one
warm multiprocessing forkserver that imported torch once), feeds them
from one longest-job-first queue (scheduler.py), fails exactly the job whose worker crashed or
ran past its deadline and replaces that worker, and exits after `idle_exit` seconds with no
queued or running job, so it never holds memory for a job that stopped compiling.

Threads: the main thread accepts; one reader thread per client; one thread per worker slot
that spawns its worker, pops a job, sends it and waits for the answer with a deadline.
The daemon never imports torch and never unpickles a job payload: it only forwards bytes.
Worker processes and the job each one runs are slot.py's.
"""
from __future__ import annotations

import argparse
import errno
import itertools
import json
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

from pcompile.pool import protocol
from pcompile.pool.paths import PoolPaths
from pcompile.pool.scheduler import LongestFirstQueue
from pcompile.pool.sizing import pool_size
from pcompile.pool.slot import Job, WorkerSlot
from pcompile.settings import POOL_WORKER

log = logging.getLogger("pcompile.pool.daemon")

DEFAULT_JOB_TIMEOUT = 600.0


class Client:
    """One connected process. Replies are written under a lock: slots answer concurrently."""

    _ids = itertools.count(1)

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.id = next(self._ids)
        self.alive = True
        self.holds = False  # asked the daemon to stay up while it is connected (a warm running)
        self._lock = threading.Lock()

    def send(self, obj: dict[str, Any]) -> bool:
        if not self.alive:
            return False
        try:
            with self._lock:
                protocol.send(self.sock, obj)
            return True
        except OSError:
            self.alive = False
            return False

    def close(self) -> None:
        self.alive = False
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class Daemon:
    def __init__(
        self,
        paths: PoolPaths,
        workers: int,
        *,
        idle_exit: float = 300.0,
        job_timeout: float = DEFAULT_JOB_TIMEOUT,
        preload: list[str] | None = None,
        python: str | None = None,
        size_reason: str = "",
    ) -> None:
        self.paths = paths
        self.workers = max(1, workers)
        self.idle_exit = idle_exit
        self.job_timeout = job_timeout
        self.preload = preload or []
        self.python = python or sys.executable
        # Workers fork from one warm process that imported `preload` once (see worker.py).
        self.mp = multiprocessing.get_context("forkserver")
        self.mp.set_forkserver_preload(["pcompile.pool.worker", *self.preload])
        self.size_reason = size_reason
        self.queue: LongestFirstQueue[Job] = LongestFirstQueue()
        self.stopping = threading.Event()
        self.clients: set[Client] = set()
        self.clients_lock = threading.Lock()
        self.slots = [WorkerSlot(self, i) for i in range(self.workers)]
        self.listener: socket.socket | None = None
        self.socket_ino: int | None = None
        self.last_busy = time.monotonic()
        self.started = time.time()
        self.completed = 0
        self.failed = 0

    @property
    def window(self) -> int:
        """How many jobs one client may have queued here at once: enough to keep every worker
        busy and the queue sorted, small enough that one rank cannot flood the others."""
        return 2 * self.workers + 2

    # -- socket --------------------------------------------------------------------------
    def bind(self) -> bool:
        """Bind the socket; False if a live daemon already answers there (we are redundant)."""
        path = str(self.paths.socket)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            try:
                sock.bind(path)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                if self.answers(path):
                    sock.close()
                    return False  # somebody is serving
                try:
                    os.unlink(path)  # stale: nobody listens
                except FileNotFoundError:
                    pass
                sock.bind(path)
        finally:
            os.umask(old_umask)
        sock.listen(128)
        sock.settimeout(0.5)
        self.listener = sock
        self.socket_ino = os.stat(path).st_ino
        return True

    def answers(self, path: str, timeout: float = 5.0) -> bool:
        """Whether a daemon answers a handshake on `path`. A listener that takes the connection
        and drops it is a daemon on its way out (idle exit, a kill mid-teardown): not serving."""
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(timeout)
            probe.connect(path)
            protocol.send(probe, {"op": "hello", "version": protocol.PROTOCOL_VERSION, "identity": self.paths.identity, "pid": os.getpid()})
            protocol.recv(probe, time.monotonic() + timeout)
            return True
        except (OSError, protocol.ProtocolError, protocol.DeadlineExceeded, EOFError):
            return False
        finally:
            probe.close()

    def write_pidfile(self) -> None:
        info = {
            "pid": os.getpid(),
            "socket": str(self.paths.socket),
            "workers": self.workers,
            "started": self.started,
            "identity": self.paths.identity,
        }
        tmp = self.paths.pidfile.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(info))
        os.replace(tmp, self.paths.pidfile)

    # -- serving -------------------------------------------------------------------------
    def touch(self) -> None:
        self.last_busy = time.monotonic()

    def busy(self) -> bool:
        if len(self.queue) > 0 or any(slot.job is not None for slot in self.slots):
            return True
        with self.clients_lock:
            return any(c.holds and c.alive for c in self.clients)

    def serve(self) -> int:
        assert self.listener is not None
        for slot in self.slots:
            slot.thread.start()
        log.info("serving %s with %d workers (%s), idle exit %gs", self.paths.socket, self.workers, self.size_reason, self.idle_exit)
        try:
            while not self.stopping.is_set():
                try:
                    conn, _ = self.listener.accept()
                except socket.timeout:
                    if self.busy():
                        self.touch()
                    elif time.monotonic() - self.last_busy > self.idle_exit:
                        log.info("idle for %gs: exiting", self.idle_exit)
                        break
                    continue
                except OSError:
                    if self.stopping.is_set():
                        break
                    raise
                self.accept(conn)
        finally:
            self.shutdown()
        return 0

    def accept(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        try:
            uid = protocol.peer_uid(conn)
        except OSError:
            conn.close()
            return
        if uid != os.getuid():
            log.warning("refused a connection from uid %d", uid)
            conn.close()
            return
        client = Client(conn)
        with self.clients_lock:
            self.clients.add(client)
        threading.Thread(target=self.read_client, args=(client,), name=f"pcompile-client-{client.id}", daemon=True).start()

    def read_client(self, client: Client) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    msg = protocol.recv(client.sock)
                except (protocol.ProtocolError, OSError, EOFError):
                    break
                self.handle(client, msg)
        finally:
            client.alive = False
            dropped = self.queue.drop_owner(client.id)
            if dropped:
                log.info("client %d left with %d queued jobs; dropped them", client.id, dropped)
            with self.clients_lock:
                self.clients.discard(client)
            client.close()

    def handle(self, client: Client, msg: dict[str, Any]) -> None:
        op = msg.get("op")
        if op == "submit":
            if self.stopping.is_set():
                client.send({"op": "result", "id": msg.get("id"), "ok": False, "kind": "unavailable", "error": "pool daemon is shutting down"})
                return
            job = Job(client, msg, self.job_timeout)
            self.touch()
            self.queue.push(job, job.weight, owner=client.id)
        elif op == "hello":
            ok = msg.get("identity") == self.paths.identity and msg.get("version") == protocol.PROTOCOL_VERSION
            client.send(
                {
                    "op": "hello",
                    "ok": ok,
                    "error": None if ok else "environment identity or protocol version differs",
                    "pid": os.getpid(),
                    "workers": self.workers,
                    "window": self.window,
                    "size_reason": self.size_reason,
                }
            )
        elif op == "hold":
            # A warm's runner: its sandboxed child can only connect, never start a daemon, so no idle
            # exit while the runner stays connected.
            client.holds = True
        elif op == "status":
            client.send({"op": "status", "id": msg.get("id"), **self.status()})
        elif op == "stop":
            log.info("stop requested by client %d", client.id)
            self.stopping.set()
        else:
            client.send({"op": "error", "id": msg.get("id"), "error": f"unknown op {op!r}"})

    def reply(self, job: Job, outcome: dict[str, Any]) -> None:
        if outcome.get("ok"):
            self.completed += 1
        else:
            self.failed += 1
            if outcome.get("kind") in ("crashed", "timeout", "unavailable"):
                log.warning("%s", outcome.get("error"))
        outcome.update({"op": "result", "id": job.cid})
        if job.started_at is not None:
            outcome["queued_seconds"] = round(job.started_at - job.queued_at, 6)
        job.client.send(outcome)

    def status(self) -> dict[str, Any]:
        with self.clients_lock:
            nclients = len(self.clients)
        return {
            "pid": os.getpid(),
            "workers": self.workers,
            "size_reason": self.size_reason,
            "queued": len(self.queue),
            "clients": nclients,
            "completed": self.completed,
            "failed": self.failed,
            "uptime": round(time.time() - self.started, 3),
            "idle_exit": self.idle_exit,
            "slots": [slot.describe() for slot in self.slots],
        }

    def shutdown(self) -> None:
        self.stopping.set()
        self.queue.close()
        if self.listener is not None:
            # Unlink before closing: a client arriving now finds no socket and starts a daemon,
            # instead of landing in the backlog of a listener about to close.
            try:
                if os.stat(self.paths.socket).st_ino == self.socket_ino:
                    os.unlink(self.paths.socket)
            except FileNotFoundError:
                pass
            self.listener.close()
        with self.clients_lock:
            clients = list(self.clients)
        for client in clients:
            client.close()
        for slot in self.slots:
            slot.stop()
        try:
            info = json.loads(self.paths.pidfile.read_text())
            if info.get("pid") == os.getpid():
                self.paths.pidfile.unlink()
        except (OSError, ValueError):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pcompile.pool.daemon", description="pcompile node compile pool")
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--workers", type=int, default=0, help="0: size from cgroup CPU quota and memory")
    parser.add_argument("--idle-exit", type=float, default=300.0)
    parser.add_argument("--job-timeout", type=float, default=DEFAULT_JOB_TIMEOUT)
    parser.add_argument("--preload", default="")
    args = parser.parse_args(argv)

    paths = PoolPaths.for_cache_dir(args.cache_dir, args.identity)
    paths.ensure()
    # Inherited by the forkserver and so by every worker: a worker never starts pools of its
    # own, and a pcompile hook loaded into a worker (PCOMPILE=1) stays out of the way.
    os.environ.update({POOL_WORKER.name: "1", "TORCHINDUCTOR_COMPILE_THREADS": "1", "TORCH_WARM_POOL": "0", "PYTHONUNBUFFERED": "1"})
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s daemon[{os.getpid()}] %(levelname)s %(message)s", stream=sys.stderr)
    if args.workers > 0:
        workers, reason = args.workers, "requested"
    else:
        size = pool_size()
        workers, reason = size.workers, size.reason
    daemon = Daemon(
        paths, workers, idle_exit=args.idle_exit, job_timeout=args.job_timeout, preload=[m for m in args.preload.split(",") if m], size_reason=reason
    )
    if not daemon.bind():
        log.info("another daemon already serves %s; exiting", paths.socket)
        return 0
    daemon.write_pidfile()
    signal.signal(signal.SIGTERM, lambda *_: daemon.stopping.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return daemon.serve()


if __name__ == "__main__":
    sys.exit(main())
