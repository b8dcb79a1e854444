"""The node pool with real processes: one daemon for many clients, crash and hang isolation,
longest-first order, back-pressure, idle exit, stale sockets, in-process fallback.

Jobs are plain functions of this module (workers import it: tests/ is put on PYTHONPATH);
the thing under test, the daemon and its workers, is never mocked.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pcompile.pool import JobTimedOut, WorkerCrashed
from pcompile.pool.client import NodePool
from pcompile.warn import forget as forget_warnings
from pcompile.pool.launcher import DaemonOptions, read_pidfile
from pcompile.pool.paths import PoolPaths

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


# -- jobs (run inside pool workers) ---------------------------------------------------------
def worker_pid(delay: float = 0.0) -> int:
    time.sleep(delay)
    return os.getpid()


def fails() -> None:
    raise KeyError("missing kernel config 7")


def sleep_forever() -> None:
    time.sleep(3600)


def record(path: str, name: str, delay: float = 0.0) -> str:
    time.sleep(delay)
    with open(path, "a") as f:
        f.write(name + "\n")
    return name


def mark_then_sleep(marker: str, seconds: float) -> str:
    """Signal that the job is running (inside the worker), then stay busy."""
    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)
    return "slept"


def wait_for_file(path: str, timeout: float = 30.0) -> bool:
    deadline = time.time() + timeout
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.01)
    return os.path.exists(path)


# -- fixtures -------------------------------------------------------------------------------
@pytest.fixture
def pool_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")]))
    forget_warnings()
    return tmp_path / "cache"


@pytest.fixture
def pools():
    made: list[NodePool] = []

    def make(cache: Path, **options) -> NodePool:
        pool = NodePool(cache, DaemonOptions(**{"workers": 2, "idle_exit": 60.0, **options}))
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.stop_daemon()
        pool.shutdown(wait=False)


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not reached in time")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- tests ----------------------------------------------------------------------------------
def test_jobs_run_in_worker_processes_and_errors_come_back(pool_env: Path, pools) -> None:
    pool = pools(pool_env)
    assert pool.wait_connected(30)
    pids = {f.result(timeout=60) for f in [pool.submit(worker_pid, 0.05) for _ in range(6)]}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    with pytest.raises(KeyError, match="missing kernel config 7") as info:
        pool.submit(fails).result(timeout=60)
    assert "Traceback" in str(info.value.__cause__)  # the worker's traceback rides along


def test_four_clients_started_at_once_share_one_daemon(pool_env: Path) -> None:
    code = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(TESTS)!r})
        from pcompile.pool.client import NodePool
        from pcompile.pool.launcher import DaemonOptions
        import test_pool_daemon as jobs
        pool = NodePool({str(pool_env)!r}, DaemonOptions(workers=2, idle_exit=60))
        pid = pool.submit(jobs.worker_pid, 0.1).result(timeout=120)
        print(json.dumps({{"daemon": pool.daemon_pid, "worker": pid, "mode": pool.mode}}))
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    daemons = {r["daemon"] for r in results}
    assert len(daemons) == 1 and None not in daemons, results
    assert all(r["mode"] == "daemon" for r in results)
    log = PoolPaths.for_cache_dir(pool_env).log.read_text()
    assert log.count("serving ") == 1, log  # exactly one daemon ever served
    info = read_pidfile(pool_env)
    assert info and info["pid"] in daemons
    NodePool(pool_env, connect_now=False).stop_daemon()


def test_sigkilled_worker_fails_only_its_job_and_is_replaced(pool_env: Path, pools, tmp_path: Path) -> None:
    pool = pools(pool_env)
    assert pool.wait_connected(30)
    wait_until(lambda: all(s["pid"] for s in pool.status()["slots"]))
    marker = tmp_path / "started"
    victim = pool.submit_job(mark_then_sleep, (str(marker), 60.0), label="victim-kernel", weight=100)
    bystander = pool.submit(worker_pid, 0.5)
    assert wait_for_file(str(marker))
    slot = wait_until(lambda: next((s for s in pool.status()["slots"] if s["label"] == "victim-kernel"), None))
    os.kill(slot["pid"], signal.SIGKILL)
    with pytest.raises(WorkerCrashed) as info:
        victim.result(timeout=60)
    message = str(info.value)
    assert "victim-kernel" in message and "SIGKILL" in message and "replaced" in message
    assert bystander.result(timeout=60) != slot["pid"]
    after = pool.submit(worker_pid).result(timeout=120)  # the pool still works afterwards
    assert after != slot["pid"]
    status = wait_until(lambda: (lambda st: st if all(s["pid"] for s in st["slots"]) else None)(pool.status()))
    assert slot["pid"] not in [s["pid"] for s in status["slots"]]
    assert sum(s["replaced"] for s in status["slots"]) == 1


def test_hung_job_times_out_and_its_worker_is_replaced(pool_env: Path, pools) -> None:
    pool = pools(pool_env)
    t0 = time.monotonic()
    hung = pool.submit_job(sleep_forever, timeout=2.0, label="stuck-kernel")
    with pytest.raises(JobTimedOut, match=r"stuck-kernel: timed out after 2 s"):
        hung.result(timeout=120)
    assert time.monotonic() - t0 < 60
    assert isinstance(pool.submit(worker_pid).result(timeout=120), int)
    assert sum(s["replaced"] for s in pool.status()["slots"]) == 1


def test_longest_job_first(pool_env: Path, pools, tmp_path: Path) -> None:
    pool = pools(pool_env, workers=1)
    order = tmp_path / "order"
    marker = tmp_path / "started"
    blocker = pool.submit_job(mark_then_sleep, (str(marker), 1.5), weight=1e9)
    assert wait_for_file(str(marker))  # the one worker is busy; the rest queue at the daemon
    weights = [3, 1000, 50]  # with the blocker, exactly the daemon's window (2 x 1 worker + 2)
    futures = [pool.submit_job(record, (str(order), f"w{w}"), weight=w) for w in weights]
    blocker.result(timeout=60)
    for f in futures:
        f.result(timeout=60)
    assert order.read_text().split() == [f"w{w}" for w in sorted(weights, reverse=True)]


def test_back_pressure_bounds_what_one_client_queues(pool_env: Path, pools) -> None:
    pool = pools(pool_env, workers=1)
    assert pool.wait_connected(30)
    futures = [pool.submit(worker_pid, 0.2) for _ in range(12)]
    window = 2 * 1 + 2
    seen = []
    for _ in range(10):
        st = pool.status()
        seen.append(st["queued"])
        time.sleep(0.1)
    assert max(seen) <= window
    assert len({f.result(timeout=120) for f in futures}) == 1


def test_daemon_exits_when_idle_and_restarts_on_demand(pool_env: Path, pools) -> None:
    pool = pools(pool_env, idle_exit=1.0)
    pool.submit(worker_pid).result(timeout=60)
    first = pool.daemon_pid
    paths = PoolPaths.for_cache_dir(pool_env)
    wait_until(lambda: not pid_alive(first), timeout=30)
    assert not paths.socket.exists() and not paths.pidfile.exists()
    pool.submit(worker_pid).result(timeout=60)  # transparently reconnects to a new daemon
    assert pool.daemon_pid not in (None, first)


def test_a_holding_connection_keeps_an_idle_daemon_up_until_it_closes(pool_env: Path) -> None:
    """A warm's runner holds the daemon for its sandboxed child, which can connect but never start
    one: with the hold the idle exit waits; once the runner lets go, it comes."""
    from pcompile.pool import protocol
    from pcompile.pool.launcher import connect_or_start

    sock, hello = connect_or_start(pool_env, DaemonOptions(workers=1, idle_exit=1.0))
    protocol.send(sock, {"op": "hold"})
    time.sleep(4.0)  # four idle-exit periods
    assert pid_alive(hello["pid"]), "the daemon exited while a runner held it"
    sock.close()
    wait_until(lambda: not pid_alive(hello["pid"]), timeout=30)


def test_stale_socket_is_replaced(pool_env: Path, pools) -> None:
    paths = PoolPaths.for_cache_dir(pool_env)
    paths.ensure()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(paths.socket))  # a socket file nobody listens on (a daemon that was killed)
    dead.close()
    assert paths.socket.exists()
    pool = pools(pool_env)
    assert pool.submit(worker_pid).result(timeout=60) != os.getpid()
    assert pool.mode == "daemon"


def test_a_daemon_dying_under_the_handshake_is_replaced_without_a_warning(pool_env: Path, pools, caplog: pytest.LogCaptureFixture) -> None:
    """A kill -9 or an idle exit closes the listener a moment after a client connected: the client
    sees its handshake reset. That is a daemon going away, not a broken pool: start a fresh one."""
    import threading

    paths = PoolPaths.for_cache_dir(pool_env)
    paths.ensure()
    dying = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dying.bind(str(paths.socket))
    dying.listen(16)
    dropped: list[int] = []

    def drop_handshakes() -> None:  # takes connections and closes them unanswered, then exits
        dying.settimeout(0.1)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                conn, _ = dying.accept()
            except socket.timeout:
                continue
            conn.close()
            dropped.append(1)
        dying.close()

    thread = threading.Thread(target=drop_handshakes, daemon=True)
    thread.start()
    caplog.set_level(logging.WARNING, logger="pcompile.pool")
    pool = pools(pool_env)
    assert pool.submit(worker_pid).result(timeout=60) != os.getpid()
    thread.join(5)
    assert dropped, "the client never reached the dying listener"
    assert pool.mode == "daemon"
    assert not [r.getMessage() for r in caplog.records if r.name == "pcompile.pool" and r.levelno >= logging.WARNING]


def test_falls_back_in_process_with_one_warning(pool_env: Path, caplog: pytest.LogCaptureFixture) -> None:
    pool_env.mkdir(parents=True)
    (pool_env / "pool").write_text("a file where the pool directory should be")
    caplog.set_level(logging.WARNING, logger="pcompile.pool")
    pool = NodePool(pool_env, DaemonOptions(workers=2))
    try:
        results = [f.result(timeout=60) for f in [pool.submit(worker_pid) for _ in range(5)]]
        assert results == [os.getpid()] * 5  # ran here, and did not fail
        assert pool.mode == "local"
        warnings = [r for r in caplog.records if r.name == "pcompile.pool" and r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "compiling in-process" in warnings[0].getMessage() and "\n" not in warnings[0].getMessage()
    finally:
        pool.shutdown()


def test_fallback_callable_runs_when_the_pool_is_unavailable(pool_env: Path) -> None:
    pool_env.mkdir(parents=True)
    (pool_env / "pool").write_text("blocked")
    pool = NodePool(pool_env)
    try:
        assert pool.submit_job(worker_pid, fallback=lambda: "fallback ran").result(timeout=60) == "fallback ran"
    finally:
        pool.shutdown()


def test_daemon_refuses_a_second_instance(pool_env: Path, pools) -> None:
    pool = pools(pool_env)
    assert pool.wait_connected(30)
    paths = PoolPaths.for_cache_dir(pool_env)
    extra = subprocess.run(
        [sys.executable, "-m", "pcompile.pool.daemon", "--cache-dir", str(pool_env), "--identity", paths.identity, "--workers", "1"],
        capture_output=True, text=True, timeout=60,
    )
    assert extra.returncode == 0
    assert "another daemon already serves" in extra.stderr
    assert pool.submit(worker_pid).result(timeout=60) != os.getpid()


def test_daemon_env_drops_a_warm_child_virtual_device() -> None:
    from pcompile.pool.launcher import daemon_env

    env = daemon_env(
        {
            "LD_PRELOAD": "/opt/libjemalloc.so:/cache/vdev/libcuda.so.1",
            "TRITON_LIBCUDA_PATH": "/cache/vdev",
            "PCOMPILE_VDEV_PROFILE": "/tmp/p.txt",
            "PCOMPILE_WARMING": "1",
            "PCOMPILE_CACHE_DIR": "/c",
        }
    )
    assert env == {"LD_PRELOAD": "/opt/libjemalloc.so", "PCOMPILE_CACHE_DIR": "/c"}
