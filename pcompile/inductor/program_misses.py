"""Why a job missed a program that the cache holds for the same function, in one line.

Why: a program's key is the function's source identity plus a digest of the `torch.compile`
options, the Dynamo/Inductor/functorch configs and the device, plus the layer fingerprint. A warm
and a GPU job (or two jobs) that differ in any of them miss each other's program silently and
trace, which looks like "programs do nothing" (session 7: a job after a warm on the H200 looked up
another key than the warm stored, and nothing said which part differed). Each program now carries
the parts its key was made of (`parts()`, in its meta); a miss compares them with the programs of
the same function in the node-local store and names what differs (a `program_miss` event and one
warning per function). Only misses pay for this: one directory listing, a few manifest reads.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import xxhash

from pcompile.store import fsio

#: at most this many program manifests are read for one miss (newest first)
MAX_READ = 64


def stable(value: Any) -> Any:
    """As the key's own JSON: sets sorted (their order changes per process), other values by repr."""
    if isinstance(value, (set, frozenset)):
        return sorted(repr(v) for v in value)
    return repr(value)


def _digest(value: Any) -> str:
    return xxhash.xxh3_64_hexdigest(json.dumps(value, sort_keys=True, default=stable).encode())


def parts(fn_name: str, options: dict[str, Any], configs: dict[str, Any], device: dict[str, Any]) -> dict[str, Any]:
    """What one program key was made of, small enough for an entry's meta."""
    out: dict[str, Any] = {"fn": fn_name, "options": _digest(options), "device": device}
    for section, values in sorted(configs.items()):
        out[f"configs.{section}"] = _digest(values)
    return out


def settings(configs: dict[str, Any]) -> dict[str, Any]:
    """Each config section's short digest per setting (`KEYS_SUFFIX` parts), so that a miss names
    the setting, not just "configs.dynamo" (the H200's after-warm miss named only the section:
    hundreds of settings). ~8 ms for torch's ~800 settings: made only for a save or a miss, never
    on a job's look-up."""
    return {f"configs.{section}{KEYS_SUFFIX}": {str(k): _digest(v)[:8] for k, v in values.items()}
            for section, values in sorted(configs.items()) if isinstance(values, dict)}


#: a part holding a config section's per-setting digests (named setting by setting, never as a whole)
KEYS_SUFFIX = ".settings"


def differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """The names of the parts (and fingerprint fields, as `fingerprint.NAME`) that differ; a config
    section both sides kept setting by setting is named as its settings that differ
    (`configs.dynamo.NAME`)."""
    names = sorted((set(mine) | set(theirs)) - {"fn"})
    found: list[str] = []
    for name in names:
        if name.endswith(KEYS_SUFFIX) or mine.get(name) == theirs.get(name):
            continue
        a, b = mine.get(name + KEYS_SUFFIX), theirs.get(name + KEYS_SUFFIX)
        if isinstance(a, dict) and isinstance(b, dict) and a != b:
            found += [f"{name}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        else:
            found.append(name)
    return found


def _manifests(store_root: Path) -> list[Path]:
    """The program layer's manifest files (store/fs_tier.py's layout), newest first; only that layer's
    folder is listed (`DirectoryTier.keys()` walks every layer's, thousands of kernels)."""
    folder = store_root / "manifests" / "program"
    try:
        found = [p for p in folder.rglob("*.json")]
    except OSError:
        return []
    found.sort(key=lambda p: p.stat().st_mtime if p.exists() else 0.0, reverse=True)
    return found[:MAX_READ]


def explain(store_root: Path, sid: str, mine: dict[str, Any], fingerprint: dict[str, str]) -> list[str] | None:
    """What differs from the newest stored program of the same function (`sid`, else the same
    function name), or None when the store holds none of it."""
    mine = {**mine, **{f"fingerprint.{k}": v for k, v in fingerprint.items()}}
    for path in _manifests(store_root):
        try:
            body = json.loads(fsio.read_without_access(path))  # a diagnosis is no use: GC's LRU stays as it was
        except (OSError, ValueError):
            continue
        meta = body.get("meta") or {}
        theirs = dict(meta.get("parts") or {})
        same_source = meta.get("source") == sid
        if not theirs or (not same_source and theirs.get("fn") != mine.get("fn")):
            continue  # another function, or a program saved before parts were kept
        fp = ((body.get("inputs") or {}).get("fingerprint") or {})
        theirs.update({f"fingerprint.{k}": v for k, v in fp.items()})
        found = differences(mine, theirs)
        if not same_source:
            found.insert(0, "source")
        return found
    return None


def report(store_root: Path, sid: str, mine: dict[str, Any], fingerprint: dict[str, str]) -> None:
    """On a program miss: say what differs from the program the cache holds for this function."""
    from pcompile.events import emit
    from pcompile.warn import warn_once

    try:
        found = explain(store_root, sid, mine, fingerprint)
    except Exception:  # a diagnosis never fails a compile
        return
    if found is None:
        return
    emit("program_miss", time.time(), 0.0, fn=str(mine.get("fn")), differs=found)
    what = ", ".join(found) if found else "no recorded part differs"
    warn_once(f"program-miss:{mine.get('fn')}",
              f"pcompile: the cache holds a program of {mine.get('fn')} made under other settings ({what}); "
              "this job traces it with Dynamo (`PCOMPILE_PROGRAMS`)")
