"""Fault matrix: each fault, by a real mechanism, against a real compile in a fresh process.

Why: the promise is "pcompile never fails a job"; this shows, one row per fault, whether the job
completed, whether its outputs equal stock Inductor's bit for bit, what pcompile printed, and the
state `pcompile verify` finds after. Mechanisms are real (size-limited tmpfs, read-only remounts,
lazy unmounts, a root process without CAP_DAC_OVERRIDE, a real redis-server killed and restarted,
SIGSTOP for a hung server); a row the machine cannot stage is skipped with the reason.

    python tools/faults.py [--rows NAME,NAME] [--json FILE]      # needs root for the mounts
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "tools" / "fault_job.py"
JOB_TIMEOUT = 300.0


class Skip(Exception):
    """This machine cannot stage the fault; the message says why."""


@dataclasses.dataclass
class Row:
    fault: str
    mechanism: str
    result: str = "skipped"  # completed | FAILED (rc N) | skipped
    equal: bool | None = None
    printed: str = ""
    verify: str = ""
    seconds: float = 0.0
    ok: bool | None = None  # None: skipped
    note: str = ""


@dataclasses.dataclass
class Job:
    rc: int
    digest: str | None
    lines: list[str]
    stderr: str
    seconds: float
    work: Path
    phase2: float = 0.0


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PCOMPILE", "TORCHINDUCTOR", "TRITON_CACHE"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_job(env: dict[str, str], work: Path, mid: Callable[[], None] | None = None,
            prefix: list[str] | None = None, backend: str = "pcompile") -> Job:
    """Run fault_job.py; `mid` runs between its phases (the fault applied mid-job)."""
    go = work / f"go.{time.monotonic_ns()}"
    cmd = [*(prefix or []), sys.executable, str(JOB), "--backend", backend, "--go", str(go)]
    t0 = time.monotonic()
    err_path = work / f"stderr.{time.monotonic_ns()}"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, env=_env(env), stdout=subprocess.PIPE, stderr=err, text=True, cwd=work)
        digest, phase2 = None, 0.0
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if line.startswith("PHASE1"):
                    if mid is not None:
                        mid()
                    go.touch()
                elif line.startswith("RESULT"):
                    digest, phase2 = line.split()[1], float(line.split()[2])
        except BaseException:
            proc.kill()  # staging the fault failed: no job left writing into the dir
            proc.wait()
            raise
        try:
            rc = proc.wait(timeout=JOB_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    stderr = err_path.read_text(errors="replace")
    lines = [ln.strip() for ln in stderr.splitlines() if "pcompile" in ln.lower() and "Traceback" not in ln]
    return Job(rc, digest, lines, stderr, time.monotonic() - t0, work, phase2)


def verify_state(cache_dir: Path, shared: Path | None = None) -> tuple[str, int | None]:
    """What `pcompile verify` says about the cache dir after the job, in a few words."""
    args = [sys.executable, "-m", "pcompile.cli.main", "verify", "--json", "--cache-dir", str(cache_dir)]
    if shared is not None:
        args += ["--shared-dir", str(shared)]
    try:
        out = subprocess.run(args, env=_env({}), capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "verify hung", None
    try:
        data = json.loads(out.stdout)
    except ValueError:
        tail = (out.stderr or out.stdout).strip().splitlines()
        return f"rc {out.returncode}: {tail[-1] if tail else ''}"[:90], None
    bad = len(data.get("bad", []))
    return f"{data.get('checked', '?')} entries, {bad} bad" + ("" if out.returncode == 0 else f" (rc {out.returncode})"), bad


# -- mechanisms -------------------------------------------------------------------------------
def _sh(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    done = _sh("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    if done.returncode != 0:
        raise Skip(f"cannot mount a tmpfs here ({(done.stderr.strip().splitlines() or ['not root?'])[-1]})")
    try:
        yield path
    finally:
        _sh("umount", "-l", str(path))


def fill(path: Path) -> None:
    """Fill the filesystem holding `path` to the last byte."""
    for name, chunk in (("filler", 65536), ("filler2", 512)):
        try:
            with open(path / name, "wb", buffering=0) as fh:
                while True:
                    fh.write(b"\0" * chunk)
        except OSError:
            pass


def remount_ro(path: Path) -> None:
    done = _sh("mount", "-o", "remount,ro", str(path))
    if done.returncode != 0:
        raise RuntimeError(f"remount ro failed: {done.stderr}")


def overmount_ro(path: Path) -> None:
    """A read-only bind of the dir over itself: same files, every new write by path gets EROFS
    (remount,ro itself is refused while the job holds a file open for writing)."""
    done = _sh("mount", "-o", "bind,ro", str(path), str(path))
    if done.returncode != 0:
        raise RuntimeError(f"read-only bind failed: {done.stderr}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A real redis-server on loopback, no persistence (a restart comes back empty)."""

    def __init__(self, work: Path) -> None:
        self.exe = shutil.which("redis-server")
        if self.exe is None:
            raise Skip("redis-server is not installed (apt-get install redis-server)")
        self.port = _free_port()
        self.work = work
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(self.work)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        limit = time.monotonic() + 10
        while time.monotonic() < limit:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


