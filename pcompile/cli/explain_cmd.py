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
    p = sub.add_parser("explain", help="why a job missed (`explain JOB`), or why two keys differ (`explain A B`)",
                       description="`pcompile explain JOB`: every cache miss of that job (an id or unique prefix "
                                   "from `pcompile report --list`; `last` for the newest), each compared with the "
                                   "newest earlier look-up of the same graph or kernel, the differing key inputs "
                                   "named in words. `pcompile explain A B`: the inputs that make two keys of one "
                                   "layer differ.")
    add_common(p)
    p.add_argument("key_a", metavar="JOB|A", help="a job id, or a key (LAYER-HEX32), a manifest file, or a graph or kernel name as `pcompile report` prints it")
    p.add_argument("key_b", metavar="B", nargs="?", default=None, help="the same kinds of reference as A (omit it to explain a job)")
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


def explain_job(args: argparse.Namespace) -> int:
    from pcompile.cli.common import settings_from
    from pcompile.events._sink import events_dir
    from pcompile.events.misses import LAYER_WORDS, explain_job as misses_of, load_jobs

    job, events, older = load_jobs(events_dir(settings_from(args).cache_dir), None if args.key_a == "last" else args.key_a)
    store = open_store(args, must_exist=False)

    def inputs_of(key: Key) -> KeyInputs | None:
        for tier in store.tiers:
            entry = tier.get(key)
            if entry is not None and entry.inputs is not None:
                return entry.inputs
        return None

    from pcompile.keys import key_details

    cache_dir = settings_from(args).cache_dir
    misses = misses_of(events, older, inputs_of, lambda key: key_details.load(cache_dir, key))
    if not misses:
        text = f"job {job}: no misses"
    else:
        lines = [f"job {job}: {len(misses)} misses"]
        for m in misses:
            lines.append(f"  {LAYER_WORDS.get(m.layer, m.layer)} {m.name}" + (f" ({m.key})" if m.name != m.key else ""))
            lines += [f"      {r}" for r in m.reasons]
        text = "\n".join(lines)
    emit(args, {"job": job, "misses": [m.to_json() for m in misses]}, text)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.key_b is None:  # one reference: a job id (or unique prefix), or `last`
        if args.key_a.split("-", 1)[0] in LAYERS or args.key_a.endswith(".json"):
            raise PcompileError(f"{args.key_a} is a key: `pcompile explain A B` compares two keys, "
                                "`pcompile explain JOB` explains a job's misses")
        return explain_job(args)
    args.key_a, args.key_b = _ref(args, args.key_a), _ref(args, args.key_b)
    store = open_store(args, must_exist=True)
    a, b = _inputs(store, args.key_a), _inputs(store, args.key_b)
    if a.layer != b.layer:
        raise PcompileError(f"{args.key_a} is an {a.layer} key and {args.key_b} a {b.layer} key: keys of different layers "
                            "never match; compare two keys of one layer (`pcompile report --format chrome` lists each "
                            "graph's look-ups per layer)")
    diffs = diff_inputs(a, b)
    if not diffs:
        text = "the two keys have identical inputs"
    else:
        from pcompile.cli.common import settings_from
        from pcompile.keys import key_details
        from pcompile.events.misses import because

        cache_dir = settings_from(args).cache_dir
        text = "\n".join(because(a.layer, diffs, key_details.load(cache_dir, args.key_a), key_details.load(cache_dir, args.key_b)))
    emit(args, {"same": not diffs, "differences": [d.__dict__ for d in diffs]}, text)
    return 0
