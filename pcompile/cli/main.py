"""`pcompile` entry point: dispatch to one module per command; user errors are one line, exit 2."""
from __future__ import annotations

import argparse
import importlib
import sys

from pcompile.cli.commands import COMMAND_MODULES
from pcompile.errors import PcompileError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        sys.stderr.write(f"pcompile: error: {message} (see `pcompile --help`)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pcompile", description="Compile each torch.compile graph and kernel once for the whole cluster.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(f"pcompile.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        from pcompile.events import job_id

        job_id()  # fix the job id now, so every child (warm, pool workers) logs into one job
    except Exception:
        pass
    try:
        return int(args.func(args) or 0)
    except PcompileError as exc:
        sys.stderr.write(f"pcompile: error: {exc}\n")
        return exc.exit_code
    except OSError as exc:  # an environment problem, not a bug: say which file and why
        where = f" ({exc.filename})" if exc.filename else ""
        sys.stderr.write(f"pcompile: error: {exc.strerror or exc}{where}: check the path and its permissions\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("pcompile: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
