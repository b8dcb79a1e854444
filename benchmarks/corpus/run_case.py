"""Run one corpus case: upstream files, synthetic data, `pcompile warm`, optionally the GPU job.

    python benchmarks/corpus/run_case.py NAME [--full] [--setup-only] [--warm-only] [--gpu] [--cpu-check]

1. puts the case's upstream files in place (sources.py; fails if they cannot be had);
2. runs the case's setup once (its data dir keeps a stamp; --warm-only skips this step);
3. `pcompile warm SCRIPT --target h100 [--world-size N] -- ARGS` from the case's cwd, small arguments
   or --full ones, with PCOMPILE_CACHE_DIR from --cache-dir / the environment / a fresh temp dir;
4. --gpu: the script itself as the GPU job (torchrun when world_size > 0), PCOMPILE=1, same cache;
   --cpu-check instead of 3-4: the script eagerly on this CPU with the case's args_cpu_check.

Prints one JSON line: exit codes, seconds, the warm's report lines and its failure line.
Exit status: the warm's (or the GPU job's, or the CPU check's) exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
import sources  # noqa: E402


def _run(cmd: list[str], cwd: Path, env: dict, timeout: int) -> tuple[int, float, str]:
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, errors="replace")
        rc, out = p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = 124, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
    return rc, round(time.time() - t0, 1), out


def failure_line(out: str) -> str | None:
    """The line that says why a run failed: pcompile's error line, else the last exception line."""
    lines = [ln.rstrip() for ln in out.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("pcompile: error:"):
            return ln
    for ln in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception|Interrupt|Exit)\b.*:", ln) or re.match(r"^[\w.]+Error$", ln):
            return ln
    return lines[-1] if lines else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name")
    ap.add_argument("--full", action="store_true", help="the GPU benchmark's arguments and data")
    ap.add_argument("--setup-only", action="store_true")
    ap.add_argument("--warm-only", action="store_true", help="skip the setup step (data already there)")
    ap.add_argument("--gpu", action="store_true", help="after the warm, run the script itself as the GPU job")
    ap.add_argument("--cpu-check", action="store_true", help="run the script eagerly on CPU instead of warming")
    ap.add_argument("--cache-dir", default=os.environ.get("PCOMPILE_CACHE_DIR"))
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--log", help="write the full output of each step to LOG.<step>.txt")
    args = ap.parse_args(argv)

    case = {c["name"]: c for c in sources.load_cases()}.get(args.name)
    if case is None:
        ap.error(f"unknown case {args.name!r}")
    cwd = HERE / case["cwd"]
    script = str((HERE / case["script"]).relative_to(cwd))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.update({k: str(v) for k, v in (case.get("env") or {}).items()})  # the case's own variables (e.g. HF_HUB_OFFLINE)
    result: dict = {"case": args.name, "full": args.full}

    def done(rc: int) -> int:
        print(json.dumps(result))
        return rc

    def keep(step: str, out: str) -> None:
        if args.log:
            Path(f"{args.log}.{step}.txt").write_text(out)

    problems = sources.materialize(case, Path(sources.DEFAULT_MIRROR))
    if problems:
        result["error"] = "upstream files missing: " + "; ".join(problems)
        return done(2)

    if not args.warm_only:
        cmd = shlex.split(case["setup"]) + (["--full"] if args.full else [])
        rc, secs, out = _run([sys.executable if c == "python" else c for c in cmd], cwd, env, args.timeout)
        keep("setup", out)
        result.update(setup_rc=rc, setup_s=secs)
        if rc != 0:
            result["setup_failure"] = failure_line(out)
            return done(rc)
    if args.setup_only:
        return done(0)

    if args.cpu_check:
        if case.get("args_cpu_check") is None:
            result["cpu_check"] = "not possible for this case (see notes)"
            return done(0)
        rc, secs, out = _run([sys.executable, script, *case["args_cpu_check"]], cwd, env, args.timeout)
        keep("cpu", out)
        result.update(cpu_check_rc=rc, cpu_check_s=secs)
        if rc != 0:
            result["cpu_check_failure"] = failure_line(out)
        return done(rc)

    cache = args.cache_dir or tempfile.mkdtemp(prefix=f"pcompile-corpus-{args.name}-")
    env["PCOMPILE_CACHE_DIR"] = cache
    script_args = case["args_full" if args.full else "args_small"]
    ws = ["--world-size", str(case["world_size"])] if case["world_size"] else []
    warm = [sys.executable, "-m", "pcompile.cli.main", "warm", script, "--target", "h100", *ws,
            *case.get("warm_args", []), "--", *script_args]
    rc, secs, out = _run(warm, cwd, env, args.timeout)
    keep("warm", out)
    report = [ln for ln in out.splitlines() if ln.strip()][-25:]
    result.update(cache_dir=cache, warm_rc=rc, warm_s=secs, warm_report=report)
    if rc != 0:
        result["warm_failure"] = failure_line(out)
    if not args.gpu:
        return done(rc)

    env["PCOMPILE"] = "1"
    if case["world_size"]:
        job = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={case['world_size']}", script, *script_args]
    else:
        job = [sys.executable, script, *script_args]
    grc, gsecs, gout = _run(job, cwd, env, args.timeout)
    keep("gpu", gout)
    result.update(gpu_rc=grc, gpu_s=gsecs, gpu_tail=[ln for ln in gout.splitlines() if ln.strip()][-10:])
    if grc != 0:
        result["gpu_failure"] = failure_line(gout)
    return done(grc or rc)


if __name__ == "__main__":
    sys.exit(main())
