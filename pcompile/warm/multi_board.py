"""`pcompile warm --target h100,h200`: one warm for every board of a mixed cluster.

Graph and AOTAutograd entries are per board (their keys hold the CUDA device name), so the script
runs once per board, each under a virtual device with that board's profile. Kernels are not: a
Triton kernel's key is its source and arch, and the source holds only the DeviceProperties
Inductor generates for (SM count, compute capability, registers and threads per SM, warp size),
which agree on boards of one arch such as the H100 SXM and the H200 (132 SMs, sm_90). The boards
run one after the other into one cache, so every board after the first loads those kernels
instead of compiling them; the summary says, per board, how many kernels it shared.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from pcompile.errors import PcompileError
from pcompile.vdev.profile import DeviceProfile, resolve, short_name


def split_targets(target: str | None) -> list[str | None]:
    """`--target` as a list: one name, a file, or several, comma-separated (h100,h200)."""
    if target is None or "," not in target or Path(target).is_file():
        return [target]
    names = [t.strip() for t in target.split(",") if t.strip()]
    if not names:
        raise PcompileError("--target is empty; name a board (h100, h200), several (h100,h200) or a profile file")
    return names


def board_label(profile: DeviceProfile) -> str:
    """h100 for a built-in board, else the profile's board (or file) name."""
    from pcompile.warm.runner import builtin

    if builtin(profile):
        return short_name(Path(profile.source).stem)
    return profile.board or profile.source


def resolve_all(targets: list[str | None]) -> list[DeviceProfile]:
    """Every board's profile, before anything runs (a typo in the second fails at once); two
    names for one board (h100,sm_90) warm it once."""
    out: list[DeviceProfile] = []
    for t in targets:
        prof = resolve(t)
        if all(p.name != prof.name for p in out):
            out.append(prof)
    return out


@dataclasses.dataclass
class BoardRun:
    label: str
    profile: DeviceProfile
    result: Any = None  # WarmResult, or None when the warm raised
    error: str = ""

    @property
    def exit_status(self) -> int:
        return self.result.exit_status() if self.result is not None else 1


def run_boards(opts: Any, targets: list[str | None]) -> list[BoardRun]:
    """Warm `opts.script` for each board in turn, into one cache; a board whose warm cannot run
    (a stall, a crash) is reported and the next board still warms."""
    from pcompile.warm.runner import run_warm

    profiles = resolve_all(targets)
    runs: list[BoardRun] = []
    for i, prof in enumerate(profiles):
        label = board_label(prof)
        print(f"pcompile warm: board {i + 1}/{len(profiles)}: {label} ({prof.name}, {prof.arch})", file=sys.stderr, flush=True)
        run = BoardRun(label, prof)
        try:
            run.result = run_warm(dataclasses.replace(opts, target=prof.source, board_label=f"{label} ({i + 1}/{len(profiles)})"))
        except PcompileError as exc:
            run.error = str(exc)
        runs.append(run)
    return runs


def kernel_sharing(runs: list[BoardRun]) -> dict[str, tuple[int, int]]:
    """Per board: (kernel look-ups that hit, kernel look-ups), from its warm's events."""
    out = {}
    for run in runs:
        looked = getattr(run.result, "lookups", None) or {}
        row = looked.get("kernel") or {}
        out[run.label] = (int(row.get("hits", 0)), int(row.get("lookups", 0)))
    return out


def summary_lines(runs: list[BoardRun]) -> list[str]:
    """One line per board: its outcome, what it wrote, and the kernels it shared with the boards
    before it (a kernel hit in a board after the first is a kernel an earlier board compiled)."""
    out = [f"boards: {len(runs)} warmed into one cache, one after the other (graph entries per board, kernels shared by source)"]
    shared = kernel_sharing(runs)
    for i, run in enumerate(runs):
        r = run.result
        if r is None:
            out.append(f"  {run.label} ({run.profile.name}): FAILED: {run.error}")
            continue
        w = r.written
        state = "FAILED" if r.failed else "ok"
        hit, n = shared[run.label]
        kern = (f"; kernels: {hit}/{n} loaded from the boards before it" if i and n else
                f"; kernels: {n} looked up" if n else "")
        out.append(f"  {run.label} ({run.profile.name}, {run.profile.arch}): {state} in {r.seconds:.1f}s, "
                   f"written {w.get('fxgraph', 0)} FX graph, {w.get('aotautograd', 0)} AOTAutograd entries, "
                   f"{w.get('triton', 0)} Triton cubins{kern}")
    return out


def exit_status(runs: list[BoardRun]) -> int:
    """0 when every board warmed, else the first failed board's status."""
    return next((run.exit_status for run in runs if run.exit_status), 0)
