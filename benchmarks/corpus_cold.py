"""Cold first step of the corpus's public scripts, stock beside pcompile (issue 24), on the GPU machine.

    python benchmarks/corpus_cold.py [--cases a,b] [--pairs 3] [--steps 3] [--variant LABEL:K=V[,K=V]] [--out DIR]

Per case: the case's data setup once, then `--pairs` rounds of stock cold and pcompile cold (and each
`--variant`: pcompile cold with those settings), every run in fresh cache dirs, the order reversed in
every other round so both see the host alike. Each run is `corpus_probe.py`: first step from process start, torch's
own phase timers (Dynamo, AOTAutograd, Inductor lowering, Triton compile waits) and CPU-seconds of the
process and its reaped children. Prints a markdown row per case (medians of the pairs, the ratio of
medians, start-up = first step minus torch's compile time) and writes DIR/cold.json with every run.
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

#: torch's own phase timers worth a column (names as in torch._dynamo.utils.compilation_time_metrics)
PHASES = (("dynamo", "_compile.compile_inner"), ("backend", "OutputGraph.call_user_compiler"),
          ("aot", "create_aot_dispatcher_function"), ("lowering", "GraphLowering.compile_to_module"),
          ("kernel waits", "async_compile.wait"), ("bw compile", "compile_fx.<locals>.bw_compiler"))


def _variant(text: str) -> tuple[str, dict[str, str]]:
    label, _, assigns = text.partition(":")
    env = dict(part.split("=", 1) for part in assigns.split(",") if "=" in part)
    if not label or not env:
        raise SystemExit(f"--variant {text!r}: write LABEL:NAME=VALUE[,NAME=VALUE]")
    return label, env


def run_case(case: dict[str, Any], work: Path, a: argparse.Namespace, root: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    cwd, ranks, base, args = root / case.get("cwd", "."), cb._ranks(case), cb._base_env(case), cb._case_args(case, a.small)
    res: dict[str, Any] = {"case": case["name"], "ranks": ranks or 1, "runs": {}}
    if case.get("setup"):
        setup = [sys.executable if x == "python" else x for x in str(case["setup"]).split()] + ([] if a.small else ["--full"])
        rc, _ = cb._run(setup, dict(base), cwd, work / "setup.log", a.timeout)
        if rc:
            res["error"] = f"setup failed ({rc})"
            return res
    kinds = [("stock", {"PCOMPILE_DISABLE": "1"}), ("pcompile", {"PCOMPILE": "1"})]
    kinds += [(label, dict(env, PCOMPILE="1")) for label, env in a.variants]
    for i in range(a.pairs):
        # Odd rounds run in reverse order (stock last), so neither side always finds the host
        # as the other just left it (page cache, clocks, the other's exiting children).
        for label, extra in (kinds if i % 2 == 0 else kinds[::-1]):
            d = work / f"{label}-{i}"
            env = dict(base, **extra, PCOMPILE_CACHE_DIR=str(d / "pc"), TORCHINDUCTOR_CACHE_DIR=str(d / "ind"),
                       TRITON_CACHE_DIR=str(d / "ind" / "triton"))
            if a.stacks:
                env["PROBE_STACKS"] = str(d / "stacks.txt")
            d.mkdir(parents=True, exist_ok=True)
            out = d / "probe.json"
            rc, wall = cb._run(cb.job_cmd(case, ranks, out, a.steps, args, root), env, cwd, d / "log.txt", a.timeout)
            r = json.loads(out.read_text()) if out.exists() else {}
            res["runs"].setdefault(label, []).append({
                "rc": rc, "wall_s": round(wall, 2), "first_step_s": r.get("first_step_s"), "fx": r.get("fx"),
                "aot": r.get("aot"), "cpu_s": r.get("cpu_s"), "losses": (r.get("losses") or [])[:3],
                "phases_s": {name: (r.get("phases_s") or {}).get(key) for name, key in PHASES}})
            print(f"  {case['name']} {label} #{i}: rc {rc}, first step {r.get('first_step_s')}", file=sys.stderr, flush=True)
    return res


def _med(runs: list[dict[str, Any]], get: Any) -> float | None:
    vals = [v for v in (get(r) for r in runs) if isinstance(v, (int, float))]
    return round(statistics.median(vals), 2) if vals else None


def rows(res: dict[str, Any]) -> list[str]:
    runs = res.get("runs") or {}
    stock = _med(runs.get("stock", []), lambda r: r["first_step_s"])
    out = []
    for label, rs in runs.items():
        first = _med(rs, lambda r: r["first_step_s"])
        ratio = round(first / stock, 3) if first and stock else None
        cpu = _med(rs, lambda r: (r.get("cpu_s") or {}).get("self"))
        phases = " ".join(f"{k} {_med(rs, lambda r, k=k: r['phases_s'].get(k))}" for k, _ in PHASES)
        fx, aot = (rs[-1].get("fx") or ["?", "?"]), (rs[-1].get("aot") or ["?", "?"])
        out.append(f"| {res['case']} | {label} | {len(rs)} | {first} | {ratio} | "
                   f"{[r['first_step_s'] and round(r['first_step_s'], 1) for r in rs]} | {cpu} | {phases} | "
                   f"{fx[0]}/{fx[1]} {aot[0]}/{aot[1]} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="nanogpt_train,timm_train_resnet,timm_train_vit_gradckpt")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--small", action="store_true", help="CI-size arguments (checks the harness, measures nothing)")
    ap.add_argument("--variant", action="append", default=[], help="LABEL:NAME=VALUE[,NAME=VALUE], an extra pcompile cold")
    ap.add_argument("--stacks", action="store_true",
                    help="sample each run's main-thread stack (DIR/CASE/RUN-i/stacks.txt; tools/stack_diff.py compares two)")
    ap.add_argument("--out", default="/tmp/corpus-cold")
    ap.add_argument("--cases-file", default=str(cb.CORPUS / "cases.json"))
    a = ap.parse_args()
    a.variants = [_variant(v) for v in a.variant]
    header = ("| case | run | n | first step s (median) | / stock | each | CPU-s (main) | torch phases s (medians; "
              "nested, not a sum) | FX AOT hits |")
    return run_cases(a, header, run_case, rows, "cold.json")


def run_cases(a: argparse.Namespace, header: str, run_case: Any, rows: Any, json_name: str) -> int:
    """Each case of `a.cases` in turn: its rows printed as soon as it ends, every result in OUT/json_name."""
    cases_file = Path(a.cases_file).resolve()
    wanted = [c for c in a.cases.split(",") if c]
    cases = [c for c in json.loads(cases_file.read_text()) if c["name"] in wanted]
    print(header)
    print("|---" * header.count(" | ") + "|---|")
    results = []
    for case in cases:
        res = run_case(case, Path(a.out) / case["name"], a, cases_file.parent)
        results.append(res)
        Path(a.out, json_name).write_text(json.dumps(results, indent=1))
        for line in rows(res) or [f"| {case['name']} | error: {res.get('error')} |"]:
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