# -- rows -------------------------------------------------------------------------------------
@dataclasses.dataclass
class Fault:
    name: str
    mechanism: str
    run: Callable[[Path, str], Row]  # (work dir, stock digest) -> row


def _row(name: str, mechanism: str, job: Job, stock: str, verify: tuple[str, int | None], expect: str | None) -> Row:
    row = Row(name, mechanism, seconds=round(job.seconds, 1), verify=verify[0])
    row.result = "completed" if job.rc == 0 and job.digest else f"FAILED (rc {job.rc})"
    row.equal = job.digest == stock
    row.printed = " | ".join(job.lines).replace(str(job.work), "<tmp>") or "(nothing)"
    said = len(job.lines) <= 1 and (expect is None and not job.lines or expect is not None and any(expect in ln for ln in job.lines))
    row.ok = job.rc == 0 and row.equal and said and verify[1] == 0
    if job.rc != 0:
        row.note = job.stderr.strip().splitlines()[-1][:160] if job.stderr.strip() else ""
    elif not said:
        row.note = f"expected one line containing {expect!r}" if expect else "expected no pcompile line"
    return row


def _ok_verify(path: Path, shared: Path | None = None) -> tuple[str, int | None]:
    return verify_state(path, shared) if (path / "store").exists() else ("no store there", 0)


def full_at_start(work: Path, stock: str) -> Row:
    with tmpfs(work / "c", "400k") as c:
        job = run_job({"PCOMPILE_CACHE_DIR": str(c)}, work)
        return _row("full at start", "400 KiB tmpfs, default free-space floor", job, stock, _ok_verify(c), "is full")


def full_in_link(work: Path, stock: str) -> Row:
    with tmpfs(work / "c", "400k") as c:
        job = run_job({"PCOMPILE_CACHE_DIR": str(c), "PCOMPILE_MIN_FREE_BYTES": "0"}, work)
        return _row("full in compiler/linker", "400 KiB tmpfs, floor 0: ENOSPC inside ld/Inductor writes", job, stock,
                    _ok_verify(c), "is full")


def full_mid_job(work: Path, stock: str) -> Row:
    with tmpfs(work / "c", "16m") as c:
        job = run_job({"PCOMPILE_CACHE_DIR": str(c), "PCOMPILE_MIN_FREE_BYTES": "0"}, work, mid=lambda: fill(c))
        for name in ("filler", "filler2"):
            (c / name).unlink(missing_ok=True)
        return _row("full mid-job", "16 MiB tmpfs filled to the last byte between the two graphs", job, stock,
                    _ok_verify(c), "is full")


def read_only_at_start(work: Path, stock: str) -> Row:
    with tmpfs(work / "c", "1g") as c:
        run_job({"PCOMPILE_CACHE_DIR": str(c)}, work)  # populated by a healthy run first
        remount_ro(c)
        job = run_job({"PCOMPILE_CACHE_DIR": str(c)}, work)
        return _row("read-only at start", "populated tmpfs remounted ro", job, stock, _ok_verify(c), "read-only")


