"""Why does a GPU job miss what a warm wrote? Diff the FX graph key descriptions of both.

    python benchmarks/diag_warm_keys.py OUT_DIR -- SCRIPT [ARGS...]

Runs `pcompile warm SCRIPT` and then SCRIPT itself on the GPU (PCOMPILE=1, same cache dir), each
with PCOMPILE_DEBUG_FX_KEYS set, then pairs the key descriptions in the order they were computed
and prints the lines that differ (Inductor's own per-field hash lines), plus store-level explain
of the first missed key.
"""
from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path


def main() -> int:
    out = Path(sys.argv[1])
    rest = sys.argv[sys.argv.index("--") + 1:]
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "cache"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PCOMPILE", "TORCHINDUCTOR", "TRITON_CACHE"))}
    warm_env = dict(base, PCOMPILE_DEBUG_FX_KEYS=str(out / "warm"), PCOMPILE_PROGRESS="0",
                    PCOMPILE_AOT_KEY_DUMP=str(out / "warm-aot.jsonl"))
    r = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "warm", rest[0], "--target", "h100", "--cache-dir",
                        str(cache), "--", *rest[1:]], env=warm_env, capture_output=True, text=True)
    print("warm rc", r.returncode, r.stdout[-1500:], r.stderr[-1500:] if r.returncode else "")
    job_env = dict(base, PCOMPILE="1", PCOMPILE_CACHE_DIR=str(cache), PCOMPILE_DEBUG_FX_KEYS=str(out / "job"))
    wrapper = ("import runpy, sys; from pcompile.compat import warm_runtime; "
               f"warm_runtime.dump_aot_keys({str(out / 'job-aot.jsonl')!r}); "
               "sys.argv = sys.argv[1:]; sys.path.insert(0, __import__('os').path.dirname(sys.argv[0])); "
               "runpy.run_path(sys.argv[0], run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", wrapper, *rest], env=job_env, capture_output=True, text=True)
    print("job rc", r.returncode, r.stdout[-800:], r.stderr[-3000:] if r.returncode else "")

    def files(d: Path) -> list[Path]:
        return sorted(d.glob("*.txt"), key=lambda p: p.stat().st_mtime) if d.exists() else []

    w, j = files(out / "warm"), files(out / "job")
    print(f"warm computed {len(w)} FX keys, job {len(j)}")
    wkeys = {p.name.split("-", 1)[1] for p in w}
    for p in j:
        k = p.name.split("-", 1)[1]
        print(("HIT-KEY " if k in wkeys else "NEW-KEY ") + k)
    for a, b in zip(w, j):
        la, lb = a.read_text().splitlines(), b.read_text().splitlines()
        if a.name.split("-", 1)[1] == b.name.split("-", 1)[1]:
            continue
        print(f"--- {a.name} vs {b.name}")
        for line in list(difflib.unified_diff(la, lb, lineterm="", n=0))[:40]:
            print(line[:400])
    _diff_aot(out / "warm-aot.jsonl", out / "job-aot.jsonl")
    s = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "stats", "--cache-dir", str(cache)], env=base,
                       capture_output=True, text=True)
    print(s.stdout[-2500:])
    return 0


def _diff_aot(warm: Path, job: Path) -> None:
    """AOTAutograd keys: which the job computed that the warm did not, and the differing hash lines
    of each such key against the warm key computed at the same position."""
    import json

    def load(p: Path) -> list[dict]:
        return [json.loads(ln) for ln in p.read_text().splitlines() if ln.strip()] if p.exists() else []

    w, j = load(warm), load(job)
    print(f"AOT keys: warm computed {len(w)}, job {len(j)}")
    wkeys = {d["key"] for d in w}
    for i, d in enumerate(j):
        print(("AOT HIT-KEY " if d["key"] in wkeys else "AOT NEW-KEY ") + d["key"])
        if d["key"] in wkeys or not w:
            continue
        other = w[min(i, len(w) - 1)]
        for line in list(difflib.unified_diff(other["lines"], d["lines"], lineterm="", n=0))[:30]:
            print("   ", line[:600])


if __name__ == "__main__":
    sys.exit(main())
