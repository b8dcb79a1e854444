"""Which errors mean "the cache dir cannot be used", and a start-of-job probe that finds them.

Why: Inductor's and Triton's working files (sources, objects, the linker's output) live under
the cache dir, so a full, read-only, unwritable or vanished dir fails the compile itself, not
just caching. Such a fault surfaces as an OSError, or only as text inside a compiler's error
(`ld: final link failed: No space left on device`), so both are recognised here, and the probe
catches it (and a dir too slow to write, or too close to full) before the first compile.
"""
from __future__ import annotations

import errno
import os
import shutil
import threading
from pathlib import Path

#: errno -> what it means for the cache dir (completes "cache dir <path> ...").
PROBLEMS: dict[int, str] = {
    errno.ENOSPC: "is full",
    errno.EDQUOT: "is over its disk quota",
    errno.EROFS: "is on a read-only filesystem",
    errno.EACCES: "is not writable by this user",
    errno.EPERM: "is not writable by this user",
    errno.ESTALE: "is gone (stale NFS file handle)",
    errno.ENOENT: "is gone",
    errno.EIO: "has I/O errors",
    errno.ETIMEDOUT: "is too slow to write",
}
#: Faults recognisable from a tool's message alone: strerror text no unrelated error prints.
_TEXT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.ESTALE)
#: Faults recognised only from an OSError whose file is under the cache dir (a missing header or
#: an unreadable source elsewhere is the user's error, not the cache dir's).
_PATH_ERRNOS = (errno.EACCES, errno.EPERM, errno.ENOENT, errno.EIO)


#: Faults of the cache dir's path itself (a file where the dir should be), found at start only:
#: an ENOTDIR raised mid-job is not recognised as the cache dir's (Inductor's own paths raise it).
_START_PROBLEMS: dict[int, str] = {errno.ENOTDIR: "is not a directory"}


def describe(code: int) -> str:
    return PROBLEMS.get(code) or _START_PROBLEMS.get(code) or f"failed ({os.strerror(code)})"


def fix(code: int) -> str:
    """What the user does about fault `code` of the cache dir, in a few words."""
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "free space there or point PCOMPILE_CACHE_DIR at another directory"
    return "point PCOMPILE_CACHE_DIR at a writable directory"


def path_problem(root: str | os.PathLike) -> tuple[int, str] | None:
    """(errno, detail) if `root` cannot be made a writable directory, else None. Cheap, and
    creates nothing (a process that never compiles leaves the cache dir as it was): it runs while
    `import torch` finishes (PCOMPILE=1), where torch later creates the directories it is given
    and an error fails the job. Looks at `root`, or its nearest existing parent."""
    probe = os.path.abspath(root)
    while not os.path.lexists(probe) and probe != os.path.dirname(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return errno.ENOTDIR, f"{probe} is a file"
    if os.access(probe, os.W_OK | os.X_OK):
        return None
    try:
        read_only = bool(os.statvfs(probe).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return (errno.EROFS, os.strerror(errno.EROFS)) if read_only else (errno.EACCES, f"{probe} is not writable")


def _first_non_directory(path: str) -> str:
    """The nearest ancestor of `path` (or itself) that exists and is not a directory."""
    probe = path
    while probe != os.path.dirname(probe):
        if os.path.lexists(probe) and not os.path.isdir(probe):
            return probe
        probe = os.path.dirname(probe)
    return path


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        cur = todo.pop()
        if cur is None or any(cur is s for s in seen) or len(seen) > 32:
            continue
        seen.append(cur)
        todo += [cur.__cause__, cur.__context__, getattr(cur, "inner_exception", None)]
        todo += [a for a in getattr(cur, "args", ()) if isinstance(a, BaseException)]
    return seen


def _under(path: object, root: Path) -> bool:
    if not isinstance(path, (str, bytes, os.PathLike)):
        return False
    full = os.path.abspath(os.fsdecode(path))
    base = os.path.abspath(root)
    return full == base or full.startswith(base + os.sep)


def classify(exc: BaseException, root: Path) -> int | None:
    """The errno of a cache-dir fault behind `exc` (anywhere in its chain), or None."""
    for cur in _chain(exc):
        if isinstance(cur, OSError) and cur.errno in PROBLEMS:
            if cur.errno in _TEXT_ERRNOS or _under(cur.filename, root) or _under(cur.filename2, root):
                return cur.errno
    for cur in _chain(exc):
        text = str(cur)
        for code in _TEXT_ERRNOS:
            if os.strerror(code) in text:
                return code
    return None


def free_bytes(path: Path) -> int | None:
    """Free bytes for an unprivileged writer on `path`'s filesystem (nearest existing parent)."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def _write_probe(root: Path, result: list[BaseException | None]) -> None:
    name = root / f".pcompile-probe.{os.getpid()}.{threading.get_ident()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\0" * 65536)
            os.fsync(fd)
        finally:
            os.close(fd)
            try:
                os.unlink(name)
            except OSError:
                pass
        result.append(None)
    except BaseException as exc:  # noqa: BLE001 - handed to the caller
        result.append(exc)


def probe(root: Path, min_free: int, timeout: float) -> tuple[int, str] | None:
    """(errno, detail) if the cache dir at `root` cannot take this job's files, else None.

    Writes and fsyncs 64 KiB in a daemon thread: a write blocked longer than `timeout` (a hung
    NFS server, a dying disk) counts as a fault, and the blocked thread is left behind.
    """
    result: list[BaseException | None] = []
    worker = threading.Thread(target=_write_probe, args=(root, result), name="pcompile-dir-probe", daemon=True)
    worker.start()
    worker.join(timeout)
    if not result:
        return errno.ETIMEDOUT, f"a 64 KiB write took over {timeout:g} s"
    exc = result[0]
    if isinstance(exc, (FileExistsError, NotADirectoryError)):  # mkdir: a file is where a dir goes
        return errno.ENOTDIR, f"{_first_non_directory(str(root))} is a file"
    if isinstance(exc, OSError):
        return (exc.errno or errno.EIO), exc.strerror or str(exc)
    if exc is not None:
        return errno.EIO, f"{type(exc).__name__}: {exc}"
    free = free_bytes(root)
    if free is not None and free < min_free:
        return errno.ENOSPC, f"{free // 1024} KiB free, below the {min_free // 1024**2} MiB floor (PCOMPILE_MIN_FREE_BYTES)"
    return None
