"""Nothing the user owns is harmed by a warm: the script's file writes go to a side directory.

A warm runs the user's unchanged script, which saves checkpoints, appends to logs and rotates old
checkpoints away. Its CUDA values are placeholders (zeros), so none of that may land on the user's
files. What this does, in the warm process only:

- `torch.save` / `safetensors.torch.save_file|save_model` of anything holding a virtual tensor is
  skipped and counted (a checkpoint of placeholder weights is worthless and could overwrite a
  real one); where it named a path, a one-line stub stands in for it in the run dir, so the
  script's rename/link of the fresh checkpoint still works.
- Every other write through Python -- `open()` for writing, `os.open` with write flags,
  `os.makedirs`/`mkdir`, `os.rename`/`replace`/`link`/`symlink`, `os.remove`/`unlink`, `shutil.rmtree` -- is
  redirected to `<run dir>/files/<absolute original path>`, and later reads of such a path read
  the redirected copy, so a script that writes then reads its own files still works. Deleting a
  file that exists only in the user's tree is skipped. The report prints the run dir.
- Left alone: pcompile's cache dirs, /dev, /proc, /sys, the run dir, and temp dirs (/tmp, ...)
  except where they hold the script's own directory or the working directory.

Native code that opens files by path itself (other than the two savers above) is not redirected.
"""
from __future__ import annotations

import builtins
import io
import os
import pickle
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from pcompile.warm import reads

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PCOMPILE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


STUB = b"pcompile warm: a save of virtual GPU tensors was skipped here; this file only stands in for it\n"
_TEMPFILE = os.path.abspath(tempfile.__file__)
_STDLIB = os.path.dirname(os.path.abspath(os.__file__)) + os.sep


def _ours() -> bool:
    """The write comes from pcompile itself (its reports, diagnostics it was asked for) or from
    the tempfile module (a fresh private temp file or dir, which native code may then write
    into): never redirected. Decided by the nearest caller outside the standard library, so a
    pathlib or shutil call on pcompile's behalf counts as pcompile's."""
    if getattr(_tls, "bypass", 0):
        return True
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name == _TEMPFILE:
            return True
        if not name.startswith(_STDLIB) or "site-packages" in name:
            return name.startswith(_PCOMPILE)
        frame = frame.f_back
    return False


_tls = threading.local()


