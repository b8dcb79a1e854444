"""Triton kernels (cubin + metadata + IRs) in pcompile's store: a Triton CacheManager.

Named by `TRITON_CACHE_MANAGER=pcompile.inductor.triton_cache:StoreCacheManager`, which every
compile worker inherits. It is Triton's FileCacheManager (files always live in Triton's local
cache dir: Inductor's static launcher opens the .cubin by path) plus the store:

- `get_group` (Triton asks before compiling): local files first; otherwise the store's entry
  for this kernel, written into the local dir before answering. On a miss this process takes
  the kernel's lease (another process compiling the same kernel makes us wait for its entry).
- `put_group` (Triton is done): the whole group (every file the compile produced, including the
  metadata JSON) becomes ONE store entry, so a reader gets all of a kernel's files or none.

Triton builds one manager per compile; the lease is released at the publish, or when the manager
is dropped without one (the compile raised).

Native modules (`get_file`/`put` of a `.so`: Triton's `cuda_utils` driver module and any
per-signature launcher, built with the host C compiler) are stored too, one entry per file: a
GPU node with an empty Triton dir would otherwise run gcc before its first kernel launch. Triton's
key for them already holds the source and its `platform_key()`; a stored module that does not
load on this host makes Triton log a warning and rebuild it, never fail.
"""
from __future__ import annotations

import os
import weakref
from typing import Any

from pcompile.inductor import store_gateway
from pcompile.compat import triton_cache_manager as compat
from pcompile.settings import DISABLE

MANAGER_PATH = "pcompile.inductor.triton_cache:StoreCacheManager"


def _inductor_key(key: str, filename: str) -> str:
    return f"triton:{key}:{filename}"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


class StoreCacheManager(compat.file_cache_manager()):  # type: ignore[misc]
    """A FileCacheManager whose misses consult, and whose groups publish to, pcompile's store."""

    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        super().__init__(key, override=override, dump=dump)
        # Dump/override managers serve debugging tools keyed by source hash only: stay local.
        self._local_only = bool(override or dump) or bool(DISABLE.get())
        self._leased: str | None = None

    def get_group(self, filename: str) -> dict[str, str] | None:
        found = super().get_group(filename)
        if found is not None or self._local_only:
            return found
        ikey = _inductor_key(self.key, filename)
        entry = store_gateway.lookup("triton", ikey, single_flight=True)
        if entry is None:
            self._lease_until_done(ikey)
            return None
        return self._materialise(filename, entry.blobs)

    def get_file(self, filename: str) -> str | None:
        found = super().get_file(filename)
        if found is not None or self._local_only or not _is_native_module(filename):
            return found
        entry = store_gateway.lookup("triton", _inductor_key(self.key, filename), single_flight=False)
        data = None if entry is None else entry.blobs.get(filename)
        if data is None:
            return None
        return super().put(data, filename, binary=True)

    def put(self, data: Any, filename: str, binary: bool = True) -> str:
        path = super().put(data, filename, binary=binary)
        if not self._local_only and _is_native_module(filename) and isinstance(data, bytes):
            store_gateway.publish("triton", _inductor_key(self.key, filename), {filename: data},
                           meta={"source": "triton", "triton_hash": self.key, "file": filename, "native_module": True},
                           compiled=True)
        return path

    def _lease_until_done(self, ikey: str) -> None:
        from pcompile.inductor.layer_keys import store_key

        name = str(store_key("triton", ikey)[0])
        lease = store_gateway.held_lease(name)
        if lease is not None:
            self._leased = name
            weakref.finalize(self, store_gateway.release, name, lease)

    def _materialise(self, filename: str, blobs: dict[str, bytes]) -> dict[str, str] | None:
        group: dict[str, str] = {}
        for name, data in blobs.items():
            if os.sep in name or name.startswith("."):
                return None  # not a file name Triton produced: refuse rather than write outside
            group[name] = super().put(data, name, binary=True)
        super().put_group(filename, group)
        return group

    def put_group(self, filename: str, group: dict[str, str]) -> Any:
        path = super().put_group(filename, group)
        if not self._local_only:
            self._publish(filename, group)
        return path

    def publish_local(self, filename: str) -> bool:
        """Publish a group another process compiled into this process's Triton dir (a pool
        worker's speculative configs): False when it is not there."""
        group = super().get_group(filename)
        return bool(group) and not self._local_only and self._publish(filename, group)

    def _publish(self, filename: str, group: dict[str, str]) -> bool:
        blobs: dict[str, bytes] = {}
        for name, child in group.items():
            data = _read(child)
            if data is None:
                store_gateway.release(self._leased or "")
                return False  # a file vanished under us: publish nothing rather than half a kernel
            blobs[os.path.basename(name)] = data
        meta = {"source": "triton", "triton_hash": self.key, "group": filename, "files": sorted(blobs)}
        target = _target_of(blobs.get(filename))
        if target:
            meta["target"] = target
        ok = store_gateway.publish("triton", _inductor_key(self.key, filename), blobs, meta=meta)
        self._leased = None
        return ok


def publish_compiled_elsewhere(kernel_hash: str, kernel_name: str) -> bool:
    """Store a kernel group another process compiled into this process's Triton dir
    (`kernel_hash`: the compiled kernel's `hash`)."""
    key, root = compat.manager_key(kernel_hash), compat.local_dir()
    if not root or not os.path.isdir(os.path.join(root, key)):
        return False
    return StoreCacheManager(key).publish_local(f"{kernel_name}.json")


def _is_native_module(filename: str) -> bool:
    return filename.endswith(".so") and os.sep not in filename and not filename.startswith(".")


def _target_of(metadata: bytes | None) -> str | None:
    """"cuda:90"-style target from the kernel's metadata JSON (for `explain`; not in the key)."""
    if not metadata:
        return None
    try:
        import json

        target = json.loads(metadata).get("target") or {}
        if isinstance(target, dict):
            return f"{target.get('backend')}:{target.get('arch')}"
        if isinstance(target, (list, tuple)) and len(target) >= 2:
            return f"{target[0]}:{target[1]}"
    except (ValueError, AttributeError):
        return None
    return None
