"""`pcompile profile`: capture a GPU's device profile for warming, or show one."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "profile", help="capture this host's GPU profile for `pcompile warm --target FILE`, or --show one",
        description="On a GPU host: capture the full device profile (cudaDeviceProp, device attributes, driver, "
                    "and the torch/triton/cuDNN/ptxas fingerprint). With --show: print a profile readably.")
    p.add_argument("--out", default=None, help="write the profile here (default: print JSON to stdout)")
    p.add_argument("--board", default=None, help="board name to record (default: derived from the GPU name)")
    p.add_argument("--device", type=int, default=0, help="GPU index to read (default 0)")
    p.add_argument("--show", metavar="FILE", default=None, help="print a profile file (or built-in name: h100, sm_90) readably")
    p.add_argument("--json", action="store_true", help="with --show: print the profile as JSON (capture always writes JSON)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pcompile.vdev.profile import describe, resolve, validate

    if args.show:
        data = resolve(args.show)
        sys.stdout.write((json.dumps(data.data, indent=1, sort_keys=True) if args.json else describe(data)) + "\n")
        return 0
    from pcompile.vdev.capture import capture

    data = capture(args.device, args.board)
    validate(data, "captured profile")
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).write_text(text)
        sys.stdout.write(f"wrote {args.out}: {data['name']} ({data['board']})\n")
    else:
        sys.stdout.write(text)
    return 0
