"""Run a chosen list of scenarios within a time budget; write results.json, results.md and plot.png.

    python benchmarks/run_all.py --out benchmarks/results/h100 --budget-s 540
    python benchmarks/run_all.py --quick --models tiny-gpt2 --scenarios cold,hot --out /tmp/smoke

Results merge into an existing --out directory (a row per scenario and model), so a run cut
short by the budget can be continued with --resume, which skips rows already measured.
The per-job compile report of each pcompile case is written next to them (report-*.png/html).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _harness as H
import scenarios

PLOT_CASES = [("stock-cold", "stock cold"), ("pcompile-cold", "pcompile cold"), ("stock-hot", "stock hot (local)"),
              ("pcompile-hot", "pcompile hot (local)"), ("pcompile-after-warm", "pcompile after CPU warm"),
              ("pcompile-after-warm-bench", "after warm, PCOMPILE_AUTOTUNE=benchmark"),
              ("pcompile-next-job", "next job after warm"),
              ("pcompile-shared", "pcompile, shared tier only"), ("pcompile-remote", "pcompile, remote tier only")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    scenarios.add_args(ap)
    ap.add_argument("--scenarios", default=",".join(scenarios.SCENARIOS), help="comma-separated, run in this order")
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop starting work after this many seconds "
                                                                  "(cases are cut at the budget too)")
    ap.add_argument("--out", type=Path, required=True, help="output directory (merged into if it exists)")
    ap.add_argument("--order", choices=("scenario", "model"), default="scenario",
                    help="scenario: each scenario for every model before the next scenario (default)")
    ap.add_argument("--resume", action="store_true", help="skip scenario/model rows already in --out/results.json")
    args = ap.parse_args()
    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    bad = [s for s in names if s not in scenarios.SCENARIOS + scenarios.EXTRA_SCENARIOS]
    if bad:
        ap.error(f"unknown scenario(s) {bad}; choose from {', '.join(scenarios.SCENARIOS + scenarios.EXTRA_SCENARIOS)}")
    opts = scenarios.options(args, "gpt2,llama,resnet50")
    opts.deadline = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "results.json"
    data = json.loads(store.read_text()) if store.exists() else {"runs": [], "rows": []}
    skip = ({(r["scenario"], r["model"]) for r in data["rows"] if not r.get("skipped") and not scenarios._any_error(r)}
            if args.resume else set())  # rows with a failed or cut-off case are measured again
    data["runs"].append(_meta(args, opts))
    H._say(f"work dir {opts.work_dir}; budget {args.budget_s:.0f} s; out {args.out}")

    def on_row(row: dict) -> None:
        data["rows"] = [r for r in data["rows"] if (r["scenario"], r["model"]) != (row["scenario"], row["model"])]
        data["rows"].append(row)
        _reports(row, args.out)
        _write(data, args.out)

    try:
        rows = scenarios.run_scenarios(names, opts, on_row=on_row, order=args.order, skip=skip)
        for r in rows:
            if r.get("skipped") and (r["scenario"], r["model"]) not in {(x["scenario"], x["model"]) for x in data["rows"]}:
                data["rows"].append(r)
    finally:
        _fill_meta(data)
        _write(data, args.out)
        if not args.keep:
            shutil.rmtree(opts.work_dir, ignore_errors=True)
    left = [f"{r['scenario']}/{r['model']}" for r in data["rows"] if r.get("skipped") or scenarios._any_error(r)]
    H._say(f"wrote {store}, {args.out / 'results.md'}, {args.out / 'plot.png'}")
    if left:
        H._say(f"not fully measured (budget, or a failed case): {', '.join(left)}; "
               "rerun the same command with --resume to measure these again")
    return 0


def _meta(args: argparse.Namespace, opts: H.Options) -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=H.REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    return {"date": dt.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
            "cpus": os.cpu_count(), "python": platform.python_version(), "commit": commit,
            "command": "python " + " ".join([os.path.relpath(sys.argv[0], H.REPO)] + sys.argv[1:]),
            "models": opts.models, "steps": opts.steps, "ranks": opts.ranks}


def _fill_meta(data: dict) -> None:
    """Versions and GPU as the cases saw them (the parent never imports torch)."""
    run = data["runs"][-1]
    for row in data["rows"]:
        for c in row.get("cases", {}).values():
            for sub in c.get("ranks", [c]):
                for k in ("torch", "triton", "cuda", "gpu", "device"):
                    if sub.get(k) and k not in run:
                        run[k] = sub[k]


def _write(data: dict, out: Path) -> None:
    _fill_meta(data)
    (out / "results.json").write_text(json.dumps(data, indent=1, default=str))
    (out / "results.md").write_text(markdown(data))
    try:
        plot(data, out / "plot.png")
    except Exception as exc:  # a missing matplotlib must not lose the numbers
        H._say(f"plot not written: {exc}")


def _reports(row: dict, out: Path) -> None:
    """The compile report (PNG + HTML) of each pcompile case of this row, while its cache dir exists."""
    for name, c in row.get("cases", {}).items():
        ev = c.get("pcompile_events") or {}
        if not ev.get("job") or not ev.get("log"):
            continue
        base = out / f"report-{row['model']}-{name}"
        if base.with_suffix(".png").exists() and base.with_suffix(".html").exists():
            continue
        cache = str(Path(ev["log"]).parents[1])
        for fmt in ("png", "html"):
            subprocess.run([sys.executable, "-m", "pcompile.cli.main", "report", "--cache-dir", cache, "--job",
                            ev["job"], "--format", fmt, "--out", str(base.with_suffix("." + fmt))],
                           env=H.base_env({}), capture_output=True, text=True, timeout=300)


def _first(row: dict, case: str) -> float | None:
    c = row.get("cases", {}).get(case) or {}
    return None if c.get("error") else c.get("first_step_s")


def _collect(data: dict) -> dict[str, dict[str, float]]:
    """model -> case -> first-step seconds, from whichever rows measured them (latest wins)."""
    out: dict[str, dict[str, float]] = {}
    for row in data["rows"]:
        for case, _ in PLOT_CASES:
            v = _first(row, case)
            if v is not None:
                out.setdefault(row["model"], {})[case] = v
    return out


def markdown(data: dict) -> str:
    run = data["runs"][-1] if data["runs"] else {}
    lines = [f"Measured {run.get('date', '?')} on {run.get('host', '?')} ({run.get('cpus', '?')} CPUs, "
             f"{run.get('gpu') or run.get('device') or '?'}), torch {run.get('torch', '?')}, triton {run.get('triton', '?')}, "
             f"CUDA {run.get('cuda') or '-'}, commit {run.get('commit') or '?'}, {run.get('steps')} steps per case.",
             "", f"Command: `{run.get('command', '?')}`", "", "### First step, seconds (compile included)", ""]
    firsts = _collect(data)
    cols = [c for c, _ in PLOT_CASES if any(c in v for v in firsts.values())]
    if firsts:
        lines.append("| model | " + " | ".join(dict(PLOT_CASES)[c] for c in cols) + " |")
        lines.append("|---|" + "---:|" * len(cols))
        for m, v in firsts.items():
            lines.append(f"| {m} | " + " | ".join(_n(v.get(c)) for c in cols) + " |")
    lines += ["", "### Ratios against the targets", "", "| scenario | model | ratio | value | target | met |", "|---|---|---|---:|---:|---|"]
    for row in data["rows"]:
        if row.get("skipped"):
            lines.append(f"| {row['scenario']} | {row['model']} | not measured: {row['skipped']} | | | |")
            continue
        for r in row["ratios"]:
            met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
            lines.append(f"| {row['scenario']} | {row['model']} | {r['name']} | {_n(r['value'], 3)} | "
                         f"{'' if r['target'] is None else '≤ ' + str(r['target'])} | {met} |")
    lines += ["", "### Cases", "", "| scenario | model | case | first step s | steady ms | GPU kernel ms/step | compile CPU-s | "
              "FX hit/miss | AOT hit/miss | pcompile lookups hit/all | error |", "|---|---|---|---:|---:|---:|---:|---|---|---|---|"]
    for row in data["rows"]:
        for name, c in row.get("cases", {}).items():
            subs = [(f"{name}[{i}]", r) for i, r in enumerate(c["ranks"])] if "ranks" in c else [(name, c)]
            for sub_name, s in subs:
                st = s.get("steady_step_s")
                lines.append(f"| {row['scenario']} | {row['model']} | {sub_name} | {_n(s.get('first_step_s'))} | "
                             f"{_n(st * 1000 if st else None)} | {_n(s.get('kernel_ms_per_step'))} | {_n(s.get('compile_cpu_s'))} | "
                             f"{s.get('fxgraph_hit', '')}/{s.get('fxgraph_miss', '')} | {s.get('aot_hit', '')}/{s.get('aot_miss', '')} | "
                             f"{s.get('pcompile_lookups', '')} | "
                             f"{(s.get('error') or '')[:120].replace('|', '/')} |")
    notes = [f"- {row['scenario']} / {row['model']}: {n}" for row in data["rows"] for n in row.get("notes", [])]
    if notes:
        lines += ["", "### Notes", ""] + notes
    return "\n".join(lines) + "\n"


def _n(v: Any, nd: int = 2) -> str:
    return "–" if v is None else (f"{v:.{nd}f}" if isinstance(v, (int, float)) else str(v))


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    firsts = _collect(data)
    if not firsts:
        return
    cases = [(c, lbl) for c, lbl in PLOT_CASES if any(c in v for v in firsts.values())]
    models = list(firsts)
    colors = {"stock-cold": "#9aa5b1", "pcompile-cold": "#3a6fd8", "stock-hot": "#cbd2d9", "pcompile-hot": "#2e9d4f",
              "pcompile-after-warm": "#f08c2e", "pcompile-shared": "#8e6cc4", "pcompile-remote": "#2a9d8f"}
    fig, ax = plt.subplots(figsize=(max(6, 2.6 * len(models) + 2), 4.5), dpi=120)
    width = 0.8 / len(cases)
    for i, (c, lbl) in enumerate(cases):
        xs = [m + (i - (len(cases) - 1) / 2) * width for m in range(len(models))]
        vals = [firsts[m].get(c) for m in models]
        bars = ax.bar([x for x, v in zip(xs, vals) if v is not None], [v for v in vals if v is not None], width,
                      label=lbl, color=colors.get(c, "#888"))
        ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(models)
    ax.set_ylabel("first training step, s (compile included)")
    run = data["runs"][-1]
    ax.set_title(f"stock torch.compile vs pcompile · {run.get('gpu') or run.get('device') or ''} · torch {run.get('torch', '')}",
                 fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    ax.grid(axis="y", color="#e5e9ef")
    ax.set_axisbelow(True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