class Writes:
    """The redirect state of one warm process (see the module docstring)."""

    def __init__(self, run_dir: Path, keep: list[str], user: list[str], is_virtual: Callable[[Any], bool]) -> None:
        self.files = run_dir / "files"
        self.keep = [os.path.realpath(k) for k in keep + [str(run_dir), "/dev", "/proc", "/sys"]]
        self.temp = [os.path.realpath(k) for k in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm")]
        self.user = [os.path.realpath(u) for u in user]
        self.made_temp: list[str] = []  # dirs tempfile.mkdtemp made: private scratch, never redirected
        self.is_virtual = is_virtual
        self.redirected: set[str] = set()
        self.skipped_saves: list[str] = []
        self.skipped_deletes: list[str] = []
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- path mapping
    def _kept(self, real: str) -> bool:
        """pcompile's own dirs always; temp dirs unless the path is in the user's tree (cwd, script dir)."""
        if _under(real, self.keep) or _under(real, self.made_temp):
            return True
        return _under(real, self.temp) and not _under(real, self.user)

    def target(self, path: Any) -> Any:
        """Where a write to `path` goes (unchanged for kept paths and non-path arguments)."""
        if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
            return path
        raw = os.fsdecode(os.fspath(path))
        real = os.path.abspath(raw)
        if self._kept(os.path.realpath(real)):
            return path
        mapped = str(self.files) + real
        os.makedirs(os.path.dirname(mapped), exist_ok=True)
        with self._lock:
            self.redirected.add(real)
        return mapped

    def source(self, path: Any) -> Any:
        """Where a read of `path` comes from: the redirected copy if the script wrote one."""
        if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
            return path
        real = os.path.abspath(os.fsdecode(os.fspath(path)))
        mapped = str(self.files) + real
        return mapped if os.path.lexists(mapped) else path

    # ---------------------------------------------------------------- virtual tensors in a save
    def holds_virtual(self, obj: Any) -> bool:
        """Walk `obj` the way pickle would and say whether any tensor in it is virtual."""
        import torch

        found = False
        writes = self

        class _Probe(pickle.Pickler):
            def persistent_id(self, o: Any) -> Any:
                nonlocal found
                if isinstance(o, torch.Tensor):
                    found = found or writes.is_virtual(o)
                    return "t"
                if isinstance(o, torch.nn.Module):
                    return None
                return None

        try:
            _Probe(_Null(), protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
        except Exception:
            pass  # unpicklable objects: torch.save would fail on them too; what was seen counts
        return found

    def skip_save(self, what: str, dest: Any, write: Callable[[Any, bytes], None]) -> None:
        """Count the skipped save; a path gets a small stub in the run dir, so the script's next
        move of it (save to tmp, then rename to last.pth, link to best.pth) still finds a file."""
        site = reads.user_site()
        with self._lock:
            self.skipped_saves.append(f"{site[0]}:{site[1]} {what}({os.fspath(dest) if isinstance(dest, (str, os.PathLike)) else type(dest).__name__})")
        if isinstance(dest, (str, os.PathLike)):  # never over a file outside the run dir and the script's own temp dirs
            mapped = self.target(dest)
            if mapped is not dest or _under(os.path.realpath(os.fsdecode(os.fspath(dest))), self.made_temp):
                write(mapped, STUB)

    def summary(self) -> dict[str, Any]:
        return {"dir": str(self.files), "redirected": sorted(self.redirected)[:50], "n_redirected": len(self.redirected),
                "skipped_saves": self.skipped_saves[:50], "n_skipped_saves": len(self.skipped_saves),
                "skipped_deletes": self.skipped_deletes[:50]}


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


class _Null(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        return len(b)


def _write_mode(mode: str) -> bool:
    return any(c in mode for c in "wax+")


def install(w: Writes) -> None:
    """Wrap the process's write paths (see the module docstring)."""
    import torch

    o_open, o_osopen = builtins.open, os.open
    o_makedirs, o_mkdir = os.makedirs, os.mkdir
    o_rename, o_replace, o_remove, o_unlink, o_rmtree = os.rename, os.replace, os.remove, os.unlink, shutil.rmtree
    o_link, o_symlink = os.link, os.symlink
    o_save = torch.save

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if _ours():
            return o_open(file, mode, *args, **kwargs)
        return o_open(w.target(file) if _write_mode(mode) else w.source(file), mode, *args, **kwargs)

    def osopen(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if kwargs.get("dir_fd") is not None or (len(args) > 1 and args[1] is not None) or _ours():
            return o_osopen(path, flags, *args, **kwargs)
        return o_osopen(w.target(path) if flags & _WRITE_FLAGS else w.source(path), flags, *args, **kwargs)

    def makedirs(name: Any, mode: int = 0o777, exist_ok: bool = False) -> None:
        if _ours():  # and so are the mkdir calls it makes
            _tls.bypass = getattr(_tls, "bypass", 0) + 1
            try:
                return o_makedirs(name, mode, exist_ok)
            finally:
                _tls.bypass -= 1
        return o_makedirs(w.target(name), mode, exist_ok)

    def mkdir(path: Any, mode: int = 0o777, *, dir_fd: Any = None) -> None:
        return o_mkdir(path if dir_fd is not None or _ours() else w.target(path), mode, dir_fd=dir_fd)

    o_mkdtemp = tempfile.mkdtemp

    def mkdtemp(*args: Any, **kwargs: Any) -> Any:
        made = o_mkdtemp(*args, **kwargs)
        w.made_temp.append(os.path.realpath(os.fsdecode(made)))
        return made

    def moved(original: Callable[..., Any]) -> Callable[..., Any]:
        def move(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            if args or kwargs:
                return original(src, dst, *args, **kwargs)
            return original(w.source(src), w.target(dst))

        return move

    def deleted(original: Callable[..., Any], what: str) -> Callable[..., Any]:
        def delete(path: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("dir_fd") is not None or isinstance(path, int):
                return original(path, *args, **kwargs)
            src = w.source(path)
            if src is path and not w._kept(os.path.realpath(os.fsdecode(os.fspath(path)))):
                w.skipped_deletes.append(f"{what} {os.fsdecode(os.fspath(path))}")
                return None
            return original(src, *args, **kwargs)

        return delete

    def stub(path: Any, data: bytes) -> None:
        with o_open(path, "wb") as fh:
            fh.write(data)

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        if w.holds_virtual(obj):
            w.skip_save("torch.save", f, stub)
            return None
        return o_save(obj, w.target(f) if isinstance(f, (str, os.PathLike)) else f, *args, **kwargs)

    builtins.open = io.open = open_  # type: ignore[assignment]
    os.open = osopen  # type: ignore[assignment]
    os.makedirs, os.mkdir = makedirs, mkdir  # type: ignore[assignment]
    tempfile.mkdtemp = mkdtemp  # type: ignore[assignment]
    os.rename, os.replace = moved(o_rename), moved(o_replace)  # type: ignore[assignment]
    os.link, os.symlink = moved(o_link), moved(o_symlink)  # type: ignore[assignment]
    os.remove, os.unlink = deleted(o_remove, "os.remove"), deleted(o_unlink, "os.unlink")  # type: ignore[assignment]
    shutil.rmtree = deleted(o_rmtree, "shutil.rmtree")  # type: ignore[assignment]
    torch.save = save  # type: ignore[assignment]
    _wrap_safetensors(w)


def _write_stub(path: Any, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)  # redirected already; os.open is wrapped
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _wrap_safetensors(w: Writes) -> None:
    """safetensors writes from native code by path: skip saves of virtual tensors, redirect others."""
    try:
        import safetensors.torch as st
    except ImportError:
        return
    for name in ("save_file", "save_model"):
        original = getattr(st, name, None)
        if original is None:
            continue

        def make(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
            def saver(obj: Any, filename: Any, *args: Any, **kwargs: Any) -> Any:
                tensors = obj.state_dict() if name == "save_model" else obj
                if w.holds_virtual(tensors):
                    w.skip_save(f"safetensors.{name}", filename, _write_stub)
                    return None
                return original(obj, w.target(filename), *args, **kwargs)

            return saver

        setattr(st, name, make(name, original))
