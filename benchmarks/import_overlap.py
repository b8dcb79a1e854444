"""Background imports at `import torch` (issue 33 item 2), measured: stock hot, pcompile hot
without them, pcompile hot with them, as separate processes in alternating order.

The `overlap` side is what the issue proposed: when `import torch` returns, a daemon thread
imports what a hot first compiled call imports (`AHEAD`, from `python -X importtime` on torch
2.14.1) while the script starts up. It lives here, not in pcompile: measured on the CPU host it
was not faster on every row (see the report this prints), so pcompile does not ship it.

    python benchmarks/import_overlap.py [--cases demo,nanogpt_train] [--rounds 5] [--out DIR]

Per case one cold run fills each side's caches (stock: Inductor's local caches; both pcompile
sides share one store), then `--rounds` rounds run every side once on its warm caches, the order
rotated each round. Every run is this file's `--probe`, which runs the script as `__main__` and
marks, from the parent's clock at launch (interpreter start included): `import torch` done, the
first torch.compile call and its return, and the end of the first step (the first backward's
return, as corpus_probe.py). Prints medians per side and the split the issue asks for:
- hidden: how much shorter the compile-to-first-step part got (imports no longer in the call);
- GIL cost: how much longer the script's own start-up got (the imports ran beside it).

Cases: `demo` (benchmarks/import_overlap_job.py: a corpus read and tokenised in pure Python,
model built, torch.compile, train), `demo_big` (the same with ~150M parameters to initialise: more
of the start-up runs in torch kernels, without the GIL) and `nanogpt_train` (the corpus script on CPU; restore it with
`PCOMPILE_CORPUS_MIRROR=/work/.mirror python benchmarks/corpus/sources.py nanogpt_train`).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import runpy
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SIDES = {
    "stock": {"PCOMPILE_DISABLE": "1"},
    "pcompile": {"PCOMPILE": "1"},
    "overlap": {"PCOMPILE": "1", "IMPORT_OVERLAP_AHEAD": "1"},
}
#: What a hot first compiled call imports that does not depend on the script: Dynamo (at
#: torch.compile), Inductor's compiler (the call), its CPU build (the first kernel load), export's
#: tracer (AOTAutograd's cache load), pcompile's store and event modules. Not
#: pcompile.inductor.backend: importing it turns pcompile's hooks on (from this thread).
AHEAD = ("torch._dynamo", "torch._dynamo.backends.inductor", "torch._inductor.compile_fx", "torch._inductor.codecache",
         "torch.utils.cpp_extension", "torch.export._trace", "pcompile.inductor.graph_normalize", "pcompile.trust",
         "pcompile.store.compose", "pcompile.events")
NANOGPT_ARGS = ["--dataset=synth_char", "--out_dir=out", "--device=cpu", "--dtype=float32", "--compile=True",
                "--n_layer=4", "--n_head=4", "--n_embd=256", "--block_size=64", "--batch_size=4",
                "--max_iters=4", "--eval_interval=1000", "--eval_iters=1", "--log_interval=1",
                "--gradient_accumulation_steps=1", "--always_save_checkpoint=False"]


class _Stop(BaseException):
    pass


def probe(out: str, steps: int, script: str, args: list[str]) -> int:
    """Run `script` as __main__ and mark its phases (seconds since the parent launched us)."""
    t0 = float(os.environ["IMPORT_OVERLAP_T0"])
    since = lambda: round(time.time() - t0, 3)  # noqa: E731
    marks: dict[str, Any] = {"started": since()}
    import torch

    marks["torch_imported"] = since()
    ahead = _start_ahead() if os.environ.get("IMPORT_OVERLAP_AHEAD") == "1" else None
    cpu0 = time.thread_time()  # the main thread's own CPU time: start-up that got longer without it did wait for the GIL
    compile_ = torch.compile

    def compile(*c_args: Any, **c_kwargs: Any) -> Any:
        marks.setdefault("compile_called", since())
        marks.setdefault("startup_cpu_s", round(time.thread_time() - cpu0, 3))
        if ahead is not None and "ahead_done_at_compile" not in marks:
            marks["ahead_done_at_compile"] = not ahead[0].is_alive()
        got = compile_(*c_args, **c_kwargs)
        marks.setdefault("compile_returned", since())
        return got

    torch.compile = compile
    losses: list[float] = []
    backward_ = torch.autograd.backward

    def backward(tensors: Any, *b_args: Any, **b_kwargs: Any) -> Any:
        if len(losses) >= steps:
            raise _Stop()
        loss = tensors[0] if isinstance(tensors, (list, tuple)) else tensors
        got = backward_(tensors, *b_args, **b_kwargs)
        losses.append(float(loss.detach().float().mean()))
        marks.setdefault("first_step", since())
        marks.setdefault("process_cpu_s", round(time.process_time(), 3))
        return got

    torch.autograd.backward = backward
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except _Stop:
        pass
    from torch._dynamo.utils import counters

    times = ahead[1] if ahead else []
    Path(out).write_text(json.dumps({"marks": marks, "losses": losses, "frames": int(counters["frames"]["total"]),
                                     "ahead_s": round(times[1] - times[0], 3) if len(times) == 2 else None,
                                     "ahead_error": times[0] if len(times) == 1 else None}))
    return 0


def _start_ahead() -> tuple[threading.Thread, list[Any]]:
    """The overlap side: import AHEAD in a daemon thread; its start and end times (or its error)."""
    times: list[Any] = []

    def run() -> None:
        t0 = time.perf_counter()
        try:
            for name in AHEAD:
                importlib.import_module(name)
            times.extend([t0, time.perf_counter()])
        except Exception as exc:  # the compile imports what is missing itself
            times.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=run, name="import-ahead", daemon=True)
    thread.start()
    return thread, times


def _case(name: str, work: Path) -> tuple[list[str], Path] | None:
    if name in ("demo", "demo_big"):
        corpus = work / "corpus.txt"
        if not corpus.exists():
            rnd = random.Random(0)
            vocab = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 9)))
                     for _ in range(20000)]
            words = [rnd.choice(vocab) for _ in range(1_500_000)]
            corpus.write_text("\n".join(" ".join(words[i:i + 15]) + "." for i in range(0, len(words), 15)))
        size = ["--width", "1024", "--depth", "12"] if name == "demo_big" else []  # ~150M parameters to initialise
        return [str(HERE / "import_overlap_job.py"), "--corpus", str(corpus), *size], work
    if name == "nanogpt_train":
        root = HERE / "corpus" / "nanogpt_train"
        if not (root / "train.py").exists():
            print("nanogpt_train: sources missing (benchmarks/corpus/sources.py nanogpt_train); skipped", file=sys.stderr)
            return None
        subprocess.run([sys.executable, "setup_data.py", "data"], cwd=root, check=True, capture_output=True)
        return [str(root / "train.py"), *NANOGPT_ARGS], root
    raise SystemExit(f"unknown case {name!r} (demo, demo_big, nanogpt_train)")


def _run(side: str, cmd: list[str], cwd: Path, dirs: Path, steps: int, log: Path, timeout: float) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PCOMPILE", "TORCHINDUCTOR", "TRITON_CACHE", "IMPORT_OVERLAP"))}
    store = "stock" if side == "stock" else "pcompile"
    env.update(SIDES[side], PCOMPILE_CACHE_DIR=str(dirs / store / "pc"), TORCHINDUCTOR_CACHE_DIR=str(dirs / store / "ind"),
               TRITON_CACHE_DIR=str(dirs / store / "ind" / "triton"), PCOMPILE_POOL="off")
    out = log.with_suffix(".json")
    argv = [sys.executable, str(Path(__file__).resolve()), "--probe", str(out), str(steps), "--", *cmd]
    env["IMPORT_OVERLAP_T0"] = repr(time.time())
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(argv, env=env, cwd=str(cwd), stdout=fh, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    got: dict[str, Any] = {"side": side, "rc": rc, "wall_s": round(time.perf_counter() - t0, 3)}
    if out.exists():
        got.update(json.loads(out.read_text()))
    m = got.get("marks") or {}
    if {"torch_imported", "compile_called", "compile_returned", "first_step"} <= set(m):
        got["startup_s"] = round(m["compile_called"] - m["torch_imported"], 3)
        got["compile_call_s"] = round(m["compile_returned"] - m["compile_called"], 3)
        got["compiled_s"] = round(m["first_step"] - m["compile_called"], 3)  # the call through the first step
    print(f"  {side}: rc {rc} wall {got['wall_s']} first step {m.get('first_step')} startup {got.get('startup_s')} "
          f"compile..first step {got.get('compiled_s')} ahead {got.get('ahead_s')}", file=sys.stderr, flush=True)
    return got


def _med(runs: list[dict[str, Any]], key: str) -> float | None:
    vals = [(r.get("marks") or {}).get(key, r.get(key)) for r in runs]
    vals = [v for v in vals if isinstance(v, (int, float))]
    return round(statistics.median(vals), 3) if vals else None


def report(case: str, runs: dict[str, list[dict[str, Any]]], cold_losses: list[float] | None) -> list[str]:
    keys = ("first_step", "wall_s", "torch_imported", "startup_s", "startup_cpu_s", "compile_call_s", "compiled_s",
            "process_cpu_s")
    med = {side: {k: _med(rs, k) for k in keys} for side, rs in runs.items()}
    lines = [f"### {case}", "", "| side | n | first step | wall | import torch | start-up | its main-thread CPU | torch.compile call | call..first step | process CPU at first step | losses = stock cold |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for side, rs in runs.items():
        same = all(r.get("losses") == cold_losses for r in rs) if cold_losses else None
        lines.append(f"| {side} | {len(rs)} | " + " | ".join(str(med[side][k]) for k in keys) + f" | {same} |")
    p, o, s = med.get("pcompile"), med.get("overlap"), med.get("stock")
    if p and o and all(p[k] is not None and o[k] is not None for k in keys):
        hidden = p["compiled_s"] - o["compiled_s"]
        gil = o["startup_s"] - p["startup_s"]
        lines += ["", f"overlap / pcompile: first step {o['first_step'] / p['first_step']:.3f}, wall {o['wall_s'] / p['wall_s']:.3f}; "
                  f"hidden from the compile call..first step: {hidden:.2f} s; start-up slower by {gil:.2f} s (GIL, CPU); "
                  f"net {hidden - gil:.2f} s"]
        if s and s["first_step"]:
            lines.append(f"vs stock hot: pcompile {p['first_step'] / s['first_step']:.3f}, overlap {o['first_step'] / s['first_step']:.3f} (first step); "
                         f"pcompile {p['wall_s'] / s['wall_s']:.3f}, overlap {o['wall_s'] / s['wall_s']:.3f} (wall)")
    return lines


def main() -> int:
    if sys.argv[1:2] == ["--probe"]:
        out, steps, dashes, script, *args = sys.argv[2:]  # --probe OUT STEPS -- SCRIPT ARGS (from _run)
        return probe(out, int(steps), script, args)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="demo,demo_big,nanogpt_train")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    work = a.out or Path(tempfile.mkdtemp(prefix="import-overlap-"))
    work.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    results: dict[str, Any] = {}
    for name in a.cases.split(","):
        d = work / name
        d.mkdir(exist_ok=True)
        found = _case(name, d)
        if found is None:
            continue
        cmd, cwd = found
        print(f"{name}: cold runs", file=sys.stderr, flush=True)
        cold = {side: _run(side, cmd, cwd, d, a.steps, d / f"cold-{side}.log", a.timeout) for side in ("stock", "pcompile")}
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
        order = list(SIDES)
        for i in range(a.rounds):
            for side in order[i % 3:] + order[:i % 3]:
                runs[side].append(_run(side, cmd, cwd, d, a.steps, d / f"hot-{side}-{i}.log", a.timeout))
        results[name] = {"cold": cold, "runs": runs}
        lines += report(name, runs, cold["stock"].get("losses")) + [""]
    (work / "import_overlap.json").write_text(json.dumps(results, indent=1))
    print("\n".join(lines))
    print(f"(runs and logs in {work})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