def read_only_mid_job(work: Path, stock: str) -> Row:
    with tmpfs(work / "c", "1g") as c:
        job = run_job({"PCOMPILE_CACHE_DIR": str(c)}, work, mid=lambda: overmount_ro(c))
        return _row("read-only mid-job", "read-only bind mount over the dir between the two graphs", job, stock, _ok_verify(c), "read-only")


def unwritable(work: Path, stock: str) -> Row:
    if shutil.which("setpriv") is None:
        raise Skip("setpriv (util-linux) is not installed")
    c = work / "c"
    c.mkdir()
    os.chown(c, 65534, 65534)
    os.chmod(c, 0o755)
    # Root without CAP_DAC_OVERRIDE is refused like any other user (a non-root uid would also be
    # refused the interpreter under /root here).
    prefix = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"] if os.getuid() == 0 else []
    if _sh(*prefix, "touch", str(c / "x")).returncode == 0:
        raise Skip("cannot make a directory unwritable for this process (needs root to drop capabilities)")
    job = run_job({"PCOMPILE_CACHE_DIR": str(c)}, work, prefix=prefix)
    return _row("unwritable (EACCES)", "dir of uid 65534, 0755; job runs as root without capabilities", job, stock,
                _ok_verify(c), "not writable")


def vanished_mid_job(work: Path, stock: str) -> Row:
    with tmpfs(work / "c", "1g") as c:
        job = run_job({"PCOMPILE_CACHE_DIR": str(c)}, work, mid=lambda: _sh("umount", "-l", str(c)))
        return _row("vanished mid-job (ENOENT)", "tmpfs lazily unmounted between the two graphs", job, stock,
                    _ok_verify(c), "is gone")


#: rows no machine of this project stages yet: named in RESULTS.md as not staged, kept out of CI's rows
NOT_STAGED = {
    "stale-nfs": "ESTALE needs an NFS server whose export is replaced; not staged (the code treats ESTALE as 'is gone')",
    "slow": "a write that blocks needs device-mapper's delay target or a FUSE layer that delays; not staged "
            "(the start probe's deadline is PCOMPILE_CACHE_DIR_TIMEOUT)",
}


def stale_nfs(work: Path, stock: str) -> Row:
    raise Skip(NOT_STAGED["stale-nfs"])


def quota(work: Path, stock: str) -> Row:
    probe = work / "q"
    probe.mkdir()
    done = _sh("mount", "-t", "tmpfs", "-o", "size=64m,quota,usrquota_block_hardlimit=400k", "tmpfs", str(probe))
    if done.returncode != 0:
        raise Skip("no filesystem quotas here (tmpfs quota refused; kernel without CONFIG_QUOTA)")
    try:
        os.chmod(probe, 0o1777)
        prefix = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
        job = run_job({"PCOMPILE_CACHE_DIR": str(probe), "PCOMPILE_MIN_FREE_BYTES": "0"}, work, prefix=prefix)
        return _row("quota exceeded (EDQUOT)", "tmpfs user quota 400 KiB, root without CAP_SYS_RESOURCE", job, stock,
                    _ok_verify(probe), "quota")
    finally:
        _sh("umount", "-l", str(probe))


def slow(work: Path, stock: str) -> Row:
    raise Skip(NOT_STAGED["slow"])


def shared_read_only(work: Path, stock: str) -> Row:
    with tmpfs(work / "s", "1g") as s:
        run_job({"PCOMPILE_CACHE_DIR": str(work / "c0"), "PCOMPILE_SHARED_DIR": str(s)}, work)
        remount_ro(s)
        c = work / "c1"
        job = run_job({"PCOMPILE_CACHE_DIR": str(c), "PCOMPILE_SHARED_DIR": str(s)}, work)
        row = _row("shared tier read-only (populated)", "tmpfs shared dir remounted ro", job, stock, _ok_verify(c, s), None)
        stats = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "stats", "--json", "--cache-dir", str(c)],
                               env=_env({}), capture_output=True, text=True)
        with contextlib.suppress(ValueError):
            layers = json.loads(stats.stdout).get("layers", {})
            misses = sum(v.get("misses", 0) for v in layers.values())
            row.note = f"{misses} misses" if misses else "every layer hit"
            row.ok = bool(row.ok) and misses == 0
        return row


