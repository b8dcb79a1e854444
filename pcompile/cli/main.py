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


def version_line() -> str:
    """`pcompile 0.1.0 (torch 2.14.1, triton 3.8.0, python 3.11.9)`: read from the installed
    distributions' metadata, so `--version` answers at once and works without torch."""
    from importlib import metadata

    from pcompile import __version__

    def installed(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    python = ".".join(str(p) for p in sys.version_info[:3])
    return f"pcompile {__version__} (torch {installed('torch')}, triton {installed('triton')}, python {python})"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pcompile", description="Compile each torch.compile graph and kernel once for the whole cluster.")
    parser.add_argument("--version", action="version", version=version_line(),
                        help="print pcompile's version (and the torch/triton it finds) and exit")
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
