"""A restarted job, stock beside pcompile (issue 33), on the GPU machine.

    python benchmarks/corpus_restart.py [--cases nanogpt_train] [--pairs 3] [--steps 2] [--out DIR]

Per case: the case's data setup once; one cold run of each side (`--sides`) fills its own cache
dirs (stock: Inductor's local caches; pcompile: its store; programs: its store, programs included); then `--pairs` rounds of a hot
restart of each side on those dirs, the order reversed every other round. Each run is
`corpus_probe.py`, so "first step" is process start to the end of the first training step (the
issue's process-wall figure) and `frames` is how many frames Dynamo converted. Prints a markdown
row per side (medians, ratio to stock hot, losses equal?) and writes DIR/restart.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus_bench as cb  # noqa: E402
from corpus_cold import PHASES, run_cases  # noqa: E402

SIDES = {"stock": {"PCOMPILE_DISABLE": "1"}, "pcompile": {"PCOMPILE": "1"},
         "programs": {"PCOMPILE": "1", "PCOMPILE_PROGRAMS": "1"}}


def _probe(case: dict[str, Any], a: argparse.Namespace, root: Path, d: Path, label: str, extra: dict[str, str],
           run: Path) -> dict[str, Any]:
    cwd, ranks, base, args = root / case.get("cwd", "."), cb._ranks(case), cb._base_env(case), cb._case_args(case, a.small)
    env = dict(base, **extra, PCOMPILE_CACHE_DIR=str(d / "pc"), TORCHINDUCTOR_CACHE_DIR=str(d / "ind"),
               TRITON_CACHE_DIR=str(d / "ind" / "triton"))
    run.mkdir(parents=True, exist_ok=True)
    out = run / "probe.json"
    rc, wall = cb._run(cb.job_cmd(case, ranks, out, a.steps, args, root), env, cwd, run / "log.txt", a.timeout)
    r = json.loads(out.read_text()) if out.exists() else {}
    got = {"rc": rc, "wall_s": round(wall, 2), "first_step_s": r.get("first_step_s"), "frames": r.get("frames"),
           "fx": r.get("fx"), "aot": r.get("aot"), "losses": (r.get("losses") or [])[:3],
           "phases_s": {name: (r.get("phases_s") or {}).get(key) for name, key in PHASES}}
    print(f"  {case['name']} {label} {run.name}: rc {rc}, first step {r.get('first_step_s')}, frames {r.get('frames')}",
          file=sys.stderr, flush=True)
    return got


def run_case(case: dict[str, Any], work: Path, a: argparse.Namespace, root: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"case": case["name"], "cold": {}, "runs": {}}
    if case.get("setup"):
        setup = [sys.executable if x == "python" else x for x in str(case["setup"]).split()] + ([] if a.small else ["--full"])
        rc, _ = cb._run(setup, dict(cb._base_env(case)), root / case.get("cwd", "."), work / "setup.log", a.timeout)
        if rc:
            res["error"] = f"setup failed ({rc})"
            return res
    sides = [(label, SIDES[label]) for label in a.sides.split(",")]
    for label, extra in sides:
        res["cold"][label] = _probe(case, a, root, work / label, label, extra, work / label / "cold")
    for i in range(a.pairs):
        for label, extra in (sides if i % 2 == 0 else sides[::-1]):
            res["runs"].setdefault(label, []).append(_probe(case, a, root, work / label, label, extra, work / label / f"hot-{i}"))
    return res


def _med(runs: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return round(statistics.median(vals), 2) if vals else None


def rows(res: dict[str, Any]) -> list[str]:
    runs = res.get("runs") or {}
    stock = _med(runs.get("stock", []), "first_step_s")
    ref = (res.get("cold", {}).get("stock") or {}).get("losses")
    out = []
    for label, rs in runs.items():
        first = _med(rs, "first_step_s")
        ratio = round(first / stock, 3) if first and stock else None
        same = all(r.get("losses") == ref for r in rs) if ref else None
        out.append(f"| {res['case']} | {label} hot | {len(rs)} | {first} | {ratio} | "
                   f"{[r['first_step_s'] and round(r['first_step_s'], 2) for r in rs]} | "
                   f"{[r.get('frames') for r in rs]} | {rs[-1].get('fx')} {rs[-1].get('aot')} | {same} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="nanogpt_train")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--sides", default="stock,pcompile",
                    help=f"comma-separated, stock first, of {','.join(SIDES)} (programs: PCOMPILE_PROGRAMS=1 on its own dirs)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--small", action="store_true", help="CI-size arguments (checks the harness, measures nothing)")
    ap.add_argument("--out", default="/tmp/corpus-restart")
    ap.add_argument("--cases-file", default=str(cb.CORPUS / "cases.json"))
    a = ap.parse_args()
    header = ("| case | run | n | first step from process start, s (median) | / stock hot | each | frames converted | "
              "FX AOT hits | losses = stock cold's |")
    return run_cases(a, header, run_case, rows, "restart.json")


if __name__ == "__main__":
    sys.exit(main())