def torn_shared(work: Path, stock: str) -> Row:
    s = work / "s"
    run_job({"PCOMPILE_CACHE_DIR": str(work / "c0"), "PCOMPILE_SHARED_DIR": str(s)}, work)
    blobs = sorted((s / "store" / "blobs").rglob("*"), key=lambda p: p.stat().st_size if p.is_file() else 0)
    victim = blobs[-1]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])  # a writer killed mid-write, no rename
    (s / "store" / "tmp" / f"{victim.name}.99999.deadbeef0000.tmp").write_bytes(b"\0" * 4096)
    c = work / "c1"
    job = run_job({"PCOMPILE_CACHE_DIR": str(c), "PCOMPILE_SHARED_DIR": str(s)}, work)
    return _row("torn shared-tier file", "largest shared blob truncated + stray temp file of a dead writer", job, stock,
                _ok_verify(c, s), "not loaded")


def redis_restarted(work: Path, stock: str) -> Row:
    redis = Redis(work)
    redis.start()
    try:
        def restart() -> None:
            redis.kill()
            redis.start()

        c = work / "c"
        job = run_job({"PCOMPILE_CACHE_DIR": str(c), "PCOMPILE_REMOTE": redis.url}, work, mid=restart)
        return _row("Redis restarted empty mid-job", "redis-server SIGKILLed and started again, no persistence", job,
                    stock, _ok_verify(c), None)
    finally:
        redis.kill()


def redis_hung(work: Path, stock: str) -> Row:
    redis = Redis(work)
    redis.start()
    try:
        env = {"PCOMPILE_REMOTE": redis.url, "PCOMPILE_REMOTE_TIMEOUT": "2"}
        healthy = run_job({**env, "PCOMPILE_CACHE_DIR": str(work / "c0")}, work)
        redis.kill()
        redis.start()  # empty again: the faulty run misses remotely too, like the healthy one did
        assert redis.proc is not None
        pid = redis.proc.pid
        c = work / "c"
        job = run_job({**env, "PCOMPILE_CACHE_DIR": str(c)}, work, mid=lambda: os.kill(pid, signal.SIGSTOP))
        row = _row("Redis hung mid-job", "redis-server SIGSTOPped between the graphs; deadline 2 s", job, stock,
                   _ok_verify(c), "redis tier")
        grew = job.phase2 - healthy.phase2
        row.note = (row.note + "; " if row.note else "") + f"2nd graph {job.phase2:.1f} s vs {healthy.phase2:.1f} s healthy"
        row.ok = bool(row.ok) and grew <= 2.0 + 1.0  # the deadline, plus timing noise of a shared 2-core host
        return row
    finally:
        redis.kill()


def _keys_of(cache: Path) -> list[str]:
    """The store keys a healthy run of the job published (what its next run will look up)."""
    return [p.stem for p in (cache / "store" / "manifests").rglob("*.json")]


def lease_skew(work: Path, stock: str) -> Row:
    """Leases of a dead holder on another host whose clock runs an hour ahead: every lease file
    the job will want, with mtimes in the future. Staleness is judged by the mtime not changing
    on the waiter's own clock, so the job takes over after PCOMPILE_LEASE_TIMEOUT, not in an hour."""
    run_job({"PCOMPILE_CACHE_DIR": str(work / "c0")}, work)
    keys = _keys_of(work / "c0")
    s = work / "s" / "store"
    (s / "leases").mkdir(parents=True)
    future = time.time() + 3600
    for key in keys:
        lease = s / "leases" / f"{key}.lease"
        lease.write_text(json.dumps({"holder": "other-host-1", "pid": 4242, "host": "skewed-host", "since": future}))
        os.utime(lease, (future, future))
    c = work / "c"
    job = run_job({"PCOMPILE_CACHE_DIR": str(c), "PCOMPILE_SHARED_DIR": str(work / "s"), "PCOMPILE_LEASE_TIMEOUT": "3"}, work)
    row = _row("lease clock skew (+1 h, holder gone)", f"{len(keys)} foreign lease files dated an hour ahead; lease timeout 3 s",
               job, stock, _ok_verify(c, work / "s"), None)
    left = [p.name for p in (s / "leases").glob("*.lease")]
    row.note = (row.note + "; " if row.note else "") + f"{len(left)} foreign leases left"
    row.ok = bool(row.ok) and job.seconds < 600
    return row


