"""Which boards a cache holds graph entries for: one tiny marker file per board.

Graph and AOTAutograd keys hold the exact board name (torch's FX key hashes the CUDA device name,
pcompile's fingerprint its `target_name`), so entries warmed for an H100 are never found by a job
on an H200. The store cannot say so cheaply (it would read every manifest), so the first process
that publishes a graph entry for a board leaves `<store>/boards/<slug>.json` in each directory
tier it writes: a GPU job that misses reads that directory once and can name the boards the cache
was warmed for (inductor/board_notice.py). Kernels (Triton cubins) are keyed by their source and
arch, not the board, and are shared by boards whose kernel sources agree.
"""
from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from pcompile.store import fsio

DIRNAME = "boards"
#: the store layers whose keys hold the board name
BOARD_LAYERS = ("graph", "autograd")


def slug(name: str) -> str:
    """A file name for a board name: NVIDIA H100 80GB HBM3 -> h100-80gb-hbm3."""
    s = re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-")
    return s[:100] or "board"


def marker_path(tier_root: Path, name: str) -> Path:
    return Path(tier_root) / DIRNAME / f"{slug(name)}.json"


def write_marker(tier_root: Path, name: str, arch: str, *, by: str, command: str | None = None,
                 software: dict[str, str] | None = None, replace: bool = False) -> bool:
    """Record that this directory tier holds graph entries for board `name`. `replace=False`
    keeps a marker already there (a job's publish must not hide the warm command it records)."""
    path = marker_path(tier_root, name)
    if not replace and path.exists():
        return False
    body = {"name": name, "arch": arch, "by": by, "command": command, "at": round(time.time(), 3),
            "software": dict(software or {})}
    tmp = Path(tier_root) / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return fsio.atomic_write(path, json.dumps(body, sort_keys=True).encode(), tmp, replace=replace)


def read_markers(tier_roots: Iterable[Path]) -> list[dict[str, Any]]:
    """Every board marker of these directory tiers, one per board name (newest wins)."""
    found: dict[str, dict[str, Any]] = {}
    for root in tier_roots:
        try:
            names = os.listdir(Path(root) / DIRNAME)
        except OSError:
            continue
        for fname in names:
            if not fname.endswith(".json"):
                continue
            try:
                body = json.loads((Path(root) / DIRNAME / fname).read_bytes())
            except (OSError, ValueError):
                continue
            if not isinstance(body, dict) or not body.get("name"):
                continue
            old = found.get(body["name"])
            if old is None or float(body.get("at") or 0) > float(old.get("at") or 0):
                found[str(body["name"])] = body
    return sorted(found.values(), key=lambda b: str(b["name"]))


def entries_by_board(tier: Any) -> dict[str, dict[str, int]]:
    """{board name: {layer: entries}} over this directory tier's graph and AOTAutograd manifests
    (`pcompile stats`: it reads every manifest anyway). Entries of a CPU target count under
    their machine (x86_64)."""
    counts: dict[str, Counter] = {}
    for key in tier.keys():
        if key.layer not in BOARD_LAYERS:
            continue
        try:
            body = json.loads(fsio.read_without_access(tier.manifest_path(key)))
            name = str(((body.get("inputs") or {}).get("fingerprint") or {}).get("target_name") or "?")
        except (OSError, ValueError, AttributeError, TypeError):
            continue
        counts.setdefault(name, Counter())[key.layer] += 1
    return {name: dict(c) for name, c in sorted(counts.items())}
