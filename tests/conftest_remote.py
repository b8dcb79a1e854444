"""Fixtures for the remote-tier tests: a real redis-server and a real S3-protocol server (moto in
server mode stands in for S3), each started on a free 127.0.0.1 port and stopped afterwards, and
a worker that runs a job in a separate process (what a rank does: open_store from the
environment, get_or_compute, load what it got).

Import the fixtures into a test module: `from conftest_remote import redis_server, ...`.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO = TESTS_DIR.parent
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {LOOPBACK}:{port} after {timeout} s")


# -- redis ---------------------------------------------------------------------------------------
class RedisServer:
    """A redis-server child process bound to loopback only."""

    def __init__(self, workdir: Path, *, config: Path | None = None, args: list[str] | None = None, persist: bool = False) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed")
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.extra = list(args or [])
        self.persist = persist
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self) -> "RedisServer":
        """Start (or restart, on the same port and data dir) the server."""
        cmd = ["redis-server"]
        if self.config is not None:
            cmd.append(str(self.config))
        cmd += ["--port", str(self.port), "--bind", LOOPBACK, "--dir", str(self.workdir), "--daemonize", "no", "--logfile", ""]
        if self.persist:  # survives kill -9: every write is in the AOF before it is acknowledged
            cmd += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
        elif self.config is None:
            cmd += ["--save", "", "--appendonly", "no"]
        cmd += self.extra
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_port(self.port, proc=self.proc)
        return self

    def client(self, **kwargs: Any) -> Any:
        import redis

        return redis.Redis(host=LOOPBACK, port=self.port, socket_timeout=5, **kwargs)

    def wait_ready(self, timeout: float = 20.0, **kwargs: Any) -> None:
        """After a restart with an AOF: wait until the data is loaded."""
        import redis

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                self.client(**kwargs).ping()
                return
            except (redis.exceptions.BusyLoadingError, redis.exceptions.ConnectionError):
                time.sleep(0.05)
        raise RuntimeError("redis did not become ready")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


# -- S3 (moto server) ----------------------------------------------------------------------------
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


class MotoServer:
    """moto's S3-protocol server as a child process (so a test can kill it like a real one)."""

    def __init__(self) -> None:
        pytest.importorskip("moto")
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> "MotoServer":
        code = "import sys; from moto.server import main; main(sys.argv[1:])"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, "-H", LOOPBACK, "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **S3_ENV},
        )
        wait_port(self.port, timeout=60, proc=self.proc)
        return self

    def client(self, service: str = "s3") -> Any:
        import boto3

        return boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
        ).client(service, endpoint_url=self.endpoint)

    def make_bucket(self, name: str = "pcompile-cache") -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoServer]:
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    server = MotoServer().start()
    try:
        yield server
    finally:
        server.stop()


# -- environment for a job -------------------------------------------------------------------------
_REMOTE_VARS = (
    "PCOMPILE_CACHE_DIR",
    "PCOMPILE_SHARED_DIR",
    "PCOMPILE_REMOTE",
    "PCOMPILE_READ_ONLY",
    "PCOMPILE_HMAC_KEY",
    "PCOMPILE_HMAC_KEY_FILE",
    "PCOMPILE_SIGNING_KEY_FILE",
    "PCOMPILE_VERIFY_KEY_FILE",
    "PCOMPILE_S3_ENDPOINT_URL",
)


def job_env(cache_dir: Path, remote: str | None, **extra: str) -> dict[str, str]:
    """A clean environment for a job process: nothing pcompile-related leaks in from outside."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PCOMPILE_")}
    env.update(S3_ENV)
    env["PCOMPILE_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(TESTS_DIR), env.get("PYTHONPATH", "")])
    if remote:
        env["PCOMPILE_REMOTE"] = remote
    env.update(extra)
    return env


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process tests: start from no pcompile settings at all."""
    for name in list(os.environ):
        if name.startswith("PCOMPILE_"):
            monkeypatch.delenv(name)


def open_store(monkeypatch: pytest.MonkeyPatch, cache_dir: Path, remote: str | None, **env: str) -> Any:
    """A Store opened from the environment, as a job would, in this process."""
    from pcompile.store.compose import open_store

    for name in list(os.environ):
        if name.startswith("PCOMPILE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PCOMPILE_CACHE_DIR", str(cache_dir))
    if remote:
        monkeypatch.setenv("PCOMPILE_REMOTE", remote)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return open_store()


