"""Nothing the user owns is harmed by a warm: saves of virtual tensors write placeholders, and
(fallback only) the script's file writes are redirected by patching Python.

Two layers:

- Always: `torch.save` of anything holding a virtual tensor writes a placeholder checkpoint
  (compat/warm_checkpoints.py: torch's format, empty records for the virtual tensors' data) that
  loads back during the warm as zeros of the same shapes and dtypes (safetensors'
  `save_file|save_model`: safetensors_placeholders.py, a sparse file); only a save torch can
  write no placeholder for (the legacy format) is skipped and counted, and where it named a
  path, a one-line stub stands in for the file, so the script's rename/link still works. In a
  namespace sandbox (sandbox.py, the default where the kernel allows it) these are written at
  the original path, which the sandbox's overlay already keeps out of the user's tree.
- Fallback (`PCOMPILE_WARM_SANDBOX=python`, or no namespaces here): paths.py patches Python's
  file functions so writes, moves and deletes go to `<run dir>/files/<absolute original path>`,
  deletions are recorded as whiteouts (`<run dir>/whiteouts/<path>`), and every path query
  (stat/exists/isdir, listdir/scandir/glob/iterdir/walk, statvfs/disk_usage, access) consults
  the redirect first, so the script sees its own writes, listings, mkdirs, renames, chmods and
  deletes. Child processes started by multiprocessing (spawn/forkserver) or subprocess inherit
  it when they are Python (isolation.py puts inherit/sitecustomize.py on their PYTHONPATH).
  Left alone: pcompile's cache dirs, /dev, /proc, /sys, the run dir, and temp dirs (/tmp, ...)
  except where they hold the script's own directory or the working directory. Not covered:
  native code that opens files by path itself (C extensions other than safetensors, torch.save
  in a child process), non-Python child processes, dir_fd-relative calls; the warm says so in a
  one-line notice at its start.
"""
from __future__ import annotations

