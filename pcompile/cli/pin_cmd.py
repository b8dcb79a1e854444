"""`pcompile pin/unpin KEY`: pinned entries survive GC (e.g. a production model's warm set)."""
from __future__ import annotations

import argparse

from pcompile.cli.common import add_common, emit, open_store
from pcompile.errors import PcompileError
from pcompile.keys.key import Key
from pcompile.store.fs_tier import DirectoryTier


def register(sub: argparse._SubParsersAction) -> None:
    for name, helptext in (("pin", "keep entries through GC"), ("unpin", "let GC evict entries again")):
        p = sub.add_parser(name, help=helptext, description=f"{helptext[0].upper()}{helptext[1:]}: "
                           + ("a pinned entry survives `pcompile gc` whatever its age and the budget (a production "
                              "model's warm set)." if name == "pin" else "the entry becomes an ordinary LRU entry again."))
        add_common(p)
        p.add_argument("keys", nargs="+", metavar="KEY")
        p.set_defaults(func=run, pin=(name == "pin"))


def run(args: argparse.Namespace) -> int:
    keys = [Key.parse(k) for k in args.keys]
    store = open_store(args, must_exist=True)
    tiers = [t for t in store.writable_tiers() if isinstance(t, DirectoryTier)]
    for key in keys:
        if not any(t.read_manifest(key) is not None for t in tiers):
            raise PcompileError(f"key {key} is not in this cache; nothing to {'pin' if args.pin else 'unpin'}")
        for tier in tiers:
            (tier.pin if args.pin else tier.unpin)(key)
    emit(args, {"pinned" if args.pin else "unpinned": [str(k) for k in keys]}, f"{'pinned' if args.pin else 'unpinned'} {len(keys)} entries")
    return 0
