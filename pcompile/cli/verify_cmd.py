"""`pcompile verify`: re-hash every entry; exit 1 if any is bad; --fix quarantines them."""
from __future__ import annotations

import argparse
import itertools

from pcompile.cli.common import add_common, emit, open_store

REMOTE_SAMPLE = 200


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check every entry's hashes (and signatures); exit 1 on a bad one",
                       description="Re-hash every entry of every tier (a sample of a remote one) and check its "
                                   "signature where signing is on; exit 1 if any is bad. --fix quarantines bad "
                                   "entries, so the next job recompiles them.")
    add_common(p)
    p.add_argument("--fix", action="store_true", help="quarantine bad entries so they are recompiled")
    p.add_argument("--all", action="store_true", help=f"check every remote entry, not a sample of {REMOTE_SAMPLE}")
    p.set_defaults(func=run)


def _keys_of(tier, check_all: bool):
    if tier.kind == "remote" and not check_all:
        sample = getattr(tier, "sample_keys", None)
        return list(sample(REMOTE_SAMPLE)) if sample else list(itertools.islice(tier.keys(), REMOTE_SAMPLE))
    return list(tier.keys())


def run(args: argparse.Namespace) -> int:
    store = open_store(args, must_exist=True)
    bad: list[dict[str, str]] = []
    checked = 0
    for tier in store.tiers:
        keys = _keys_of(tier, args.all)
        with _progress(len(keys), f"verify {tier.name}") as bar:
            for key in keys:
                problem = tier.verify(key)
                checked += 1
                if problem:
                    bad.append({"tier": tier.name, "key": str(key), "problem": problem})
                    if args.fix:
                        tier.quarantine(key, problem, tier.bad_blob_of(key))
                bar.advance(1)
    lines = [f"BAD {b['tier']} {b['key']}: {b['problem']}" for b in bad]
    verdict = "quarantined" if args.fix else "found"
    lines.append(f"checked {checked} entries: {len(bad)} bad{f' ({verdict})' if bad else ''}")
    emit(args, {"checked": checked, "bad": bad, "fixed": bool(args.fix and bad)}, "\n".join(lines))
    return 1 if bad else 0


class _NoProgress:
    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass


def _progress(total: int, desc: str):
    try:
        from pcompile.progress import progress
    except ImportError:
        return _NoProgress()
    return progress(total, desc)
