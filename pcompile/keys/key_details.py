"""What a graph key was made of, in words: Inductor's description of each FX graph / AOTAutograd
key (compat/key_details.py), saved beside the cache at a miss, and the differences between two.

Why beside the cache, not in the entry: the description is ~70 KB per graph (every config value
the key covers); the store's manifests are read on every hit. Saved once per missed key under
<cache>/key-details/, gzipped; `pcompile explain` reads it when it holds both sides.
"""
from __future__ import annotations

import collections
import gzip
import json
import os
import re
import threading
from pathlib import Path

_MAX_KEPT = 512
_lock = threading.Lock()
_recent: "collections.OrderedDict[str, list[str]]" = collections.OrderedDict()


def record(inductor_key: str, lines: list[str]) -> None:
    """Remember Inductor's lines for a key just computed (the last few hundred per process)."""
    with _lock:
        _recent[inductor_key] = lines
        _recent.move_to_end(inductor_key)
        while len(_recent) > _MAX_KEPT:
            _recent.popitem(last=False)


def path(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / "key-details" / f"{key}.json.gz"


def save(cache_dir: Path, key: str, inductor_key: str) -> None:
    """At a miss of `key` (pcompile's) for `inductor_key`: write its description if known and new (never raises)."""
    with _lock:  # the remote-cache key wraps Inductor's: `pt2:fx-graph-v1::<key>:c1`
        lines = _recent.get(inductor_key) or next((v for k, v in reversed(_recent.items()) if k in inductor_key), None)
    if not lines:
        return
    try:
        target = path(cache_dir, key)
        if target.exists():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(gzip.compress(json.dumps(lines).encode(), compresslevel=6))
        os.replace(tmp, target)
    except OSError:
        pass


def load(cache_dir: Path, key: str) -> list[str] | None:
    try:
        return list(json.loads(gzip.decompress(path(cache_dir, key).read_bytes())))
    except (OSError, ValueError, EOFError):
        return None


_LINE = re.compile(r"\[(\w+)\] ([^:]+?): (.*)", re.S)
_TENSOR = re.compile(r"(\w+)=(torch\.Size\(\[[^\]]*\]\)|\([^)]*\)|[^,()]+)")


def fields(lines: list[str]) -> dict[str, tuple[str, str]]:
    """{field: (hash, value)} from Inductor's "[hash] field: value" lines."""
    out = {}
    for line in lines:
        m = _LINE.match(line)
        if m:
            out[m.group(2).strip()] = (m.group(1), m.group(3).strip())
    return out


def _tensor(value: str) -> dict[str, str]:
    """The readable parts of a TensorMetadata repr: dtype, shape, stride, requires_grad, device."""
    parts = {k: v.strip() for k, v in _TENSOR.findall(value)}
    if "shape" in parts:
        parts["shape"] = parts["shape"].replace("torch.Size(", "").rstrip(")")
    return {k: parts[k] for k in ("shape", "dtype", "stride", "requires_grad", "device") if k in parts}


def _short(text: str, n: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


_INPUT = re.compile(r"example_inputs\[(\d+)\]")


def describe(a: list[str], b: list[str]) -> list[str]:
    """Each differing part of two keys' descriptions, in words: `input 2: shape [8, 16] -> [8, 24]`,
    `Inductor config max_autotune: False -> True`, `the graph's code changed (3 lines)`."""
    fa, fb = fields(a), fields(b)
    out = []
    for name in sorted(set(fa) | set(fb), key=lambda n: (not _INPUT.search(n), n != "gm", n)):
        ha, va = fa.get(name, ("", "(none)"))
        hb, vb = fb.get(name, ("", "(none)"))
        if ha == hb:
            continue
        m = _INPUT.search(name)
        if m and "TensorMetadata" in va + vb:
            ta, tb = _tensor(va), _tensor(vb)
            changed = [f"{k} {ta.get(k, '?')} -> {tb.get(k, '?')}" for k in ("shape", "dtype", "stride", "requires_grad", "device")
                       if ta.get(k) != tb.get(k)]
            out.append(f"input {m.group(1)}: " + (", ".join(changed) if changed else "tensor metadata changed"))
        elif name in ("gm", "mod", "module"):
            la, lb = va.splitlines(), vb.splitlines()
            diff = [(x, y) for x, y in zip(la, lb) if x != y]
            first = f": `{_short(diff[0][0].strip(), 60)}` -> `{_short(diff[0][1].strip(), 60)}`" if diff else ""
            n = len(diff) + abs(len(la) - len(lb))
            out.append(f"the graph's code changed ({n} line{'s' if n != 1 else ''}){first}")
        elif name.startswith(("inductor_config[", "fx_kwargs[", "inductor_config_comms[", "config[", "aot_config")):
            label = {"inductor_config": "Inductor config", "fx_kwargs": "compile option", "inductor_config_comms": "Inductor comms config"}.get(name.split("[", 1)[0], name.split("[", 1)[0])
            key = name.split("[", 1)[1].rstrip("]") if "[" in name else name
            out.append(f"{label} {key}: {_short(va)} -> {_short(vb)}")
        else:
            out.append(f"{name}: {_short(va)} -> {_short(vb)}")
    return out
