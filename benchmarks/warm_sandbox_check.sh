#!/usr/bin/env bash
# The warm's file sandbox on the GPU host's own mount layout (a container with driver file mounts,
# /dev/nvidia*, maybe a tmpfs /tmp): every mode's tests, then the time to probe and build the view.
# GPU-free; run as the user that runs `pcompile warm` there.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "mounts: $(wc -l < /proc/self/mountinfo)"
PYTHONPATH=$PWD python -m pytest -q -rxs tests/test_warm_sandbox.py
PYTHONPATH=$PWD python - <<'PY'
import json, os, subprocess, sys, tempfile, time
from pathlib import Path
from pcompile.warm import isolation, sandbox
run = Path(tempfile.mkdtemp(prefix="pcompile-sbx-"))
for mode in ("namespace", "userns"):
    t = time.monotonic(); why = sandbox.probe(mode, run); probe = time.monotonic() - t
    if why:
        print(f"{mode}: unavailable ({why})"); continue
    (run / mode).mkdir()
    plan = {"mode": mode, "run": str(run / mode), "record": str(run / mode / "rec.json"), "keep": [str(run)], "cwd": os.getcwd(),
            "argv": ["/bin/true"], "env": {}}
    (run / mode / "plan.json").write_text(json.dumps(plan))
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "pcompile.warm.sandbox", str(run / mode / "plan.json")], check=True)
    rec = json.loads((run / mode / "rec.json").read_text())
    print(f"{mode}: probe {probe:.2f}s, view built and exec'd in {time.monotonic() - t:.2f}s; {len(rec['uppers'])} overlays, "
          f"{len(rec['readonly'])} read-only, {len(rec['passed'])} passed through, could not overlay: {rec['failed']}")
isolation.remove_tree(run)
PY