def lease_dir_full(work: Path, stock: str) -> Row:
    with tmpfs(work / "s", "2m") as s:
        if os.environ.get("FAULTS_EMPTY_SHARED") != "1":  # an existing shared tier whose disk filled up
            run = [sys.executable, "-c", "import sys; from pcompile.config import Settings; from pcompile.store.tiered "
                   "import Store; from pcompile.store.compose import open_store; open_store(Settings.from_env(cache_dir=sys.argv[1], shared_dir=sys.argv[2]))",
                   str(work / "c0"), str(s)]
            subprocess.run(run, env=_env({}), check=True, capture_output=True)
        fill(s)
        c = work / "c"
        job = run_job({"PCOMPILE_CACHE_DIR": str(c), "PCOMPILE_SHARED_DIR": str(s)}, work)
        return _row("shared tier (lease dir) full", "shared tier on a 2 MiB tmpfs filled to the last byte", job, stock,
                    _ok_verify(c), "shared")


class Throttling:
    """An S3 endpoint that answers every request 503 SlowDown, as S3 does when throttling."""

    def __init__(self) -> None:
        import http.server
        import threading

        body = b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>'

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                self.send_response(503)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def s3_throttled(work: Path, stock: str) -> Row:
    try:
        import boto3  # noqa: F401
    except ImportError:
        raise Skip("boto3 is not installed (pip install boto3)") from None
    s3 = Throttling()
    try:
        base = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "PCOMPILE_REMOTE_TIMEOUT": "2",
                "PCOMPILE_S3_ENDPOINT_URL": s3.url}
        healthy = run_job({"PCOMPILE_CACHE_DIR": str(work / "c0")}, work)
        c = work / "c"
        job = run_job({**base, "PCOMPILE_CACHE_DIR": str(c), "PCOMPILE_REMOTE": "s3://bucket/pc"}, work)
        row = _row("S3 503 SlowDown on every call", "a local endpoint answering 503 SlowDown; deadline 2 s", job, stock,
                   _ok_verify(c), "s3")
        first_healthy = healthy.seconds - healthy.phase2
        first = job.seconds - job.phase2
        row.note = (row.note + "; " if row.note else "") + \
            f"job {job.seconds:.1f} s vs {healthy.seconds:.1f} s without a remote (process incl. exit)"
        row.ok = bool(row.ok) and first - first_healthy <= 2.0 + 10.0  # deadline + exit flush limit
        return row
    finally:
        s3.close()


# -- pool rows: real Triton kernels through the node daemon (tools/fault_pool_job.py) ----------
POOL_JOB = REPO / "tools" / "fault_pool_job.py"
_NONCE = f"{os.getpid()}-{time.time_ns()}"
_pool_stock: dict[str, str] = {}


def run_pool_job(env: dict[str, str], work: Path, fault: str, python: str = sys.executable) -> Job:
    t0 = time.monotonic()
    full = _env({"FAULT_NONCE": _NONCE, "PCOMPILE_POOL_WORKERS": "2", "PCOMPILE_POOL_IDLE_EXIT": "20", **env})
    try:
        out = subprocess.run([python, str(POOL_JOB), fault], env=full, capture_output=True, text=True,
                             timeout=JOB_TIMEOUT, cwd=work)
    except subprocess.TimeoutExpired as exc:
        return Job(-9, None, [], str(exc.stderr or ""), time.monotonic() - t0, work)
    if out.stdout.startswith("SKIP"):
        raise Skip(out.stdout.strip()[5:])
    digest = next((ln.split()[1] for ln in out.stdout.splitlines() if ln.startswith("RESULT")), None)
    lines = [ln.strip() for ln in out.stderr.splitlines() if "pcompile" in ln.lower() and "Traceback" not in ln
             and not ln.startswith((" ", "File"))]
    job = Job(out.returncode, digest, lines, out.stderr, time.monotonic() - t0, work)
    job.stdout = out.stdout  # type: ignore[attr-defined]
    return job