def remote_of(store: Any) -> Any:
    return next(t for t in store.tiers if t.kind == "remote")


# -- the job a worker process runs ------------------------------------------------------------------
FINGERPRINT = {"torch": "2.14.1", "triton": "3.6.0", "arch": "sm_90", "suite": "test_remote"}


def make_entry(layer: str, index: int, size: int, tag: str = "job") -> Any:
    """A real entry: generated Python source plus a pickled payload of `size` pseudo-random bytes.
    Every process builds the identical entry for the same (tag, index)."""
    import hashlib
    import pickle

    from pcompile.keys.key import make_key
    from pcompile.store.entry import Entry

    source = f"def kernel_{index}(x):\n    return x * {index} + {len(tag)}\n"
    key, inputs = make_key(layer, f"{tag}:{index}:{size}:{source}", FINGERPRINT)
    seed = hashlib.sha256(f"{tag}:{index}".encode()).digest()
    noise = (seed * (size // len(seed) + 1))[:size]
    payload = pickle.dumps({"index": index, "noise": noise, "name": f"kernel_{index}"})
    return Entry(key, {"source.py": source.encode(), "payload.pkl": payload}, inputs, {"tag": tag}, 0.0)


def load_entry(entry: Any) -> Any:
    """What a real consumer does with a hit: unpickle and exec. Never on an unverified entry."""
    import pickle

    payload = pickle.loads(entry.blobs["payload.pkl"])
    namespace: dict[str, Any] = {}
    exec(compile(entry.blobs["source.py"].decode(), "<pcompile-entry>", "exec"), namespace)
    return namespace[payload["name"]]


def worker_main() -> None:
    """Run a job described by argv[1] (JSON); print one JSON line per key, then a summary."""
    spec = json.loads(sys.argv[1])
    if spec.get("start_at"):
        time.sleep(max(0.0, spec["start_at"] - time.time()))

    from pcompile.store.compose import open_store

    store = open_store()
    computed = loaded = 0
    outcomes: list[str] = []
    t_start = time.monotonic()
    for index in range(spec["count"]):
        entry_spec = make_entry(spec.get("layer", "kernel"), index, spec["sizes"][index % len(spec["sizes"])], spec.get("tag", "job"))

        def compute(e: Any = entry_spec) -> Any:
            nonlocal computed
            computed += 1
            time.sleep(spec.get("compile_seconds", 0.0))
            return e

        if spec.get("mode") == "get":
            got = store.get(entry_spec.key)
            outcome = "hit" if got is not None else "miss"
            entry = got
        else:
            entry, outcome = store.get_or_compute(entry_spec.key, compute)
        if entry is not None:
            fn = load_entry(entry)
            assert fn(2) == 2 * index + len(spec.get("tag", "job"))
            loaded += 1
        outcomes.append(outcome)
        print(json.dumps({"index": index, "outcome": outcome}), flush=True)
    remote = next((t for t in store.tiers if t.kind == "remote"), None)
    flushed = remote.flush() if remote is not None and spec.get("flush", True) else None
    elapsed = time.monotonic() - t_start
    summary = {
        "summary": True,
        "outcomes": outcomes,
        "computed": computed,
        "loaded": loaded,
        "elapsed": elapsed,
        "flushed": flushed,
        "remote": dict(remote.counters) if remote is not None else None,
    }
    print(json.dumps(summary), flush=True)
    store.close()


def run_worker(env: dict[str, str], timeout: float = 120, **spec: Any) -> tuple[dict[str, Any], str]:
    """Run one job to completion; returns (summary, stderr)."""
    proc = start_worker(env, **spec)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err}"
    return parse_summary(out), err


def start_worker(env: dict[str, str], **spec: Any) -> subprocess.Popen:
    spec.setdefault("count", 4)
    spec.setdefault("sizes", [1000])
    code = "import conftest_remote as c; c.worker_main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(spec)],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def parse_summary(out: str) -> dict[str, Any]:
    for line in reversed(out.splitlines()):
        obj = json.loads(line)
        if obj.get("summary"):
            return obj
    raise AssertionError(f"no summary in worker output:\n{out}")


def warnings_in(stderr: str) -> list[str]:
    """The warning lines a user sees (pcompile.logs' handler: "pcompile: WARNING: ...")."""
    return [line for line in stderr.splitlines() if line.startswith("pcompile: WARNING")]
