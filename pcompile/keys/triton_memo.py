"""Triton's build identity, remembered across processes under a signature of Triton's files.

Why: `triton_key()` (Triton's own content key, which every graph, program and kernel fingerprint
holds) reads and hashes libtriton (hundreds of MB) and Triton's sources: ~0.45 s in each new
process, paid at the first fingerprint, i.e. inside the `torch.compile` call of a restart whose
every entry hits, where stock computes no key at all. Triton memoises it per process only.

Like ccache's direct mode, the result is kept in the cache dir under a signature of the same
files' paths, sizes and modification times (and Triton's version), so reinstalling, upgrading or
editing Triton changes the signature and the key is hashed again. A memo that is unreadable or
malformed is ignored and rewritten; one that cannot be written costs only the hash next time.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

import xxhash

FOLDER = "probes"

#: what triton_build() returns: "<version>+<xxh3-64 of triton_key()>"
_WELL_FORMED = re.compile(r"^[0-9A-Za-z.+_-]+\+[0-9a-f]{16}$")


def signature(root: str, version: str) -> str:
    """xxh3 over (relative path, size, mtime_ns) of every .py and shared library in the package at
    `root` (a superset of what triton_key() reads, whichever Triton version decides that); any
    change to one of them, an added or removed file included, changes it. ~5 ms."""
    h = xxhash.xxh3_64()
    h.update(f"{os.path.abspath(root)}\0{version}\0".encode())
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if not (name.endswith(".py") or ".so" in name):
                continue
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            h.update(f"{os.path.relpath(path, root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def remembered(cache_dir: Path | None, root: str, version: str, compute: Callable[[], str], write: bool = True) -> str:
    """compute()'s result for Triton at `root`, read from `cache_dir`'s memo when its signature
    matches, else computed and (unless `write` is False: a read-only cache) written, atomically:
    a reader never sees half a value."""
    if cache_dir is None:
        return compute()
    try:
        path = Path(cache_dir) / FOLDER / f"triton-{signature(root, version)}"
    except OSError:
        return compute()
    try:
        kept = path.read_text(encoding="ascii").strip()
        if _WELL_FORMED.match(kept):
            return kept
    except (OSError, UnicodeDecodeError):
        pass
    value = compute()
    if write and _WELL_FORMED.match(value):
        _write(path, value)
    return value


def _write(path: Path, value: str) -> None:
    """tmp + rename (store/fsio.atomic_write's way; keys may not import the store, which imports keys)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(value + "\n", encoding="ascii")
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