def _daemons(job: Job) -> tuple[str, str]:
    line = next((ln for ln in getattr(job, "stdout", "").splitlines() if ln.startswith("DAEMON")), "DAEMON ? ?")
    return line.split()[1], line.split()[2]


def pool_stock(work: Path) -> str:
    if "digest" not in _pool_stock:
        try:
            import triton  # noqa: F401
        except ImportError:
            raise Skip("triton is not installed: no Triton kernels, no pool") from None
        job = run_pool_job({"TORCHINDUCTOR_CACHE_DIR": str(work / "si"), "TRITON_CACHE_DIR": str(work / "st")}, work, "--stock")
        if job.rc != 0 or not job.digest:
            raise Skip(f"stock Triton compile fails here: {job.stderr.strip().splitlines()[-1:]}")
        _pool_stock["digest"] = job.digest
    return _pool_stock["digest"]


def _stop_daemon(cache: Path) -> None:
    code = "import sys; from pcompile.pool.client import NodePool; NodePool(sys.argv[1], connect_now=False).stop_daemon()"
    with contextlib.suppress(Exception):
        subprocess.run([sys.executable, "-c", code, str(cache)], env=_env({}), capture_output=True, timeout=60)


def _pool_row(name: str, mechanism: str, fault: str, expect: str | None, work: Path) -> Row:
    stock = pool_stock(work)
    c = work / "c"
    try:
        job = run_pool_job({"PCOMPILE_CACHE_DIR": str(c)}, work, fault)
        row = _row(name, mechanism, job, stock, _ok_verify(c), expect)
        if fault in ("daemon-kill", "socket-rm"):
            before, _after = _daemons(job)
            nxt = run_pool_job({"PCOMPILE_CACHE_DIR": str(c)}, work, "none")
            fresh, _ = _daemons(nxt)
            again = nxt.rc == 0 and nxt.digest == stock and fresh not in ("None", before)
            row.note = (row.note + "; " if row.note else "") + (
                f"next job: fresh daemon {fresh}" if again else f"next job: rc {nxt.rc}, daemon {fresh} (was {before})")
            row.ok = bool(row.ok) and again
        return row
    finally:
        _stop_daemon(c)


def daemon_killed(work: Path, stock: str) -> Row:
    return _pool_row("pool daemon SIGKILLed mid-compile", "kill -9 of the node daemon while a worker compiles",
                     "daemon-kill", None, work)


def worker_killed(work: Path, stock: str) -> Row:
    return _pool_row("pool worker killed (OOM)", "kill -9 of the busy worker (the OOM killer's signal; no memory "
                     "cgroup to stage a real OOM here)", "worker-kill", "SIGKILL", work)


def socket_deleted(work: Path, stock: str) -> Row:
    return _pool_row("pool socket file deleted", "daemon.sock unlinked while a worker compiles", "socket-rm", None, work)


def daemon_other_user(work: Path, stock: str) -> Row:
    stock_pool = pool_stock(work)
    c = work / "c"
    first = run_pool_job({"PCOMPILE_CACHE_DIR": str(c)}, work, "none")  # this user's daemon, then …
    _stop_daemon(c)
    for pool_dir in (c / "pool").iterdir():  # … its dir handed to another user, as if they had started it
        for path in [pool_dir, *pool_dir.iterdir()]:
            os.chown(path, 65534, 65534, follow_symlinks=False)
    try:
        job = run_pool_job({"PCOMPILE_CACHE_DIR": str(c)}, work, "none")
        row = _row("pool daemon of another user", "the node pool's dir owned by uid 65534", job, stock_pool,
                   _ok_verify(c), "pool")
        row.ok = bool(row.ok) and first.rc == 0
        return row
    finally:
        _stop_daemon(c)


