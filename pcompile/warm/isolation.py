"""Runner side of keeping the user's files safe: pick the sandbox mode, start the warm child in it,
and turn what the sandbox recorded into the report's `writes` and `sandbox` sections.

sandbox.py (the kernel's overlayfs in a private mount namespace) is preferred; where namespaces
are unavailable, the Python redirect (writes.py, paths.py, inherited by child processes through
inherit/) runs instead and a one-line notice at the start of the warm says what it cannot cover.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pcompile import settings
from pcompile.warn import warn_once
from pcompile.warm import sandbox

INHERIT_DIR = Path(__file__).resolve().parent / "inherit"
ENV_REDIRECT = settings.WARM_REDIRECT.name  # the fallback's state file: child processes install the same redirect
FALLBACK_GAPS = ("native code that opens files by path (C extensions other than safetensors), non-Python child processes, "
                 "dir_fd-relative calls, and files opened before the redirect")


@dataclass
class Isolation:
    mode: str  # namespace | userns | python
    why_not: list[str] = field(default_factory=list)
    daemon: str | None = None
    hold: Any = None  # the runner's connection that keeps the daemon up for the warm's length

    def notice(self) -> str:
        if self.mode == "python":
            why = f" ({'; '.join(self.why_not)})" if self.why_not else ""
            return (f"pcompile warm: file sandbox: Python redirect{why}; not covered: {FALLBACK_GAPS}; "
                    f"writes go to <cache>/warm-runs/")
        return f"pcompile warm: file sandbox: {self.mode} (copy-on-write overlay of the whole file system)"


def choose(run_dir: Path) -> Isolation:
    mode, why = sandbox.choose(run_dir)
    remove_tree(run_dir / ".probe")
    return Isolation(mode, why)


def start_daemon_outside(iso: Isolation, cache_dir: Path) -> threading.Thread | None:
    """Start the node compile daemon from here, outside the sandbox (it outlives the warm; one
    started inside would keep the sandbox's view alive). In the background: the child's first
    connect waits on the daemon's start lock, so it never starts a second one."""
    if iso.mode == "python" or settings.DISABLE.get():
        return None
    from pcompile.inductor.kernel_router import daemon_options
    from pcompile.pool.choose import pool_kind

    if pool_kind()[0] != "node":
        return None

    def start() -> None:
        from pcompile.pool.launcher import connect_or_start

        try:
            sock, _ = connect_or_start(cache_dir, daemon_options())
            from pcompile.pool import protocol

            protocol.send(sock, {"op": "hold"})  # no idle exit before the sandboxed child connects
            iso.hold = sock
            iso.daemon = "started or found outside the sandbox"
        except Exception as exc:  # the child compiles in-process then
            iso.daemon = f"unavailable ({exc})"

    t = threading.Thread(target=start, name="pcompile-warm-daemon", daemon=True)
    t.start()
    return t


def release_daemon(iso: Isolation, thread: threading.Thread | None) -> None:
    """The warm is over: let the daemon's idle clock run again."""
    if thread is not None:
        thread.join(timeout=60)
    if iso.hold is not None:
        iso.hold.close()
        iso.hold = None


def keep_paths(env: dict[str, str], run_dir: Path, workdir: Path, cache_dir: Path) -> list[str]:
    """What stays real and writable inside the sandbox: pcompile's dirs and the warm's own."""
    keep = [str(cache_dir), str(run_dir), str(workdir)]
    keep += [env[k] for k in (settings.SHARED_DIR.name, "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR") if env.get(k)]
    for path, kind in settings.outputs(env):  # what the user asked pcompile to write (key dumps...)
        try:
            if kind == "dir":
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                open(path, "a").close()  # it must exist to be bound through
            keep.append(path)
        except OSError as exc:
            warn_once(f"keep:{path}", f"pcompile warm: cannot create {path} ({exc.strerror}); "
                      "what pcompile writes there stays in the warm's sandbox")
    try:  # the pool's socket dir when the cache dir's path is too long for a socket
        from pcompile.pool.paths import PoolPaths

        paths = PoolPaths.for_cache_dir(cache_dir)
        if paths.socket.parent != paths.dir:
            paths.ensure()  # it must exist to be bound through
            keep.append(str(paths.socket.parent))
    except Exception:
        pass
    return keep


def command(iso: Isolation, child: list[str], env: dict[str, str], run_dir: Path, workdir: Path,
            cache_dir: Path) -> tuple[list[str], dict[str, str]]:
    """(argv, env) that start `child` in the chosen sandbox."""
    if iso.mode == "python":
        # The child writes this file once its own redirect is in (warm/paths.py share): its own
        # sitecustomize must find none, or it installs a second, incomplete redirect.
        state = workdir / "redirect.json"
        env = dict(env, **{sandbox.ENV_ACTIVE: "python", ENV_REDIRECT: str(state)})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(INHERIT_DIR), env.get("PYTHONPATH", "")) if p)
        return child, env
    for k in (env.get(settings.SHARED_DIR.name),):
        if k:
            Path(k).mkdir(parents=True, exist_ok=True)  # pcompile's: bound through only if it exists
    plan = {"mode": iso.mode, "run": str(run_dir), "record": str(workdir / "sandbox.json"), "cwd": os.getcwd(),
            "keep": keep_paths(env, run_dir, workdir, cache_dir), "argv": child, "env": env}
    (workdir / "sandbox-plan.json").write_text(json.dumps(plan))
    # the launcher itself runs without the virtual device preloaded
    launcher_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return [sys.executable, "-m", "pcompile.warm.sandbox", str(workdir / "sandbox-plan.json")], launcher_env


def collect(iso: Isolation, report: dict[str, Any], workdir: Path, run_dir: Path) -> None:
    """Fill report['sandbox'] and, for a namespace sandbox, report['writes'] from the uppers."""
    from pcompile.warm import mounts

    info: dict[str, Any] = {"mode": iso.mode, "why_not": iso.why_not, "daemon": iso.daemon}
    rec_path = workdir / "sandbox.json"
    if iso.mode != "python" and rec_path.exists():
        rec = json.loads(rec_path.read_text())
        uppers = rec.get("uppers", {})
        mounts.link_record(run_dir, uppers)
        wrote, gone, nw, nd = mounts.written(run_dir, uppers)
        w = report.setdefault("writes", {})
        w.update({"dir": str(run_dir / "files"), "redirected": wrote, "n_redirected": nw, "deleted": gone, "n_deleted": nd})
        info.update({k: rec.get(k) for k in ("readonly", "failed", "error")})
    report["sandbox"] = info


def sweep_runs(cache_dir: Path, max_age_days: float) -> tuple[int, int]:
    """`pcompile gc`: remove warm run dirs (the record of what warmed scripts wrote) older than
    `max_age_days`; (runs removed, bytes freed)."""
    import time

    base = Path(cache_dir) / "warm-runs"
    cutoff = time.time() - max_age_days * 86400
    removed = freed = 0
    if not base.is_dir():
        return 0, 0
    for run in sorted(base.iterdir()):
        try:
            if run.lstat().st_mtime > cutoff:
                continue
            size = sum(p.lstat().st_size for p in run.rglob("*") if not p.is_dir()) if os.access(run, os.R_OK) else 0
        except OSError:
            size = 0
        remove_tree(run)
        if not os.path.lexists(run):
            removed += 1
            freed += size
    return removed, freed


def remove_tree(path: Path) -> None:
    """rmtree that also removes what an overlay leaves: work dirs of mode 000 (made writable first)."""
    def fix(func: Any, p: str, exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
        except OSError:
            pass
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=fix)
