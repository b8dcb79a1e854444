"""The warm child runs in a copy-on-write view of the whole file system (the kernel's overlayfs).

Why: a warm runs the user's unchanged script, and every way it touches files -- Python, C
extensions, `multiprocessing` spawn/forkserver workers, `subprocess` children, locks, listings,
free-space checks -- must see what a real run sees, while nothing outside pcompile's cache
changes. Patching Python functions (writes.py, now the fallback) cannot cover native code or
child processes; the kernel can: the child gets a private mount namespace in which every mount
of the host is an overlay (real files below, the script's writes in `<run dir>/files/...`
above), pcompile's cache dirs and the warm's work dir are bound through read-write, /dev (with
/dev/shm), /proc and /sys are passed through, and the child chroots into that view and keeps
its cwd, so every path reads as before (mounts.py builds the view). The namespace dies with the
last process in it, which unmounts everything; the uppers stay as the record of what the
script wrote, removed by `pcompile gc` (gc.py in this package).

How: `python -m pcompile.warm.sandbox PLAN.json` is a tiny launcher exec'd in place of the
warm child: it calls unshare(2) and mount(2) through ctypes (Python 3.11 has no os.unshare),
builds the view, chroots and execs the child. A separate single-threaded process is needed
because CLONE_NEWUSER refuses multi-threaded callers and a preexec_fn in the runner would run
in a forked copy of a threaded process. Alternatives: bubblewrap (`bwrap --overlay`, 0.8+) and
fuse-overlayfs do the same from outside, but neither is installed on the hosts we warm on (nor
pip-installable), fuse-overlayfs puts every file access through a user-space daemon, and both
would only replace ~200 lines of mount calls.

Modes (`PCOMPILE_WARM_SANDBOX=auto|namespace|userns|python`; auto tries them in that order,
namespace only as root, and probes each in a throw-away process first):
- namespace: root; unshare(CLONE_NEWNS); every mount overlaid whole (renames of existing
  directories work: redirect_dir=on).
- userns: any user; unshare(CLONE_NEWUSER|CLONE_NEWNS) with the caller's uid and gid mapped to
  themselves, so the script sees its own ids. What that costs: other users' files (root's
  included) show as owned by nobody/nogroup; set-uid programs and chown to another id fail;
  overlay runs with userxattr, so renaming a directory that exists in the real tree fails with
  EXDEV (shutil.move copies instead); and the kernel will not overlay a directory with mounts
  below it here, so those directories (`/` itself, ...) are rebuilt on a tmpfs entry by entry:
  new files directly in them are dropped after the warm, files directly in them are read-only.
- python: the patch list of writes.py/paths.py (see there for what it cannot cover).

Careful points: the node compile daemon outlives a warm, so it is never started inside the
view: the runner starts it first (pool/launcher.py refuses to start one from inside). A Unix
socket of a process outside cannot be reached through an overlay; pcompile's own live in the
cache dir, which is bound through.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pcompile.errors import PcompileError
from pcompile import settings

ENV_MODE = settings.WARM_SANDBOX.name
ENV_ACTIVE = settings.WARM_SANDBOX_ACTIVE.name  # set in the warm child (and so in all its children): the mode that runs
MODES = ("auto", "namespace", "userns", "python")
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000


def requested() -> str:
    return settings.WARM_SANDBOX.get()


def sandboxed() -> bool:
    """True inside a namespace sandbox (the warm child and everything it starts)."""
    return settings.WARM_SANDBOX_ACTIVE.get() in ("namespace", "userns")


def choose(run: Path) -> tuple[str, list[str]]:
    """(mode to run, why the modes before it could not): each candidate probed in a fresh process."""
    want = requested()
    if want == "python":
        return "python", [f"{ENV_MODE}=python"]
    order = [want] if want != "auto" else (["namespace", "userns"] if os.geteuid() == 0 else ["userns"])
    reasons = []
    for mode in order:
        why = probe(mode, run)
        if why is None:
            return mode, reasons
        reasons.append(f"{mode}: {why}")
    if want != "auto":
        raise PcompileError(f"{ENV_MODE}={want} is not available here ({'; '.join(reasons)}); "
                            f"unset it (auto falls back to the Python redirect) or set {ENV_MODE}=python")
    return "python", reasons


def probe(mode: str, run: Path) -> str | None:
    """None if `mode` can mount an overlay here (tried in a child process, so nothing stays), else why not."""
    if sys.platform != "linux":
        return "not Linux"
    if mode == "namespace" and os.geteuid() != 0:
        return "needs root"
    try:
        out = subprocess.run([sys.executable, "-m", "pcompile.warm.sandbox", "--probe", mode, str(run)],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"probe failed ({exc})"
    if out.returncode == 0:
        return None
    return (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]


# ---------------------------------------------------------------------- inside the launcher
def _unshare(flags: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    if libc.unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")


def enter(mode: str) -> None:
    """Move this (single-threaded) process into a private mount namespace (and user namespace)."""
    from pcompile.warm import mounts

    if mode == "userns":
        uid, gid = os.getuid(), os.getgid()
        _unshare(CLONE_NEWUSER | CLONE_NEWNS)
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    else:
        _unshare(CLONE_NEWNS)
    mounts.mount(None, "/", None, mounts.MS_REC | mounts.MS_PRIVATE)  # nothing we mount reaches the host


def _probe_main(mode: str, run: Path) -> int:
    from pcompile.warm import mounts

    base = run / ".probe"
    try:
        for d in ("lower", "upper", "work", "m"):
            (base / d).mkdir(parents=True, exist_ok=True)
        enter(mode)
        opts = f"lowerdir={base / 'lower'},upperdir={base / 'upper'},workdir={base / 'work'}"
        try:
            mounts.mount("overlay", str(base / "m"), "overlay", 0, opts)
        except OSError:
            mounts.mount("overlay", str(base / "m"), "overlay", 0, opts + ",userxattr")
        (base / "m" / "x").write_text("x")
        return 0
    except OSError as exc:
        print(exc.strerror or str(exc), file=sys.stderr)
        return 1


def _launch(plan: dict[str, Any]) -> int:
    """Enter the namespace, build the view, chroot, exec the warm child (never returns on success)."""
    from pcompile.warm import mounts

    mode = plan["mode"]
    run = Path(plan["run"])
    record = Path(plan["record"])
    try:
        enter(mode)
        view = mounts.build(run, plan["keep"], privileged=mode == "namespace")
    except OSError as exc:
        record.write_text(json.dumps({"mode": mode, "error": str(exc)}))
        print(f"pcompile warm: the {mode} file sandbox could not be set up ({exc}); "
              f"set {ENV_MODE}=python to warm with the Python redirect instead", file=sys.stderr)
        return 2
    record.write_text(json.dumps({"mode": mode, **view.record()}))
    os.chroot(str(view.merged))
    os.chdir(plan["cwd"])
    env = dict(plan["env"], **{ENV_ACTIVE: mode})
    os.execve(plan["argv"][0], plan["argv"], env)
    return 127  # not reached


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--probe":
        return _probe_main(argv[1], Path(argv[2]))
    return _launch(json.loads(Path(argv[0]).read_text()))


if __name__ == "__main__":
    sys.exit(main())
