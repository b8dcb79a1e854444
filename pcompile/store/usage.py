"""Where every byte under the cache dir goes, for `pcompile stats` and `pcompile gc`.

The store's entries are only part of it: Inductor and Triton keep working files (generated code,
compiled modules, cubins materialised from the store) under <cache dir>/inductor, warms keep the
files their scripts wrote under warm-runs/, and jobs keep event logs. Blobs no manifest names any
more stay for a grace period after GC (a concurrent writer may be re-publishing one).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pcompile.store import fsio
from pcompile.store.fs_tier import DirectoryTier

#: (name shown, sub-directory of the cache dir); the store itself is broken down further.
PARTS = (("Inductor/Triton working files", "inductor"), ("warm runs' redirected files", "warm-runs"),
         ("event logs", "events"), ("reports (`pcompile report`)", "reports"))


du = fsio.du


def store_parts(tier: DirectoryTier) -> dict[str, int]:
    """Entries (manifests and the blobs they name), unnamed blobs, and the rest of the store dir."""
    named: set[str] = set()
    manifests = 0
    for key in tier.keys():
        path = tier.manifest_path(key)
        try:
            manifests += os.lstat(path).st_size
            body = json.loads(fsio.read_without_access(path))
            named.update(b["sha256"] for b in body.get("blobs", {}).values())
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            continue
    in_entries = unnamed = 0
    for dirpath, _dirs, files in os.walk(tier.blobs):
        for name in files:
            try:
                size = os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
            if name in named:
                in_entries += size
            else:
                unnamed += size
    rest = du(tier.root) - manifests - in_entries - unnamed
    return {"store entries": manifests + in_entries, "store blobs no entry names (freed by gc after the grace period)": unnamed,
            "store leases, temp and quarantine": max(rest, 0)}


def breakdown(cache_dir: Path, tier: DirectoryTier) -> dict[str, int]:
    """Every byte under `cache_dir`, by what keeps it; the values sum to the dir's total."""
    cache_dir = Path(cache_dir)
    parts = store_parts(tier) if tier.root.is_dir() else {}
    counted = du(tier.root) if tier.root.is_dir() else 0
    for name, sub in PARTS:
        parts[name] = du(cache_dir / sub)
        counted += parts[name]
    parts["stats, pool sockets and logs"] = max(du(cache_dir) - counted, 0)
    return parts


def sweep_working_files(root: Path, max_bytes: int, grace: float) -> tuple[int, int]:
    """Delete Inductor/Triton working files, least recently used first, until `root` holds at
    most `max_bytes`; files used within `grace` seconds stay (a running job may still load them).
    The store holds every artifact they came from, so a later job rebuilds them by a hit.
    Returns (bytes freed, bytes kept only for the grace period)."""
    files: list[tuple[float, int, str]] = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            files.append((max(st.st_atime, st.st_mtime), st.st_size, path))
    total = sum(size for _, size, _ in files)
    now = time.time()
    freed = young = 0
    for used, size, path in sorted(files):
        if total - freed <= max_bytes:
            break
        if now - used < grace:
            young += size
            continue
        try:
            os.unlink(path)
            freed += size
        except OSError:
            pass
    for dirpath, dirs, _names in os.walk(root, topdown=False):
        for d in dirs:
            try:
                os.rmdir(os.path.join(dirpath, d))  # only empty ones go
            except OSError:
                pass
    return freed, young
