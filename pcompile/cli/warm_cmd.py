"""`pcompile warm SCRIPT`: compile a training script's graphs and kernels on a host with no GPU."""
from __future__ import annotations

import argparse
import json
import shlex
import sys

from pcompile.cli.common import add_common


def _steps(value: str) -> int:
    """'all' is 0: no step limit."""
    if value == "all":
        return 0
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps takes a number of steps or 'all', not {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError("--steps must be at least 1 (or 'all' to run the script to its end)")
    return n


def _add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=None, help="device profile: built-in name (h100, h200, sm_90; default h100) or a file from "
                                                 "`pcompile profile`; several, comma-separated (h100,h200), warm each board of a mixed cluster")
    p.add_argument("--steps", type=_steps, default=2,
                   help="training steps to run (default 2: step 2 catches recompiles), or 'all': the script runs to its "
                        "end, so graphs that only run later (an eval at the end of an epoch, a last short batch) are warmed too")
    p.add_argument("--world-size", type=int, default=0, help="run as rank 0 of W with a fake process group and W virtual GPUs (torchrun-style scripts: DDP, FSDP2)")
    p.add_argument("--ranks", default="0", help="with --world-size: which ranks to run, 'all' or e.g. 0,3 (rank 0 fills the caches every rank loads; "
                        "each rank run also writes that rank's Dynamo programs, so 'all' lets no rank trace)")
    p.add_argument("--check", action="store_true", help="also report what fraction of lookups hit before this run")
    p.add_argument("--strict", action="store_true", help="fail if a native kernel launches while Inductor compiles")
    p.add_argument("--timeout", type=float, default=None, help="give up after this many seconds")
    add_common(p)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "warm", help="fill the caches for a training script on a CPU-only host (virtual GPU)",
        usage="pcompile warm SCRIPT [--target PROFILE] [--steps N] [--world-size W [--ranks all]] [--check] [-- SCRIPT ARGS]",
        description="Run an unchanged training script on fake tensors under a compile-only virtual GPU, so its "
                    "FX graph, AOTAutograd and Triton cache entries exist before the GPU job starts.")
    _add_options(p)
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="SCRIPT ...", help="the training script, options, then -- and its arguments")
    p.set_defaults(func=run)


def split_rest(args: argparse.Namespace) -> tuple[str, list[str]]:
    """Options may follow SCRIPT (argparse stops at the first positional): parse them here."""
    from pcompile.errors import PcompileError

    rest = list(args.rest)
    script_args: list[str] = []
    if "--" in rest:
        i = rest.index("--")
        rest, script_args = rest[:i], rest[i + 1:]
    inner = argparse.ArgumentParser(prog="pcompile warm", add_help=False)
    _add_options(inner)
    inner.add_argument("script")
    inner.set_defaults(**{k: v for k, v in vars(args).items() if k not in ("rest", "func")})
    ns, unknown = inner.parse_known_args(rest)
    if unknown:
        raise PcompileError(f"unrecognized arguments {' '.join(unknown)}; put the script's own arguments after --")
    for k, v in vars(ns).items():
        setattr(args, k, v)
    return ns.script, script_args


def run(args: argparse.Namespace) -> int:
    from pcompile.warm.report import report_lines as lines
    from pcompile.warm.runner import WarmOptions, run_warm

    if not args.rest:
        from pcompile.errors import PcompileError

        raise PcompileError("name the training script: pcompile warm SCRIPT [options] [-- script args]")
    script, script_args = split_rest(args)
    opts = WarmOptions(
        script=script, script_args=script_args, target=args.target, steps=args.steps,
        world_size=args.world_size, ranks=args.ranks, strict=args.strict, check=args.check, cache_dir=args.cache_dir,
        shared_dir=args.shared_dir, timeout=args.timeout, command="pcompile " + shlex.join(sys.argv[1:]))
    from pcompile.warm import multi_board

    targets = multi_board.split_targets(args.target)
    if len(targets) > 1:
        return _run_boards(args, opts, targets)
    result = run_warm(opts)
    if args.json:
        json.dump({"exit_code": result.exit_code, "seconds": result.seconds, "written": result.written,
                   "report": result.report, "lookups": result.lookups, "job": result.job, "worker_vdev": result.worker_vdev, "profile": result.profile.board, "lines": lines(result, check=args.check)},
                  sys.stdout, default=str)
        sys.stdout.write("\n")
    else:
        for line in lines(result, check=args.check):
            sys.stdout.write(line + "\n")
    if result.failed and args.json:  # the text summary's first line already says it: once
        sys.stderr.write(f"pcompile: error: {result.report.get('error') or 'warm failed'}\n")
    return result.exit_status()


def _run_boards(args: argparse.Namespace, opts: object, targets: list) -> int:
    """`--target h100,h200`: each board's summary under its name, then one line per board."""
    from pcompile.warm import multi_board
    from pcompile.warm.report import report_lines as lines

    runs = multi_board.run_boards(opts, targets)
    per_board = [(run, [f"error: {run.error}"] if run.result is None else lines(run.result, check=args.check)) for run in runs]
    summary = multi_board.summary_lines(runs)
    if args.json:
        boards = [{"board": run.label, "name": run.profile.name, "exit_code": run.exit_status, "error": run.error or None,
                   **({"seconds": run.result.seconds, "written": run.result.written, "lookups": run.result.lookups,
                       "job": run.result.job} if run.result is not None else {}), "lines": text}
                  for run, text in per_board]
        json.dump({"exit_code": multi_board.exit_status(runs), "boards": boards, "lines": summary}, sys.stdout, default=str)
        sys.stdout.write("\n")
    else:
        for run, text in per_board:
            sys.stdout.write(f"== {run.label}: {run.profile.name} ==\n")
            for line in text:
                sys.stdout.write(line + "\n")
        for line in summary:
            sys.stdout.write(line + "\n")
    return multi_board.exit_status(runs)
