"""Options every command shares, and turning them into an open store."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pcompile.config import Settings


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-dir", default=None, help="node-local cache dir (env PCOMPILE_CACHE_DIR, default ~/.cache/pcompile)")
    parser.add_argument("--shared-dir", default=None, help="shared-filesystem tier mounted on every node (env PCOMPILE_SHARED_DIR)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings.from_env(cache_dir=getattr(args, "cache_dir", None), shared_dir=getattr(args, "shared_dir", None))


def open_store(args: argparse.Namespace, must_exist: bool = False, writable: bool = False):
    from pcompile.store.compose import open_store

    return open_store(settings_from(args), must_exist=must_exist, writable=writable)


def emit(args: argparse.Namespace, obj: Any, text: str) -> None:
    if getattr(args, "json", False):
        json.dump(obj, sys.stdout, indent=None, sort_keys=True, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text.rstrip("\n") + "\n")
