"""Helpers for pcompile's Inductor tests: run a tiny training script in fresh interpreters.

Real processes, real torch.compile, real store: every test that claims "another process hits"
runs another process. Each run gets its own TORCHINDUCTOR_CACHE_DIR unless told otherwise, so
only pcompile's store can carry compiled artifacts from one process to the next.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pcompile import settings

REPO = Path(__file__).resolve().parents[2]
RESULT_MARK = "PCOMPILE_RESULT "

#: argv[1]: pcompile | inductor | eager | default (unchanged torch.compile(m)) | install
#: (pcompile.install() then torch.compile(m)). Prints one RESULT_MARK line of JSON.
TRAIN_SCRIPT = r'''
import json, sys
import torch

how = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
torch.manual_seed(0)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))


model = Tiny()
x = torch.randn(4, 8)
reference = Tiny()
reference.load_state_dict(model.state_dict())
if how == "install":
    import pcompile
    pcompile.install()
if how == "eager":
    fn = model
elif how in ("default", "install"):
    fn = torch.compile(model)
else:
    fn = torch.compile(model, backend=how)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for _ in range(steps):
    opt.zero_grad()
    loss = fn(x).square().mean()
    loss.backward()
    opt.step()
    losses.append(loss.item())
params = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
for _ in range(steps):  # the same steps in eager mode, for the numerics check
    ref_opt.zero_grad()
    reference(x).square().mean().backward()
    ref_opt.step()
eager = torch.cat([p.detach().flatten() for p in reference.parameters()]).tolist()
out = {"losses": [float(v).hex() for v in losses], "params": [float(v).hex() for v in params],
       "loss_values": losses, "param_values": params, "eager_param_values": eager}
try:
    from pcompile.inductor import store_gateway, hooks
    out["hooks"] = {"active": hooks.state.active, "layers": list(hooks.state.layers)}
    out["held"] = store_gateway.held_keys()
except Exception as exc:
    out["hooks"] = {"error": repr(exc)}
print("''' + RESULT_MARK + '''" + json.dumps(out), flush=True)
'''


def clean_env(**extra: str) -> dict[str, str]:
    """This interpreter's environment minus anything pcompile/Inductor/Triton would read."""
    env = {k: v for k, v in os.environ.items() if not k.startswith((settings.PREFIX, "TORCHINDUCTOR_", "TRITON_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # 2-core CI: no worker pools
    env[settings.POOL.name] = "off"
    env[settings.EVENTS.name] = "0"
    # These jobs test the layers below programs: a program answers a restart before any of them is
    # asked. Programs' own tests (and the README walkthroughs, which run the real defaults) turn it on.
    env[settings.PROGRAMS.name] = "0"
    env.update(extra)
    return env


def write_script(directory: Path, name: str = "train.py", text: str = TRAIN_SCRIPT) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def parse_result(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    raise AssertionError(f"no result line in output:\n{stdout[-3000:]}")


def start(script: Path, how: str, env: dict[str, str], cwd: Path | None = None, steps: int = 2,
          args: list[str] | None = None) -> subprocess.Popen:
    """Start `python script how <args or steps>`; `args` replaces the step count for other scripts."""
    argv = [sys.executable, str(script), how, *(args if args is not None else [str(steps)])]
    return subprocess.Popen(argv, env=env, cwd=str(cwd or script.parent), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[dict[str, Any], str]:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\n{err[-4000:]}\n{out[-2000:]}")
    return parse_result(out), err


def run(script: Path, how: str, env: dict[str, str], cwd: Path | None = None, steps: int = 2, timeout: float = 300,
        args: list[str] | None = None) -> tuple[dict[str, Any], str]:
    return finish(start(script, how, env, cwd, steps, args), timeout)


def stats(cache_dir: Path, shared_dir: Path | None = None) -> dict[str, Any]:
    """`pcompile stats --json` for a cache dir (the CLI the README shows)."""
    env = clean_env(**{settings.CACHE_DIR.name: str(cache_dir)})
    if shared_dir is not None:
        env[settings.SHARED_DIR.name] = str(shared_dir)
    proc = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "stats", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"pcompile stats failed: {proc.stderr}")
    return json.loads(proc.stdout)


def layer_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per-layer hits/misses that happened between two `stats` snapshots."""
    out = {}
    for layer, counts in after["layers"].items():
        prior = before["layers"].get(layer, {})
        out[layer] = {k: counts[k] - prior.get(k, 0) for k in ("hits", "misses")}
    return out


def manifest_keys(store_root: Path) -> set[str]:
    """Every key with a manifest in a store directory (<cache>/store or <shared>/store)."""
    return {p.stem for p in (store_root / "manifests").rglob("*.json")}


def job_keys(store_root: Path) -> set[str]:
    """`manifest_keys` less the vector-ISA probe's entries (isa_probe_cache.py): torch's check of
    the host, stored for other nodes but neither a compile of the job's code nor counted as one."""
    import json

    keys = set()
    for path in (store_root / "manifests").rglob("*.json"):
        try:
            source = json.loads(path.read_text()).get("meta", {}).get("source")
        except (OSError, ValueError):
            source = None
        if source != "inductor.isa_probe":
            keys.add(path.stem)
    return keys
