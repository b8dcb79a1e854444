"""Find the node's daemon or start it, so that N ranks starting at once end up with one daemon.

Protocol: try to connect. If nobody listens (no socket file, or a stale one that refuses), take
an exclusive flock on the pool dir's start.lock, try once more (a racer may have won while we
waited), and only then spawn the daemon and wait until it answers. The daemon itself refuses to
run if a live daemon already answers on the socket, and removes a stale socket before binding,
so even a lock that does not work (some network filesystems) cannot yield two serving daemons.
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from pcompile.pool import protocol
from pcompile.settings import CACHE_DIR, VDEV_PREFIX, WARM_PREFIX, WARM_SANDBOX_ACTIVE, WARMING
from pcompile.pool.errors import PoolUnavailable
from pcompile.pool.paths import PoolPaths

LOG_LIMIT = 8 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class DaemonOptions:
    """How a daemon is started if this client is the one that starts it."""

    workers: int = 0  # 0: the daemon sizes itself from cgroup CPU and memory
    idle_exit: float = 300.0
    job_timeout: float = 600.0
    preload: tuple[str, ...] = ()
    python: str = sys.executable


class DaemonExiting(ConnectionRefusedError):
    """A daemon took the connection but closed it before answering: it is exiting (idle exit, or
    a kill whose teardown had not yet closed its listener). Handled as nobody listening."""


_NOT_LISTENING = (FileNotFoundError, ConnectionRefusedError)
_SPAWN_ATTEMPTS = 3


def connect(paths: PoolPaths, timeout: float = 30.0) -> tuple[socket.socket, dict[str, Any]]:
    """Connect and handshake. Raises FileNotFoundError/ConnectionRefusedError if nobody listens,
    PoolUnavailable if somebody listens but is not a usable daemon of ours."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(str(paths.socket))
        uid = protocol.peer_uid(sock)
        if uid != os.getuid():
            raise PoolUnavailable(f"{paths.socket} is served by uid {uid}, not by this user")
        protocol.send(sock, {"op": "hello", "version": protocol.PROTOCOL_VERSION, "identity": paths.identity, "pid": os.getpid()})
        hello = protocol.recv(sock, time.monotonic() + timeout)
        if not hello.get("ok"):
            raise PoolUnavailable(f"daemon at {paths.socket} refused us: {hello.get('error')}")
        sock.settimeout(None)
        return sock, hello
    except _NOT_LISTENING:
        sock.close()
        raise
    except (ConnectionResetError, BrokenPipeError, protocol.PeerClosed, EOFError) as exc:
        sock.close()
        raise DaemonExiting(f"daemon at {paths.socket} closed the handshake ({type(exc).__name__})") from None
    except PoolUnavailable:
        sock.close()
        raise
    except (OSError, protocol.ProtocolError, protocol.DeadlineExceeded, EOFError) as exc:
        sock.close()
        raise PoolUnavailable(f"daemon at {paths.socket} did not answer ({type(exc).__name__}: {exc})") from None