def other_torch(work: Path, stock: str) -> Row:
    other = Path("/work/torchvenvs")
    pythons = sorted(p / "bin" / "python" for p in other.glob("torch-*") if (p / "bin" / "python").exists())
    import torch

    mine = torch.__version__.split("+")[0]
    pythons = [p for p in pythons if mine not in str(p)]
    if not pythons:
        raise Skip("no second torch install on this machine (looked in /work/torchvenvs)")
    c = work / "c"
    env = {"PCOMPILE_CACHE_DIR": str(c), "PCOMPILE_POOL_EAGER": "1"}
    proc = subprocess.Popen([str(pythons[-1]), str(JOB), "--backend", "pcompile"], env=_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=work)
    job = run_job(env, work)
    out, err = proc.communicate(timeout=JOB_TIMEOUT)
    row = _row(f"two torch versions, one cache dir ({pythons[-1].parts[-3]} beside {mine})",
               "both jobs at once, same PCOMPILE_CACHE_DIR, pool started eagerly", job, stock, _ok_verify(c), None)
    row.ok = bool(row.ok) and proc.returncode == 0
    row.note = (row.note + "; " if row.note else "") + f"other job rc {proc.returncode}"
    _stop_daemon(c)
    return row


FAULTS: list[Fault] = [
    Fault("full-at-start", "", full_at_start),
    Fault("full-in-link", "", full_in_link),
    Fault("full-mid-job", "", full_mid_job),
    Fault("read-only-at-start", "", read_only_at_start),
    Fault("read-only-mid-job", "", read_only_mid_job),
    Fault("unwritable", "", unwritable),
    Fault("vanished-mid-job", "", vanished_mid_job),
    Fault("stale-nfs", "", stale_nfs),
    Fault("quota", "", quota),
    Fault("slow", "", slow),
    Fault("shared-read-only", "", shared_read_only),
    Fault("torn-shared", "", torn_shared),
    Fault("redis-restarted", "", redis_restarted),
    Fault("redis-hung", "", redis_hung),
    Fault("lease-skew", "", lease_skew),
    Fault("lease-dir-full", "", lease_dir_full),
    Fault("s3-throttled", "", s3_throttled),
    Fault("daemon-killed", "", daemon_killed),
    Fault("worker-killed", "", worker_killed),
    Fault("socket-deleted", "", socket_deleted),
    Fault("daemon-other-user", "", daemon_other_user),
    Fault("other-torch", "", other_torch),
]


def stock_digest(work: Path) -> str:
    """Stock Inductor's result on a healthy private dir: what every row must equal."""
    job = run_job({"TORCHINDUCTOR_CACHE_DIR": str(work / "stock-inductor"), "PCOMPILE_DISABLE": "1"}, work, backend="inductor")
    if job.rc != 0 or not job.digest:
        raise SystemExit(f"stock torch.compile itself fails here (rc {job.rc}):\n{job.stderr[-2000:]}")
    return job.digest


def run_fault(fault: Fault, stock: str) -> Row:
    work = Path(tempfile.mkdtemp(prefix=f"pcompile-fault-{fault.name}-"))
    try:
        return fault.run(work, stock)
    except Skip as why:
        return Row(fault.name, "", note=str(why))
    finally:
        for mount in sorted((p for p in work.rglob("*") if p.is_dir() and os.path.ismount(p)), reverse=True):
            _sh("umount", "-l", str(mount))
        shutil.rmtree(work, ignore_errors=True)


def table(rows: list[Row]) -> str:
    out = ["| fault | mechanism | job | = stock | pcompile printed | verify after | s | pass |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        eq = "" if r.equal is None else ("yes" if r.equal else "NO")
        ok = "skip: " + r.note if r.ok is None else ("yes" if r.ok else "NO") + (f" ({r.note})" if r.note else "")
        out.append(f"| {r.fault} | {r.mechanism} | {r.result} | {eq} | {r.printed.replace('|', '/')} | {r.verify} | "
                   f"{r.seconds:g} | {ok} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="", help="comma-separated fault names (default: all): " +
                        ",".join(f.name for f in FAULTS))
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    wanted = [f for f in FAULTS if not args.rows or f.name in args.rows.split(",")]
    stock_dir = Path(tempfile.mkdtemp(prefix="pcompile-fault-stock-"))
    try:
        stock = stock_digest(stock_dir)
    finally:
        shutil.rmtree(stock_dir, ignore_errors=True)
    rows = []
    for fault in wanted:
        rows.append(run_fault(fault, stock))
        print(f"{fault.name}: {rows[-1].result} ok={rows[-1].ok} {rows[-1].printed} {rows[-1].note}", file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
    return 1 if any(r.ok is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
