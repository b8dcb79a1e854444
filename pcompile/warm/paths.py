"""The fallback redirect's patches of Python's file functions (see writes.py for what and why).

Writes (open, os.open, mkdir/makedirs, rename/replace/link/symlink, remove/unlink/rmdir/rmtree,
chmod/utime) go to the redirect, copying the user's file up first where the change is in place
(append, r+, O_RDWR without O_TRUNC, chmod); deletions of the user's files become whiteouts.
Queries (stat/lstat and so os.path.exists/isdir/..., access, listdir, scandir and so glob,
Path.iterdir/glob and os.walk, statvfs and so shutil.disk_usage) see the redirected copy first,
then the user's file unless deleted; listings merge both. fd- and dir_fd-based calls pass through.
"""
from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import stat as stat_mod
import tempfile
from typing import Any, Callable, Iterator

from pcompile.warm.writes import Writes, _ours, _under, _write_mode, guard, guarded

_O_WRITE = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _missing(path: Any) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.fsdecode(os.fspath(path)))


def _plain(path: Any, kwargs: dict[str, Any]) -> bool:
    """Calls the redirect leaves alone: fds, dir_fd, bytes paths."""
    return (isinstance(path, (int, bytes)) or not isinstance(path, (str, os.PathLike))
            or kwargs.get("dir_fd") is not None or guarded())


class _Entry:
    """An os.DirEntry look-alike for merged listings (the real type cannot be constructed)."""

    def __init__(self, name: str, path: str) -> None:
        self.name, self.path = name, path

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"<DirEntry {self.name!r}>"

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        return os.stat(self.path, follow_symlinks=follow_symlinks)

    def inode(self) -> int:
        return self.stat(follow_symlinks=False).st_ino

    def _mode(self, follow: bool) -> int:
        try:
            return self.stat(follow_symlinks=follow).st_mode
        except OSError:
            return 0

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return stat_mod.S_ISDIR(self._mode(follow_symlinks))

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return stat_mod.S_ISREG(self._mode(follow_symlinks))

    def is_symlink(self) -> bool:
        return stat_mod.S_ISLNK(self._mode(False))

    def is_junction(self) -> bool:
        return False


class _Listing:
    def __init__(self, entries: list[_Entry]) -> None:
        self._it: Iterator[_Entry] = iter(entries)

    def __iter__(self) -> "_Listing":
        return self

    def __next__(self) -> _Entry:
        return next(self._it)

    def __enter__(self) -> "_Listing":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._it = iter(())


def share(w: Writes, state: str) -> None:
    """Write the redirect's settings where child processes read them (inherit/sitecustomize.py)."""
    with guard():
        tmp = state + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"run_dir": str(w.run_dir), "keep": w.keep, "user": w.user, "made_temp": w.made_temp}, fh)
        os.replace(tmp, state)


def install_from(state: str) -> Writes:
    """In a child process of the warm: the same redirect as its parent's."""
    from pathlib import Path

    with open(state) as fh:
        cfg = json.load(fh)
    w = Writes(Path(cfg["run_dir"]), cfg["keep"], cfg["user"], lambda t: False)
    w.made_temp.extend(cfg.get("made_temp", []))
    install(w, state)
    return w