@contextmanager
def start_lock(path: Path, timeout: float) -> Iterator[bool]:
    """Exclusive flock on `path`; yields False (no lock) rather than failing where flock does not work."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    locked = False
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PoolUnavailable(f"timed out after {timeout:g} s waiting for {path}") from None
                time.sleep(0.05)
            except OSError as exc:
                if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    break  # the daemon's own bind check still prevents two servers
                raise
        yield locked
    finally:
        if locked:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _log_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


def daemon_env(base: Mapping[str, str]) -> dict[str, str]:
    """The client's environment minus what only its own process should see.

    The daemon outlives its starter and serves every later rank: if `pcompile warm` started it,
    it must not carry the warm child's virtual CUDA device (an LD_PRELOADed libcuda.so.1 and
    its PCOMPILE_VDEV_* / TRITON_LIBCUDA_PATH settings) into workers that a real job uses.
    """
    env = dict(base)
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    kept = [p for p in preload if not p.endswith("/libcuda.so.1")]
    dropped = [p for p in preload if p not in kept]
    if dropped:
        if kept:
            env["LD_PRELOAD"] = ":".join(kept)
        else:
            env.pop("LD_PRELOAD", None)
        if env.get("TRITON_LIBCUDA_PATH") in {str(Path(p).parent) for p in dropped}:
            env.pop("TRITON_LIBCUDA_PATH")
    for name in list(env):
        if name.startswith((VDEV_PREFIX, WARM_PREFIX)) or name == WARMING.name:
            env.pop(name)
    # nor the warm's Python file redirect, which its child processes install from the PYTHONPATH
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not p.rstrip("/").endswith("pcompile/warm/inherit")]
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    else:
        env.pop("PYTHONPATH", None)
    return env


def spawn_daemon(cache_dir: Path, paths: PoolPaths, options: DaemonOptions) -> subprocess.Popen[bytes]:
    """Start the daemon in its own session (a Ctrl-C to the job must not kill the shared pool)."""
    try:
        if paths.log.stat().st_size > LOG_LIMIT:
            os.replace(paths.log, paths.log.with_suffix(".log.1"))
    except FileNotFoundError:
        pass
    cmd = [
        options.python, "-m", "pcompile.pool.daemon",
        "--cache-dir", str(cache_dir),
        "--identity", paths.identity,
        "--workers", str(options.workers),
        "--idle-exit", str(options.idle_exit),
        "--job-timeout", str(options.job_timeout),
    ]
    if options.preload:
        cmd += ["--preload", ",".join(options.preload)]
    env = daemon_env(os.environ)
    # Its own writes (events, stats) go to the cache it serves, whoever started it; each job
    # carries its requester's store settings (config.Settings.job_env).
    env[CACHE_DIR.name] = str(cache_dir)
    # The daemon must import this very pcompile, wherever the client found it.
    import pcompile

    pkg_root = str(Path(pcompile.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    with open(paths.log, "ab") as logf:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True, close_fds=True, env=env)
    # Reap it whenever it exits, so a long-lived client never accumulates a zombie.
    threading.Thread(target=proc.wait, name="pcompile-daemon-reaper", daemon=True).start()
    return proc


def connect_or_start(cache_dir: Path | str, options: DaemonOptions | None = None, *, start_timeout: float = 60.0) -> tuple[socket.socket, dict[str, Any]]:
    """A handshaken connection to this node's daemon, starting it if nobody serves yet.

    Raises PoolUnavailable with a one-line reason when no daemon can be had.
    """
    options = options or DaemonOptions()
    cache_dir = Path(cache_dir).absolute()
    paths = PoolPaths.for_cache_dir(cache_dir)
    try:
        return connect(paths)
    except _NOT_LISTENING:
        pass
    try:
        paths.ensure()
    except OSError as exc:
        raise PoolUnavailable(f"cannot create the pool directory {paths.dir} ({exc.strerror or exc})") from None
    try:
        with start_lock(paths.lock, start_timeout):
            try:
                return connect(paths)
            except _NOT_LISTENING:
                pass
            if WARM_SANDBOX_ACTIVE.get() in ("namespace", "userns"):
                raise PoolUnavailable("no daemon is started inside the warm's file sandbox (it would outlive the warm "
                                      "in the sandbox's view); `pcompile warm` starts it beforehand")
            for _ in range(_SPAWN_ATTEMPTS):
                try:
                    proc = spawn_daemon(cache_dir, paths, options)
                except OSError as exc:
                    raise PoolUnavailable(f"cannot start the pool daemon ({exc.strerror or exc})") from None
                conn = _await_daemon(paths, proc, time.monotonic() + start_timeout, start_timeout)
                if conn is not None:
                    return conn
                # The new daemon deferred to one that still held the socket and has exited since.
            raise PoolUnavailable(f"{_SPAWN_ATTEMPTS} pool daemons in a row exited, each deferring to a daemon that did not answer (log: {paths.log})")
    except OSError as exc:
        raise PoolUnavailable(f"cannot use {paths.dir} ({exc.strerror or exc})") from None


def _await_daemon(paths: PoolPaths, proc: subprocess.Popen[bytes], deadline: float, start_timeout: float) -> tuple[socket.socket, dict[str, Any]] | None:
    """Wait for the spawned daemon (or whichever daemon it deferred to) to answer; None when it
    exited cleanly as redundant but nobody answers, so the caller spawns again."""
    while True:
        try:
            return connect(paths)
        except _NOT_LISTENING:
            pass
        code = proc.poll()
        if code is not None and code != 0:
            raise PoolUnavailable(f"the pool daemon exited with status {code}: {_log_tail(paths.log)}")
        if code == 0:
            try:
                return connect(paths)
            except _NOT_LISTENING:
                return None
        if time.monotonic() > deadline:
            raise PoolUnavailable(f"the pool daemon did not answer within {start_timeout:g} s (log: {paths.log})")
        time.sleep(0.02)


def read_pidfile(cache_dir: Path | str) -> dict[str, Any] | None:
    """What the running daemon wrote about itself, if any (for status and tests)."""
    import json

    paths = PoolPaths.for_cache_dir(cache_dir)
    try:
        return json.loads(paths.pidfile.read_text())
    except (OSError, ValueError):
        return None


__all__ = ["DaemonOptions", "connect", "connect_or_start", "read_pidfile", "spawn_daemon", "start_lock"]
