"""`pcompile explain A B`: which fingerprint fields or sources make two keys differ."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from pcompile.cli.common import add_common, emit, open_store
from pcompile.errors import PcompileError
from pcompile.keys.explain import diff_inputs
from pcompile.keys.key import Key, KeyInputs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="show why two keys differ (fields of their stored inputs)")
    add_common(p)
    p.add_argument("key_a", help="a key (LAYER-HEX32) or a manifest file")
    p.add_argument("key_b", help="a key (LAYER-HEX32) or a manifest file")
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


def run(args: argparse.Namespace) -> int:
    Key.parse(args.key_a) if not args.key_a.endswith(".json") else None
    Key.parse(args.key_b) if not args.key_b.endswith(".json") else None
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