def install(w: Writes, state: str | None = None) -> None:  # noqa: C901 (one closure per patched function)
    o = {name: getattr(os, name) for name in ("open", "makedirs", "mkdir", "rename", "replace", "link", "symlink", "remove",
                                                "unlink", "rmdir", "chmod", "utime", "stat", "lstat", "access", "listdir",
                                                "scandir", "statvfs")}
    o_open, o_rmtree, o_mkdtemp = builtins.open, shutil.rmtree, tempfile.mkdtemp

    def real_of(path: Any) -> str:
        return os.path.abspath(os.fsdecode(os.fspath(path)))

    # ------------------------------------------------------------------ writes
    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if _plain(file, {}) or _ours() or w.kept(file):
            return o_open(file, mode, *args, **kwargs)
        if _write_mode(mode):
            if "x" in mode and w.visible(file):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(os.fspath(file)))
            if "w" not in mode and "x" not in mode:
                w.copy_up(file)  # append / r+: the script continues the file it sees
            return o_open(w.target(file), mode, *args, **kwargs)
        return o_open(w.source(file), mode, *args, **kwargs)

    def osopen(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if _plain(path, kwargs) or (len(args) > 1 and args[1] is not None) or _ours() or w.kept(path):
            return o["open"](path, flags, *args, **kwargs)
        if flags & _O_WRITE:
            if flags & os.O_CREAT and flags & os.O_EXCL and w.visible(path):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(os.fspath(path)))
            w.copy_up(path)  # e.g. a lock file opened O_RDWR|O_TRUNC without O_CREAT because it exists
            return o["open"](w.target(path), flags, *args, **kwargs)
        return o["open"](w.source(path), flags, *args, **kwargs)

    def makedirs(name: Any, mode: int = 0o777, exist_ok: bool = False) -> None:
        if _plain(name, {}) or _ours() or w.kept(name):
            with guard():  # and so are the mkdir calls it makes
                return o["makedirs"](name, mode, exist_ok)
        if w.visible(name):
            if exist_ok and os.path.isdir(name):
                return None
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(os.fspath(name)))
        with guard():
            o["makedirs"](w.target(name), mode, True)

    def mkdir(path: Any, mode: int = 0o777, *, dir_fd: Any = None) -> None:
        if _plain(path, {"dir_fd": dir_fd}) or _ours() or w.kept(path):
            return o["mkdir"](path, mode, dir_fd=dir_fd)
        if w.visible(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(os.fspath(path)))
        if not os.path.isdir(os.path.dirname(real_of(path))):
            raise _missing(path)
        return o["mkdir"](w.target(path), mode)

    def mkdtemp(*args: Any, **kwargs: Any) -> Any:
        made = o_mkdtemp(*args, **kwargs)
        w.made_temp.append(os.path.realpath(os.fsdecode(made)))
        if state:
            share(w, state)  # children write there for real too
        return made

    def _copy(src: str, dst: str) -> None:
        with guard():
            if os.path.isdir(src) and not os.path.islink(src):
                shutil.copytree(src, dst, symlinks=True)
            else:
                shutil.copy2(src, dst, follow_symlinks=False)

    def moved(name: str, keep_source: bool) -> Callable[..., Any]:
        original = o[name]

        def move(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            if args or kwargs or _plain(src, {}) or _plain(dst, {}) or (w.kept(src) and w.kept(dst)):
                return original(src, dst, *args, **kwargs)
            if name == "symlink":
                return original(w.source(src), w.target(dst))
            if not w.kept(src) and not w.visible(src):
                raise _missing(src)
            mapped_src = w.source(src)
            target = w.target(dst)
            if not w.kept(src) and mapped_src is src:  # only in the user's tree: copied, never moved out of it
                _copy(real_of(src), target)
            else:
                try:
                    original(mapped_src, target)
                except OSError as exc:
                    if exc.errno != errno.EXDEV:
                        raise
                    _copy(mapped_src, target)  # e.g. a temp file moved into the user's tree: another file system
                    if not keep_source:
                        with guard():
                            (o_rmtree if os.path.isdir(mapped_src) else o["unlink"])(mapped_src)
            if not keep_source and not w.kept(src) and os.path.lexists(real_of(src)):
                w.hide(real_of(src), name)
            return None

        return move

    def deleted(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def delete(path: Any, *args: Any, **kwargs: Any) -> Any:
            if _plain(path, kwargs) or _ours() or w.kept(path):
                return original(path, *args, **kwargs)
            real = real_of(path)
            mapped = w.mapped(path)
            if not w.visible(path):
                if kwargs.get("ignore_errors") or (args and name == "shutil.rmtree" and args[0]):
                    return None
                raise _missing(path)
            if os.path.lexists(mapped):
                original(mapped, *args, **kwargs)
            if os.path.lexists(real) and not w.hidden(real):
                w.hide(real, name)
            return None

        return delete

    def in_place(name: str) -> Callable[..., Any]:
        original = o[name]

        def change(path: Any, *args: Any, **kwargs: Any) -> Any:
            if _plain(path, kwargs) or _ours() or w.kept(path):
                return original(path, *args, **kwargs)
            if not w.visible(path):
                raise _missing(path)
            w.copy_up(path)
            return original(w.target(path), *args, **kwargs)

        return change

    # ------------------------------------------------------------------ queries
    def queried(name: str, missing: Any = None) -> Callable[..., Any]:
        original = o[name]

        def query(path: Any, *args: Any, **kwargs: Any) -> Any:
            if _plain(path, kwargs) or w.kept(path):
                return original(path, *args, **kwargs)
            with guard():
                real = real_of(path)
                mapped = str(w.files) + real
                if os.path.lexists(mapped):
                    where: Any = mapped
                elif w.hidden(real):
                    where = None
                else:
                    where = path
            if where is None:
                if missing is not None:
                    return missing
                raise _missing(path)
            return original(where, *args, **kwargs)

        return query

    def names(path: Any) -> list[str]:
        with guard():
            real = real_of(path)
            mapped = str(w.files) + real
            theirs = o["listdir"](mapped) if os.path.isdir(mapped) else None
            hidden = w.hidden(real)
            users = o["listdir"](real) if os.path.isdir(real) and not hidden and not w.opaque(real) else None
            if theirs is None and users is None:
                if hidden or os.path.lexists(mapped):
                    raise _missing(path)
                return o["listdir"](path)  # the error of the real call
            out = list(theirs or [])
            seen = set(out)
            out += [n for n in users or [] if n not in seen and not w.hidden(os.path.join(real, n))]
            return out

    def listdir(path: Any = ".") -> list[Any]:
        if _plain(path, {}) or w.kept(path):
            return o["listdir"](path)
        return names(path)

    def scandir(path: Any = ".") -> Any:
        if _plain(path, {}) or w.kept(path):
            return o["scandir"](path)
        base = os.fsdecode(os.fspath(path))
        return _Listing([_Entry(n, os.path.join(base, n)) for n in names(path)])

    def statvfs(path: Any) -> Any:
        """Free space of the file system the path is on for real: its nearest existing real ancestor."""
        if _plain(path, {}) or w.kept(path):
            return o["statvfs"](path)
        with guard():
            real = real_of(path)
            while not os.path.exists(real) and real != "/":
                real = os.path.dirname(real)
        return o["statvfs"](real)

    builtins.open = io.open = open_  # type: ignore[assignment]
    os.open = osopen  # type: ignore[assignment]
    os.makedirs, os.mkdir = makedirs, mkdir  # type: ignore[assignment]
    tempfile.mkdtemp = mkdtemp  # type: ignore[assignment]
    os.rename, os.replace = moved("rename", False), moved("replace", False)  # type: ignore[assignment]
    os.link, os.symlink = moved("link", True), moved("symlink", True)  # type: ignore[assignment]
    os.remove, os.unlink = deleted("os.remove", o["remove"]), deleted("os.unlink", o["unlink"])  # type: ignore[assignment]
    os.rmdir = deleted("os.rmdir", o["rmdir"])  # type: ignore[assignment]
    shutil.rmtree = deleted("shutil.rmtree", o_rmtree)  # type: ignore[assignment]
    os.chmod, os.utime = in_place("chmod"), in_place("utime")  # type: ignore[assignment]
    os.stat, os.lstat = queried("stat"), queried("lstat")  # type: ignore[assignment]
    os.access = queried("access", missing=False)  # type: ignore[assignment]
    os.listdir, os.scandir, os.statvfs = listdir, scandir, statvfs  # type: ignore[assignment]
    _ = _under  # (re-exported helpers kept in one place: writes.py)
