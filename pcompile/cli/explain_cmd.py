"""`pcompile explain A B`: which fingerprint fields or sources make two keys differ."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from pcompile.cli.common import add_common, emit, open_store
from pcompile.errors import PcompileError
from pcompile.keys.explain import diff_inputs
from pcompile.keys.key import LAYERS, Key, KeyInputs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="show why two keys differ (fields of their stored inputs)")
    add_common(p)
    p.add_argument("key_a", help="a key (LAYER-HEX32), a manifest file, or a graph or kernel name as `pcompile report` prints it")
    p.add_argument("key_b", help="the same kinds of reference")
    p.add_argument("--job", default=None, help="where to look names up (default: the newest job that has them)")
    p.set_defaults(func=run)


def _inputs(store, ref: str) -> KeyInputs:
    if ref.endswith(".json") and Path(ref).is_file():
        try:
            body = json.loads(Path(ref).read_bytes())
            return KeyInputs.from_json(body["inputs"])
        except (ValueError, KeyError, TypeError):
            raise PcompileError(f"{ref} is not a pcompile manifest with stored key inputs") from None
    key = Key.parse(ref)
    for tier in store.tiers:
        entry = tier.get(key)
        if entry is not None and entry.inputs is not None:
            return entry.inputs
    raise PcompileError(f"key {key} is in no tier of this cache: pass --cache-dir/--shared-dir of a cache that holds it")


def _key_of_name(cache_dir: Path, name: str, job: str | None) -> str | None:
    """The store key behind a graph or kernel name that `pcompile report` printed: a kernel's own
    look-up, or the AOTAutograd (else FX graph) look-up made inside that graph's compile."""
    from pcompile.events import analysis, reader
    from pcompile.events._sink import events_dir

    logs = [reader.find_job(events_dir(cache_dir), job)] if job else reader.list_jobs(events_dir(cache_dir))[:20]
    for log in logs:
        events, _bad = reader.load(log.path)
        named = [e for e in events if name in (analysis.display_name(e), e.get("name"), e.get("kernel"))]
        for e in named:
            if e["kind"] in ("cache_lookup", "kernel_compile") and str(e.get("key", "")).count("-") == 1 and not e.get("inner"):
                return str(e["key"])
        ids = {e.get("id") for e in named if e["kind"] == "graph_compile"}
        inside = [e for e in events if e["kind"] == "cache_lookup" and e.get("parent") in ids and not e.get("inner")]
        for layer in ("autograd", "graph"):
            for e in inside:
                if e.get("layer") == layer and e.get("key"):
                    return str(e["key"])
    return None


def _ref(args: argparse.Namespace, ref: str) -> str:
    if ref.endswith(".json") and Path(ref).is_file():
        return ref
    if ref.split("-", 1)[0] in LAYERS:  # meant as a key: a malformed one gets the key's own error
        return str(Key.parse(ref))
    from pcompile.cli.common import settings_from

    found = _key_of_name(settings_from(args).cache_dir, ref, args.job)
    return found if found is not None else str(Key.parse(ref))  # not a name either: the key's error


def run(args: argparse.Namespace) -> int:
    args.key_a, args.key_b = _ref(args, args.key_a), _ref(args, args.key_b)
    store = open_store(args, must_exist=True)
    a, b = _inputs(store, args.key_a), _inputs(store, args.key_b)
    diffs = diff_inputs(a, b)
    if not diffs:
        text = "the two keys have identical inputs"
    else:
        width = max(len(d.field) for d in diffs)
        text = "\n".join(f"{d.field:<{width}}  {d.a!s}  !=  {d.b!s}" for d in diffs)
    emit(args, {"same": not diffs, "differences": [d.__dict__ for d in diffs]}, text)
    return 0
