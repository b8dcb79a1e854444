"""`pcompile stats`: did it hit, what did it save. The --json shape is a contract other tools read."""
from __future__ import annotations

import argparse
from typing import Any

from pcompile.cli.common import add_common, emit, open_store
from pcompile.store import boards, hits, usage
from pcompile.store.stats import collect

RECENT_JOBS = 3

_REMOTE_COUNTERS = ("fetches", "dropped_writes", "skipped", "timeouts", "untrusted", "errors")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stats", help="entries, bytes, hits and misses per layer and tier, time spent and saved",
                       description="What the cache holds and what it did: the newest jobs' look-ups per layer, hits "
                                   "and misses per layer and tier since the cache was made (or last zeroed), compile "
                                   "seconds spent and saved, and every byte under the cache dir by what keeps it.")
    add_common(p)
    p.add_argument("--zero", action="store_true",
                   help="zero the counters (hits, misses, compile and saved seconds); entries and job event logs stay")
    p.set_defaults(func=run)


def gather(args: argparse.Namespace) -> dict[str, Any]:
    store = open_store(args, must_exist=False)
    counters = collect(store.settings.cache_dir / "stats")
    tiers: dict[str, Any] = {}
    for tier in store.tiers:
        entries, size = tier.usage()
        info = dict(counters["tiers"].get(tier.name, {}))
        info.update({"kind": tier.kind, "entries": entries, "bytes": size})
        for name in ("hits", "misses", "bytes_read", "bytes_written", "errors"):
            info.setdefault(name, 0)
        reads = info["hits"] + info["misses"]
        info["mean_read_ms"] = round(1000 * info.get("read_seconds", 0.0) / reads, 3) if reads else 0.0
        tiers[tier.name] = info
    local = tiers[store.local.name]
    disk = usage.breakdown(store.settings.cache_dir, store.local)
    return {
        "entries": local["entries"],
        "bytes": local["bytes"],
        "compiles": counters["compiles"],
        "compile_seconds": round(counters["compile_seconds"], 3),
        "saved_seconds": round(counters["saved_seconds"], 3),
        "quarantined": counters["quarantined"],
        "untrusted": counters.get("untrusted", 0),
        "write_errors": counters["write_errors"],
        "lease_waits": counters["lease_waits"],
        "layers": hits.table(counters["layers"]),
        "tiers": tiers,
        "cache_dir": str(store.settings.cache_dir),
        "disk": disk,
        "disk_bytes": sum(disk.values()),
        "recent_jobs": recent_jobs(store.settings.cache_dir),
        "boards": boards.entries_by_board(store.local) if getattr(store.local, "root", None) else {},
    }


def recent_jobs(cache_dir: Any, n: int = RECENT_JOBS) -> list[dict[str, Any]]:
    """The newest jobs' look-ups per layer, counted from their event logs as `report` counts them."""
    from pcompile.events import analysis, reader
    from pcompile.events._sink import events_dir

    out = []
    for log in reader.list_jobs(events_dir(cache_dir))[:n]:
        try:
            events, _bad = reader.load(log.path)
        except OSError:
            continue
        procs = [e for e in events if e.get("kind") == "process"]
        layers = hits.from_events(events)
        hit, total = hits.totals(layers)
        out.append({"job": log.job, "script": analysis.job_script(sorted(procs, key=lambda e: e["ts"])), "mtime": log.mtime,
                    "boards": analysis.job_boards(events),
                    "layers": layers, "lookups": total, "hits": hit, "all_hit": hits.all_hit(layers)})
    return out


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def zero_counters(args: argparse.Namespace) -> int:
    """`stats --zero`: the counters start again from nothing; entries and event logs stay."""
    import time

    from pcompile.cli.common import settings_from
    from pcompile.store.stats import zero

    directory = settings_from(args).cache_dir / "stats"
    done = zero(directory)
    text = f"statistics zeroed in {directory} ({time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(done['zeroed_at']))})"
    if done["live_pids"]:
        text += (f"; {len(done['live_pids'])} running process(es) (pid {', '.join(map(str, done['live_pids']))}) "
                 "still hold counts and write them again at their next flush")
    emit(args, dict(done, stats_dir=str(directory)), text)
    return 0


def _since(cache_dir: Any) -> str:
    import time
    from pathlib import Path

    from pcompile.store.stats import zeroed_at

    when = zeroed_at(Path(cache_dir) / "stats")
    return f"since `pcompile stats --zero` at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(when))}" if when else "since the cache was made"


def run(args: argparse.Namespace) -> int:
    if args.zero:
        return zero_counters(args)
    data = gather(args)
    lines = [
        f"cache dir       {data['cache_dir']}  ({_human(data['disk_bytes'])} in all)",
        f"entries         {data['entries']} ({_human(data['disk']['store entries'])})",
        f"compiles        {data['compiles']} ({data['compile_seconds']:.1f} s compiling, {data['saved_seconds']:.1f} s saved by hits)",
    ]
    if data["recent_jobs"]:
        lines.append("newest jobs     cache look-ups per layer (as `pcompile report` and the warm summary count them)")
        for j in data["recent_jobs"]:
            board = f" [{', '.join(j['boards'])}]" if j["boards"] else ""
            lines.append(f"  {j['job']}  {j['script'] or '?'}{board}: {hits.summary(j['layers'])}")
    if data["boards"]:
        lines.append("boards          graph entries per board (kernels are shared by boards whose kernel sources agree)")
        for name, n in data["boards"].items():
            lines.append(f"  {name}: {n.get('graph', 0)} FX graph, {n.get('autograd', 0)} AOTAutograd")
    lines.append(f"layer           hits   misses  hit rate   (all jobs {_since(data['cache_dir'])})")
    for layer, c in data["layers"].items():
        rate = f"{100 * c['rate']:5.1f}%" if c["rate"] is not None else "    -"
        notes = [hits.untimed_words(c)] if c["untimed"] else []
        lines.append(f"  {layer:<13} {c['hits']:>5} {c['misses']:>8}  {rate}" + (f"   {'; '.join(notes)}" if notes else ""))
    lines.append("tier            entries   bytes       hits   misses  mean read")
    for name, t in data["tiers"].items():
        lines.append(f"  {name:<13} {t['entries']:>7}   {_human(t['bytes']):<10} {t['hits']:>5} {t['misses']:>8}  {t['mean_read_ms']:.2f} ms")
        extra = [f"{t[c]} {c.replace('_', ' ')}" for c in _REMOTE_COUNTERS if t.get(c)]
        if extra:
            lines.append(f"  {'':<13} " + ", ".join(extra))
    lines.append("disk            (every byte under the cache dir)")
    for name, size in data["disk"].items():
        lines.append(f"  {_human(size):>10}  {name}")
    if data["quarantined"] or data["write_errors"] or data["untrusted"]:
        lines.append(f"problems        {data['quarantined']} quarantined, {data['untrusted']} untrusted, {data['write_errors']} failed writes")
    emit(args, data, "\n".join(lines))
    return 0