import contextlib
import io
import os
import pickle
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

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
    """The redirect state of one warm process (see the module docstring). With redirect=False (a
    namespace sandbox keeps the files) only the saves of virtual tensors are handled here."""

    def __init__(self, run_dir: Path, keep: list[str], user: list[str], is_virtual: Callable[[Any], bool],
                 redirect: bool = True) -> None:
        self.run_dir = run_dir
        self.files = run_dir / "files"
        self.whiteouts = run_dir / "whiteouts"
        self.redirect = redirect
        self.keep = [os.path.realpath(k) for k in keep + [str(run_dir), "/dev", "/proc", "/sys"]]
        self.temp = [os.path.realpath(k) for k in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm")]
        self.user = [os.path.realpath(u) for u in user]
        self.made_temp: list[str] = []  # dirs tempfile.mkdtemp made: private scratch, never redirected
        self.is_virtual = is_virtual
        self.redirected: set[str] = set()
        self.skipped_saves: list[str] = []
        self.placeholder_saves: list[str] = []
        self.skipped_deletes: list[str] = []
        self._lock = threading.Lock()
        self._resolved: dict[str, str] = {}  # directory -> its realpath (symlinked dirs into kept ones)

    # ---------------------------------------------------------------- path mapping
    def _kept(self, real: str) -> bool:
        """pcompile's own dirs always; temp dirs unless the path is in the user's tree (cwd, script dir)."""
        if _under(real, self.keep) or _under(real, self.made_temp):
            return True
        return _under(real, self.temp) and not _under(real, self.user)

    def kept(self, path: Any) -> bool:
        """Not redirected: not a path, or one of the dirs above (decided on the absolute path, then the real one)."""
        if not self.redirect or isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
            return True
        with guard():
            real = os.path.abspath(os.fsdecode(os.fspath(path)))
            if self._kept(real):
                return True
            head, tail = os.path.split(real)
            resolved = self._resolved.get(head)
            if resolved is None:
                resolved = self._resolved[head] = os.path.realpath(head)
                if len(self._resolved) > 4096:
                    self._resolved.clear()
            return self._kept(os.path.join(resolved, tail))

    def mapped(self, path: Any) -> str:
        return str(self.files) + os.path.abspath(os.fsdecode(os.fspath(path)))

    def target(self, path: Any) -> Any:
        """Where a write to `path` goes (unchanged for kept paths and non-path arguments)."""
        if self.kept(path):
            return path
        with guard():
            real = os.path.abspath(os.fsdecode(os.fspath(path)))
            mapped = str(self.files) + real
            os.makedirs(os.path.dirname(mapped), exist_ok=True)
            self.unhide(real)
            with self._lock:
                self.redirected.add(real)
            return mapped

    def source(self, path: Any) -> Any:
        """Where a read of `path` comes from: the redirected copy if the script wrote one; a
        path it deleted reads from the (absent) redirected copy, so it is not found."""
        if self.kept(path):
            return path
        with guard():
            real = os.path.abspath(os.fsdecode(os.fspath(path)))
            mapped = str(self.files) + real
            return mapped if os.path.lexists(mapped) or self.hidden(real) else path

    # ---------------------------------------------------------------- deletions (whiteouts)
    def hidden(self, real: str) -> bool:
        """The script deleted `real` (or a directory above it, or recreated one above it empty)."""
        with guard():
            if not os.path.isdir(self.whiteouts):
                return False
            anc = real
            while True:
                marker = str(self.whiteouts) + anc
                if os.path.isfile(marker) or (anc != real and os.path.isfile(os.path.join(marker, ".opaque"))):
                    return True
                if anc == "/":
                    return False
                anc = os.path.dirname(anc)

    def opaque(self, real: str) -> bool:
        with guard():
            return os.path.isfile(str(self.whiteouts) + real + "/.opaque")

    def hide(self, real: str, what: str) -> None:
        with guard():
            marker = str(self.whiteouts) + real
            if os.path.isdir(marker):
                shutil.rmtree(marker)
            os.makedirs(os.path.dirname(marker), exist_ok=True)
            open(marker, "w").close()
            with self._lock:
                self.skipped_deletes.append(f"{what} {real}")

    def unhide(self, real: str) -> None:
        """A deleted path written again: a file marker goes; a directory comes back empty (opaque)."""
        with guard():
            marker = str(self.whiteouts) + real
            if os.path.isfile(marker):
                os.unlink(marker)
                if os.path.isdir(real):
                    os.makedirs(marker, exist_ok=True)
                    open(os.path.join(marker, ".opaque"), "w").close()

    def visible(self, path: Any) -> bool:
        """`path` exists in the script's view (its redirected copy, or the user's file not deleted)."""
        with guard():
            real = os.path.abspath(os.fsdecode(os.fspath(path)))
            return os.path.lexists(str(self.files) + real) or (os.path.lexists(real) and not self.hidden(real))

    def copy_up(self, path: Any) -> None:
        """Before an in-place change (append, r+, chmod, utime): copy the user's file to the redirect."""
        if self.kept(path):
            return
        with guard():
            real = os.path.abspath(os.fsdecode(os.fspath(path)))
            mapped = str(self.files) + real
            if os.path.lexists(mapped) or not os.path.lexists(real) or self.hidden(real):
                return
            os.makedirs(os.path.dirname(mapped), exist_ok=True)
            if os.path.islink(real):
                os.symlink(os.readlink(real), mapped)
            elif os.path.isdir(real):
                os.mkdir(mapped)
                shutil.copymode(real, mapped)
            else:
                shutil.copy2(real, mapped)
            with self._lock:
                self.redirected.add(real)

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

    def _site(self, what: str, dest: Any) -> str:
        site = reads.user_site()
        return f"{site[0]}:{site[1]} {what}({os.fspath(dest) if isinstance(dest, (str, os.PathLike)) else type(dest).__name__})"

    def placeholder_save(self, what: str, dest: Any) -> None:
        """Count a checkpoint of virtual tensors written as placeholders (shapes, dtypes, no data)."""
        line = self._site(what, dest)
        with self._lock:
            self.placeholder_saves.append(line)

    def skip_save(self, what: str, dest: Any, write: Callable[[Any, bytes], None]) -> None:
        """Count the skipped save; a path gets a small stub in the run dir (or, in a namespace
        sandbox, at its path), so the script's next move of it (save to tmp, then rename to
        last.pth, link to best.pth) still finds a file."""
        line = self._site(what, dest)
        with self._lock:
            self.skipped_saves.append(line)
        if isinstance(dest, (str, os.PathLike)):  # never over a file outside the run dir and the script's own temp dirs
            mapped = self.target(dest)
            if not self.redirect or mapped is not dest or _under(os.path.realpath(os.fsdecode(os.fspath(dest))), self.made_temp):
                write(mapped, STUB)

    def summary(self) -> dict[str, Any]:
        return {"dir": str(self.files), "redirected": sorted(self.redirected)[:50], "n_redirected": len(self.redirected),
                "skipped_saves": self.skipped_saves[:50], "n_skipped_saves": len(self.skipped_saves),
                "placeholder_saves": self.placeholder_saves[:50], "n_placeholder_saves": len(self.placeholder_saves),
                "skipped_deletes": self.skipped_deletes[:50]}


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Inside: the patched functions (paths.py) act as the originals (our own bookkeeping)."""
    _tls.bypass = getattr(_tls, "bypass", 0) + 1
    try:
        yield
    finally:
        _tls.bypass -= 1


def guarded() -> bool:
    return bool(getattr(_tls, "bypass", 0))


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


class _Null(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        return len(b)


def _write_mode(mode: str) -> bool:
    return any(c in mode for c in "wax+")
