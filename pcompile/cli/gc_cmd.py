"""`pcompile gc`: bring the local (and shared, if writable) tier within budget, LRU first."""
from __future__ import annotations

import argparse

from pcompile import settings
from pcompile.cli.common import add_common, emit, open_store
from pcompile.errors import PcompileError
from pcompile.store.fs_tier import DirectoryTier
from pcompile.store import usage
from pcompile.store.gc import BLOB_GRACE_SECONDS, collect_garbage

def parse_size(text: str) -> int:
    """--max-bytes: the same parser as PCOMPILE_MAX_BYTES (pcompile/settings.py)."""
    try:
        return settings.parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from None
    if value < 0:
        raise argparse.ArgumentTypeError("--max-age must be zero or more days")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gc", help="evict least-recently-used entries down to a budget; pinned entries stay",
                       description="Bring the local tier (and with --shared the shared one) within a size, entry "
                                   "or age budget, least recently used first; pinned entries stay. Also sweeps "
                                   "Inductor's working files and old `pcompile warm` run dirs.")
    add_common(p)
    p.add_argument("--max-bytes", type=parse_size, default=None, help=f"size budget, like 20G (default {settings.MAX_BYTES.name} or {settings.MAX_BYTES.show_default()})")
    p.add_argument("--max-entries", type=int, default=None, help=f"entry budget (default {settings.MAX_ENTRIES.name} or {settings.MAX_ENTRIES.show_default()})")
    p.add_argument("--max-age", type=_days, default=None, help="also drop entries not used for DAYS")
    p.add_argument("--shared", action="store_true", help="also collect the shared tier (run from one node only)")
    p.add_argument("--warm-runs-age", type=_days, default=7.0,
                   help="remove `pcompile warm` run dirs (what warmed scripts wrote) older than DAYS (default 7)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pcompile.cli.common import settings_from
    from pcompile.warm.isolation import sweep_runs

    settings = settings_from(args)
    runs, run_bytes = sweep_runs(settings.cache_dir, args.warm_runs_age)
    run_line = [f"warm runs: removed {runs} run dirs older than {args.warm_runs_age:g} days, freed {run_bytes} bytes"] if runs else []
    if not (settings.cache_dir / "store").exists() and (settings.cache_dir / "warm-runs").exists():  # warm runs only (stock caches)
        emit(args, {"warm-runs": {"runs_removed": runs, "bytes_freed": run_bytes}}, "\n".join(run_line) or "nothing to collect")
        return 0
    store = open_store(args, must_exist=True)
    max_bytes = args.max_bytes if args.max_bytes is not None else store.settings.max_bytes
    max_entries = args.max_entries if args.max_entries is not None else store.settings.max_entries
    results = {}
    for tier in store.tiers:
        if not isinstance(tier, DirectoryTier) or (tier.kind == "shared" and not args.shared):
            continue
        if tier.kind == "shared" and store.settings.read_only:
            raise PcompileError("PCOMPILE_READ_ONLY is set: unset it to collect the shared tier")
        results[tier.name] = collect_garbage(tier, max_bytes=max_bytes, max_entries=max_entries, max_age_days=args.max_age).to_json()
    results["warm-runs"] = {"runs_removed": runs, "bytes_freed": run_bytes}
    lines = run_line + [
        f"{name}: removed {r['entries_removed']} entries and {r['blobs_removed']} blobs, freed {r['bytes_freed']} bytes; "
        f"{r['entries_after']} entries left ({r['pinned_kept']} pinned)"
        for name, r in results.items() if name != "warm-runs"
    ]
    local = results.get(store.local.name)
    if local is not None and max_bytes is not None:
        store_left = usage.du(store.local.root)
        unnamed = usage.store_parts(store.local)["store blobs no entry names (freed by gc after the grace period)"]
        if unnamed:
            lines.append(f"{store.local.name}: kept {unnamed} bytes of blobs no entry names any more: they go at the first gc "
                         f"{BLOB_GRACE_SECONDS / 60:.0f} minutes after their last write (a writer may be re-publishing one)")
        work = store.settings.cache_dir / "inductor"
        freed, young = usage.sweep_working_files(work, max(max_bytes - store_left, 0), BLOB_GRACE_SECONDS)
        results["inductor"] = {"bytes_freed": freed, "bytes_kept_in_grace": young, "bytes_after": usage.du(work)}
        lines.append(f"Inductor/Triton working files ({work}): freed {freed} bytes, {results['inductor']['bytes_after']} left"
                     + (f"; {young} bytes used in the last {BLOB_GRACE_SECONDS / 60:.0f} minutes stay (a running job may "
                        "load them; the store keeps what they were made from)" if young else ""))
    emit(args, results, "\n".join(lines) or "nothing to collect")
    return 0
