"""`pcompile config`: every effective setting and where its value came from.

pcompile reads no config file: a setting comes from a command-line flag (`--cache-dir`,
`--shared-dir`), else its `PCOMPILE_*` environment variable, else its default. A variable set to
text pcompile cannot use falls back to the default (the job says so once on stderr); this command
shows that case as its own source, so a typo is visible before a job runs.
"""
from __future__ import annotations

import argparse
import os
import re
from typing import Any

from pcompile.cli.common import add_common, emit

from pcompile import settings as _settings

#: the flags of add_common that override a variable, by variable name
_FLAGS = {_settings.CACHE_DIR.name: "cache_dir", _settings.SHARED_DIR.name: "shared_dir"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="every effective setting and where it came from (flag, environment, default)",
                       description="List every PCOMPILE_* setting with its effective value and its source: a "
                                   "command-line flag, the environment, or the default (also when the environment "
                                   "holds a value pcompile cannot use). pcompile reads no config file.")
    add_common(p)
    p.add_argument("--all", action="store_true", help="also list internal variables (set by pcompile for its own child processes)")
    p.set_defaults(func=run)


def _redact(name: str, text: str) -> str:
    """Never print a password of a remote URL."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", text) if name == _settings.REMOTE.name else text


def effective(args: argparse.Namespace, show_internal: bool = False) -> list[dict[str, Any]]:
    from pcompile import settings

    rows = []
    for var in settings.REGISTRY.values():
        if var.internal and not show_internal:
            continue
        flag = _FLAGS.get(var.name)
        flag_value = getattr(args, flag, None) if flag else None
        raw = var.raw()
        if flag_value:
            value, source = flag_value, f"flag --{flag.replace('_', '-')}"
        elif raw is None:
            value, source = var.show_default(), "default"
        else:
            try:
                value, source = var.kind.show(var.kind.parse(raw)), "environment"
            except ValueError as exc:
                value, source = var.show_default(), f"default ({var.name}={raw!r} {exc})"
        rows.append({"name": var.name, "value": _redact(var.name, str(value)), "source": source,
                     "internal": var.internal, "doc": var.doc})
    return rows


def run(args: argparse.Namespace) -> int:
    from pcompile import settings

    rows = effective(args, args.all)
    unknown = sorted(n for n in os.environ if n.startswith("PCOMPILE_") and n not in settings.REGISTRY)
    width = max(len(r["name"]) for r in rows)
    vwidth = min(max(len(r["value"]) for r in rows), 40)
    lines = ["setting" + " " * (width - 5) + "value" + " " * (vwidth - 3) + "source  (no config file: flags, then environment, then defaults)"]
    lines += [f"{r['name']:<{width}}  {r['value']:<{vwidth}}  {r['source']}" for r in rows]
    for name in unknown:
        removed = settings.REMOVED.get(name)
        lines.append(f"{name}: set but " + (f"removed ({removed.why}); it has no effect" if removed else "not a pcompile setting (a typo?); ignored"))
    emit(args, {"settings": rows, "unknown": unknown, "config_file": None}, "\n".join(lines))
    return 0
