"""A directory tier: the node-local cache and the shared filesystem (NFS, Lustre) alike.

Layout (cache/FORMAT.md is the spec):
  FORMAT                              format marker, refuses a directory of another version
  blobs/<sha[:2]>/<sha256>            content-addressed, write-once
  manifests/<layer>/<d[:2]>/<key>.json
  pins/<key>                          pinned entries survive GC
  leases/<key>.lease                  single-flight (see lease.py)
  quarantine/                         bad entries kept aside for inspection
  tmp/                                temp files of in-flight publishes
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterator

from pcompile.errors import PcompileError
from pcompile.keys.key import LAYERS, Key
from pcompile.store import fsio
from pcompile.store.tier import Capabilities, Tier, in_housekeeping

FORMAT_LINE = "pcompile-store 1\n"
#: Longest a process waits for a neighbour's fetch of the same key from the shared tier.
SHARED_FETCH_WAIT = 30.0


def holds_any(root: Path, layer: str) -> bool:
    """Whether the directory store at `root` has at least one `layer` entry (cheap: stops at the
    first manifest found; a missing or unreadable directory holds none)."""
    try:
        with os.scandir(Path(root) / "manifests" / layer) as shards:
            for shard in shards:
                if shard.is_dir(follow_symlinks=False):
                    with os.scandir(shard.path) as entries:
                        if any(e.name.endswith(".json") for e in entries):
                            return True
    except OSError:
        return False
    return False


class DirectoryTier(Tier):
    def __init__(self, root: Path, kind: str = "local", create: bool = True) -> None:
        super().__init__()
        self.root = Path(root)
        self.kind = kind
        self.name = kind
        # a shared filesystem is read once per node; the node-local dir is the fast tier itself
        self.capabilities = Capabilities(directory=True, node_fetch_wait=0.0 if kind == "local" else SHARED_FETCH_WAIT)
        self.blobs = self.root / "blobs"
        self.manifests = self.root / "manifests"
        self.pins = self.root / "pins"
        self.leases = self.root / "leases"
        self.quarantine_dir = self.root / "quarantine"
        self.tmp = self.root / "tmp"
        self._ensure(create)

    def location(self) -> str:
        return str(self.root)

    def _ensure(self, create: bool) -> None:
        marker = self.root / "FORMAT"
        try:
            existing = fsio.read_file(marker)
        except OSError as exc:
            raise PcompileError(f"cannot read the cache in {self.root} ({exc.strerror}): choose another directory") from None
        if existing is not None:
            if existing.decode(errors="replace") != FORMAT_LINE:
                raise PcompileError(
                    f"{self.root} holds a cache of format {existing.decode(errors='replace').strip()!r}, "
                    f"this pcompile reads {FORMAT_LINE.strip()!r}: point it at another directory or migrate (cache/FORMAT.md)"
                )
            return
        if not create:
            if not self.root.exists():
                raise PcompileError(f"cache directory {self.root} does not exist: check --cache-dir/--shared-dir")
            return
        try:
            for sub in (self.blobs, self.manifests, self.pins, self.leases, self.quarantine_dir, self.tmp):
                sub.mkdir(parents=True, exist_ok=True)
            fsio.atomic_write(marker, FORMAT_LINE.encode(), self.tmp, replace=False)
        except PermissionError:
            raise PcompileError(f"cannot create the cache in {self.root} (permission denied): choose a writable --cache-dir") from None
        except OSError as exc:
            raise PcompileError(f"cannot create the cache in {self.root} ({exc.strerror}): choose another directory") from None

    # -- paths -------------------------------------------------------------------------
    def manifest_path(self, key: Key) -> Path:
        return self.manifests / key.layer / key.digest[:2] / f"{key}.json"

    def blob_path(self, sha256: str) -> Path:
        return self.blobs / sha256[:2] / sha256

    # -- primitives --------------------------------------------------------------------
    def read_manifest(self, key: Key) -> bytes | None:
        return fsio.read_file(self.manifest_path(key), no_atime=in_housekeeping())

    def read_blob(self, sha256: str) -> bytes | None:
        return fsio.read_file(self.blob_path(sha256), no_atime=in_housekeeping())

    def has_blob(self, sha256: str, size: int) -> bool:
        path = self.blob_path(sha256)
        try:
            if path.stat().st_size != size:
                return False
            os.utime(path)  # fresh mtime: GC's grace period protects blobs being re-published
            return True
        except OSError:
            return False

    def write_blob(self, sha256: str, data: bytes) -> None:
        path = self.blob_path(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        fsio.atomic_write(path, data, self.tmp, replace=True)

    def write_manifest(self, key: Key, data: bytes) -> None:
        path = self.manifest_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fsio.atomic_write(path, data, self.tmp, replace=True)

    def remove(self, key: Key) -> None:
        try:
            os.unlink(self.manifest_path(key))
        except FileNotFoundError:
            pass

    def keys(self) -> Iterator[Key]:
        for layer in LAYERS:
            base = self.manifests / layer
            if not base.is_dir():
                continue
            for shard in base.iterdir():
                if not shard.is_dir():
                    continue
                for path in shard.iterdir():
                    if path.suffix == ".json":
                        try:
                            yield Key.parse(path.stem)
                        except PcompileError:
                            continue

    def quarantine(self, key: Key, reason: str, bad_blob: str | None = None) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        dest = self.quarantine_dir / f"{stamp}-{fsio.unique_suffix()}"
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "reason.txt").write_text(f"{key}\n{reason}\n")
        try:
            os.replace(self.manifest_path(key), dest / f"{key}.json")
        except FileNotFoundError:
            pass
        if bad_blob:
            try:
                os.replace(self.blob_path(bad_blob), dest / bad_blob)
            except FileNotFoundError:
                pass

    def touch(self, key: Key) -> None:
        """Last access for LRU: atime set explicitly (noatime mounts are common)."""
        path = self.manifest_path(key)
        try:
            st = path.stat()
            os.utime(path, (time.time(), st.st_mtime))
        except OSError:
            pass

    def usage(self) -> tuple[int, int]:
        entries = sum(1 for _ in self.keys())
        return entries, fsio.du(self.blobs) + fsio.du(self.manifests)

    # -- pins ----------------------------------------------------------------------------
    def pin(self, key: Key) -> None:
        fsio.atomic_write(self.pins / str(key), b"", self.tmp, replace=True)

    def unpin(self, key: Key) -> None:
        try:
            os.unlink(self.pins / str(key))
        except FileNotFoundError:
            pass

    def pinned(self) -> set[str]:
        try:
            return {p.name for p in self.pins.iterdir()}
        except FileNotFoundError:
            return set()
