"""Crash-safe file writes for directory tiers, NFS and Lustre included.

Write a uniquely named temp file in the same filesystem, fsync it, then rename over the target:
rename is atomic on POSIX filesystems and on NFS, so a reader sees the old file, the new one or
none, never a prefix. No fcntl/flock is relied on anywhere.
"""
from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path


def unique_suffix() -> str:
    return f"{os.getpid()}.{uuid.uuid4().hex[:12]}"


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def atomic_write(path: Path, data: bytes, tmp_dir: Path, *, replace: bool = True) -> bool:
    """Write `data` to `path` atomically. With replace=False an existing file wins (returns False)."""
    tmp = tmp_dir / f"{path.name}.{unique_suffix()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        path.parent.mkdir(parents=True, exist_ok=True)
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # atomic create-if-absent, also on NFS
            return True
        except FileExistsError:
            return False
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def read_file(path: Path, no_atime: bool = False) -> bytes | None:
    """The file's bytes, or None if it is not there. `no_atime`: a housekeeping read (see below)."""
    try:
        if no_atime:
            return read_without_access(path)
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return None


def read_without_access(path: Path) -> bytes:
    """Read for housekeeping (GC, verify) without counting as a use: O_NOATIME where allowed.

    Under relatime a plain read refreshes atime, which GC uses as last access: a scan would make
    every entry it reads look freshly used.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOATIME", 0)
    try:
        fd = os.open(path, flags)
    except PermissionError:  # O_NOATIME needs ownership of the file
        fd = os.open(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def is_disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def du(path: Path) -> int:
    """Bytes of the regular files under `path` (links not followed; files vanishing meanwhile skipped)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total
