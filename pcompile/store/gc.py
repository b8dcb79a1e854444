"""Budgets for a directory tier: LRU by last access, pinned entries kept, safe beside live jobs.

Order matters for concurrent readers and writers: manifests go first (a reader then misses
cleanly), blobs only once no manifest names them AND they are older than a grace period (a
writer re-publishing a blob refreshes its mtime first, see DirectoryTier.has_blob).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from pcompile.keys.key import Key
from pcompile.store import fsio
from pcompile.store.fs_tier import DirectoryTier

BLOB_GRACE_SECONDS = 600.0
TMP_MAX_AGE_SECONDS = 3600.0
QUARANTINE_MAX_AGE_SECONDS = 7 * 86400.0


@dataclasses.dataclass
class GcResult:
    entries_before: int = 0
    bytes_before: int = 0
    entries_removed: int = 0
    blobs_removed: int = 0
    bytes_freed: int = 0
    entries_after: int = 0
    bytes_after: int = 0
    pinned_kept: int = 0

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _Item:
    key: Key
    path: Path
    last_access: float
    size: int
    blobs: list[str]


def _scan(tier: DirectoryTier) -> tuple[list[_Item], dict[str, int]]:
    items: list[_Item] = []
    for key in tier.keys():
        path = tier.manifest_path(key)
        try:
            st = path.stat()
            body = json.loads(fsio.read_without_access(path))
            blobs = [b["sha256"] for b in body.get("blobs", {}).values()]
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            continue  # vanished or unreadable: verify's business, not GC's
        items.append(_Item(key, path, max(st.st_atime, st.st_mtime), st.st_size, blobs))
    blob_sizes: dict[str, int] = {}
    for dirpath, _dirs, files in os.walk(tier.blobs):
        for name in files:
            try:
                blob_sizes[name] = os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return items, blob_sizes


def collect_garbage(
    tier: DirectoryTier,
    *,
    max_bytes: int | None = None,
    max_entries: int | None = None,
    max_age_days: float | None = None,
    blob_grace: float = BLOB_GRACE_SECONDS,
    progress: Callable[[int], None] | None = None,
) -> GcResult:
    now = time.time()
    items, blob_sizes = _scan(tier)
    refs: dict[str, int] = {}
    for item in items:
        for sha in item.blobs:
            refs[sha] = refs.get(sha, 0) + 1
    total = sum(blob_sizes.values()) + sum(i.size for i in items)
    result = GcResult(entries_before=len(items), bytes_before=total)
    pinned = tier.pinned()
    count = len(items)
    candidates = sorted((i for i in items if str(i.key) not in pinned), key=lambda i: i.last_access)
    result.pinned_kept = count - len(candidates)
    cutoff = now - max_age_days * 86400 if max_age_days is not None else None

    for item in candidates:
        too_old = cutoff is not None and item.last_access < cutoff
        over = (max_bytes is not None and total > max_bytes) or (max_entries is not None and count > max_entries)
        if not (too_old or over):
            if cutoff is None:
                break
            continue
        try:
            os.unlink(item.path)
        except FileNotFoundError:
            continue
        count -= 1
        total -= item.size
        result.entries_removed += 1
        result.bytes_freed += item.size
        for sha in item.blobs:
            refs[sha] -= 1
            if refs[sha] == 0:
                total -= blob_sizes.get(sha, 0)  # freed by the sweep below (modulo grace)
        if progress:
            progress(1)

    for sha, size in blob_sizes.items():
        if refs.get(sha, 0) > 0:
            continue
        path = tier.blob_path(sha)
        try:
            if now - path.stat().st_mtime < blob_grace:
                continue
            os.unlink(path)
        except FileNotFoundError:
            continue
        result.blobs_removed += 1
        result.bytes_freed += size

    _sweep_old(tier.tmp, now - TMP_MAX_AGE_SECONDS)
    _sweep_old(tier.quarantine_dir, now - QUARANTINE_MAX_AGE_SECONDS)
    result.entries_after = count
    result.bytes_after = max(0, result.bytes_before - result.bytes_freed)
    write_usage(tier, result.bytes_after, count, scanned_at=now)
    _trim_ledger(tier, now)
    return result


USAGE_FILE = "usage.json"
#: One line per local write ("<time> <bytes>"), appended by every writer of the node, so each
#: writer's budget check counts the others' writes since the last GC scan too.
LEDGER_FILE = "written.log"


def note_write(tier: DirectoryTier, size: int) -> None:
    """Append to the write ledger (O_APPEND: a short line lands whole, also from many processes)."""
    try:
        fd = os.open(tier.root / LEDGER_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{time.time():.3f} {size}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def written_since(tier: DirectoryTier, since: float) -> int:
    """Bytes the node's writers added after `since`, by the ledger."""
    raw = fsio.read_file(tier.root / LEDGER_FILE) or b""
    total = 0
    for line in raw.splitlines():
        parts = line.split()
        try:
            if len(parts) == 2 and float(parts[0]) >= since:
                total += int(parts[1])
        except ValueError:
            continue
    return total


def _trim_ledger(tier: DirectoryTier, before: float) -> None:
    """Drop ledger lines the usage record already covers (a second margin for clock steps)."""
    path = tier.root / LEDGER_FILE
    raw = fsio.read_file(path)
    if not raw:
        return
    keep = [ln for ln in raw.splitlines() if len(ln.split()) == 2 and ln.split()[0].replace(b".", b"", 1).isdigit()
            and float(ln.split()[0]) >= before - 1.0]
    try:
        fsio.atomic_write(path, b"".join(ln + b"\n" for ln in keep), tier.tmp, replace=True)
    except OSError:
        pass


def write_usage(tier: DirectoryTier, total: int, entries: int, scanned_at: float) -> None:
    """What GC left (blobs still in their grace period included) as of its scan, for writers'
    budget checks: a writer adds what it wrote since `scanned_at`."""
    body = json.dumps({"bytes": total, "entries": entries, "at": scanned_at}).encode()
    try:
        fsio.atomic_write(tier.root / USAGE_FILE, body, tier.tmp, replace=True)
    except OSError:
        pass


def read_usage(tier: DirectoryTier) -> tuple[int, float] | None:
    """(bytes, scan time) of the last GC's record, or None if no GC has run here."""
    path = tier.root / USAGE_FILE
    try:
        body = json.loads(fsio.read_file(path) or b"{}")
        return int(body["bytes"]), float(body["at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sweep_old(directory: Path, cutoff: float) -> None:
    try:
        children = list(directory.iterdir())
    except FileNotFoundError:
        return
    for child in children:
        try:
            if child.lstat().st_mtime >= cutoff:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink()
        except OSError:
            pass
