"""What a warm's `--steps N` counts: training steps, not backward calls.

A script with gradient accumulation (build-nanogpt: 8 micro-steps per optimizer step) used to be
stopped at its third backward, inside the first accumulation loop: the optimizer's step, the grad
clipping and any compiled code after the loop never ran, and the summary called the micro-steps
steps. With an optimizer made, a step now ends at the optimizer's step (several optimizers
stepping together count once); the hook that sees it leaves a compiled `opt.step()`'s graph as it
was. Without an optimizer, each backward is a step, as before.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from pcompile.warm.stop import StepCounter, WarmStop


def _train(counter: StepCounter | None, micro: int, optimizers: int = 2, stray: bool = False) -> tuple[list[int], str]:
    """A loop with `micro` backward calls per step and a compiled AdamW step; returns the steps
    that finished and a hash of the compiled step's FX graphs."""
    codes: list[str] = []

    def backend(gm, _inputs):
        codes.append(gm.code)
        return gm.forward

    if counter is not None:
        counter.install()
    try:
        if stray:  # modded-nanogpt, at import: "prevents a bug on some systems"
            torch.empty(1, requires_grad=True).backward()
        model = torch.nn.Linear(4, 4)
        opts = [torch.optim.AdamW(model.parameters(), lr=0.1), torch.optim.SGD(model.parameters(), lr=0.1)][:optimizers]

        @torch.compile(backend=backend)
        def adam_step():
            opts[0].step()

        finished: list[int] = []
        try:
            for step in range(5):
                for _ in range(micro):
                    model(torch.randn(2, 4)).sum().backward()
                adam_step()
                for opt in opts[1:]:
                    opt.step()
                finished.append(step)
        except WarmStop:
            pass
    finally:
        if counter is not None:
            counter.uninstall()
        torch._dynamo.reset()
    return finished, hashlib.sha1("".join(codes).encode()).hexdigest()


def test_gradient_accumulation_counts_optimizer_steps_and_leaves_the_compiled_step_alone():
    counter = StepCounter(2)
    finished, graphs = _train(counter, micro=3)
    assert finished == [0, 1]  # both steps ran their optimizers; stopped at step 2's first backward
    assert counter.finish() == 2 and counter.backwards == 6
    _, stock = _train(None, micro=3)
    assert graphs == stock  # the post-hook is not in the compiled step's graph


def test_a_backward_before_the_optimizer_is_made_is_no_step():
    counter = StepCounter(2)
    finished, _ = _train(counter, micro=1, optimizers=1, stray=True)
    assert finished == [0, 1] and counter.finish() == 2 and counter.backwards == 3


def test_a_script_without_an_optimizer_counts_backward_calls():
    counter = StepCounter(3)
    counter.install()
    try:
        w = torch.ones(3, requires_grad=True)
        n = 0
        with pytest.raises(WarmStop):
            for n in range(10):
                (w * 2).sum().backward()
                with torch.no_grad():
                    w -= 0.1 * w.grad
    finally:
        counter.uninstall()
    assert counter.finish() == 3 and n == 3


def test_a_backward_the_script_failed_after_is_no_step():
    counter = StepCounter(2)
    counter.install()
    try:
        torch.empty(1, requires_grad=True).backward()  # then the import of a missing module fails
    finally:
        counter.uninstall()
    assert counter.finish(completed=False) == 0 and counter.backwards == 1


def test_the_last_step_counts_when_the_script_ends_after_its_optimizer():
    counter = StepCounter(0)  # --steps all
    finished, _ = _train(counter, micro=2, optimizers=1)
    assert finished == [0, 1, 2, 3, 4] and counter.finish() == 5 and counter.backwards == 10


ACCUMULATING = """\
import torch
model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)

@torch.compile
def clip(total):
    return total.clamp(max=1.0) * 0.5

for step in range(10):
    for micro in range(4):
        loss = model(torch.randn(2, 8, device="cuda")).square().mean() / 4
        loss.backward()
    norm = clip(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9))
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"finished step {step}", flush=True)
"""


def _warm(tmp_path: Path, script: str, *args: str, files: dict[str, str] | None = None,
          env: dict[str, str] | None = None) -> tuple[dict, str]:
    """`pcompile warm train.py --json` of `script` (and `files` beside it) in a job dir; (its JSON
    result, its output)."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(script)
    for name, text in (files or {}).items():
        (job / name).write_text(text)
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", "train.py", "--target", "h100",
           "--cache-dir", str(tmp_path / "cache"), "--json", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=str(job),
                         env=dict(os.environ, PCOMPILE_PROGRESS="0", PCOMPILE_DISABLE="1", **(env or {})))
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    return json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]), log


@pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")
def test_warm_of_an_accumulating_script_runs_whole_steps(tmp_path):
    res, log = _warm(tmp_path, textwrap.dedent(ACCUMULATING))
    rep = res["report"]
    assert rep["steps_done"] == 2 and rep["backward_calls"] == 8, rep
    assert "finished step 1" in log and "finished step 2" not in log
    assert rep["counters"]["inductor"]["fxgraph_cache_miss"] == 1  # the compiled code after the loop
    assert any(ln.startswith("warm done: 2 steps (8 backward calls)") for ln in res["lines"]), res["lines"]


TEARDOWN = """\
import torch
model = torch.nn.LayerNorm(8).cuda()  # saves its weight itself for the backward
opt = torch.optim.SGD(model.parameters(), lr=0.1)

scale = torch.compile(lambda loss: (loss * 0.5).exp())  # steps count once compiled code runs in them

def fit():
    for step in range(10):
        loss = scale(model(torch.randn(2, 8, device="cuda")).square().mean())
        loss.backward()
        opt.step()
        opt.zero_grad()

try:
    fit()
except BaseException:  # a framework's handler: Lightning's teardown moves the model to the CPU
    model.cpu()
    raise
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")
def test_a_cleanup_that_fails_on_the_interrupted_step_is_no_script_failure(tmp_path):
    """The stop interrupts step 3 with its autograd graph alive (the traceback keeps `loss`), so the
    handler's `model.cpu()` met parameters the graph still holds, and the warm's in-place swap
    refused them ("Couldn't swap LayerNorm.weight"): the warm failed after 2 good steps. An error that
    arises while the stop propagates is the stop's: the warm is done, and says what the cleanup raised."""
    res, log = _warm(tmp_path, TEARDOWN)
    assert "Traceback" not in log, log[-3000:]
    assert res["report"]["status"] == "stopped" and res["report"]["steps_done"] == 2, res["report"]
    assert any(ln.startswith("after the stop, the script's cleanup raised RuntimeError") for ln in res["lines"]), res["lines"]


BASELINE_HELPER = """\
def run_eager(model, opt, x, steps):
    for _ in range(steps):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if loss.item() > 1e9:  # a value read in the script's own helper module
            print("diverged")
"""

BASELINE = """\
import torch, torch.nn as nn
from helper import run_eager

model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16, device="cuda")
run_eager(model, opt, x, 2)  # the eager baseline first: two backward calls


def step(x):
    loss = model(x).square().mean()
    loss.backward()  # inside the compiled function: a graph break, then the warm's backward
    return loss


cstep = torch.compile(step)
for i in range(6):
    cstep(x)
    opt.step()
    opt.zero_grad()
    print("compiled step", i, flush=True)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")
def test_an_eager_baseline_is_no_step_and_dynamo_never_traces_pcompile(tmp_path):
    """Issue 31 items 3, 5, 7: the default 2-step warm of a script that times two eager steps first
    ran no compiled code (rc 0, nothing compiled, no notice); Dynamo compiled the warm's backward
    wrapper (`loss.backward()` inside a compiled function), warning about `time.monotonic`; the
    value read in helper.py was put on the script's outer line."""
    res, log = _warm(tmp_path, BASELINE, files={"helper.py": BASELINE_HELPER}, env={"TORCH_LOGS": "dynamo"})
    rep = res["report"]
    assert rep["status"] == "stopped" and rep["steps_done"] == 2 and rep["eager_steps"] == 2, rep
    assert "compiled step 1" in log and "compiled step 2" not in log, log[-3000:]
    assert any("2 eager steps before them" in ln for ln in res["lines"]), res["lines"]
    traced = [ln for ln in log.splitlines() if "_dynamo" in ln and os.sep + "pcompile" + os.sep in ln]
    assert not traced, traced  # no pcompile frame started, skipped or failed in Dynamo's log
    assert "time.monotonic" not in log
    sites = [(Path(r["file"]).name, r["source"]) for r in rep["reads"]["lines"]]
    assert sites == [("helper.py", "if loss.item() > 1e9:  # a value read in the script's own helper module")], sites


CAPTURED = """\
import torch, torch.nn as nn

model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16, device="cuda")
fwd = torch.compile(model)
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):  # warm-up before capture, as torch's docs do
    fwd(x).square().mean().backward()
    opt.step()
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=False)
with torch.cuda.graph(g):
    loss = fwd(x).square().mean()
    loss.backward()
    opt.step()
for i in range(30):
    g.replay()
    print("replay", i, flush=True)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")
def test_cuda_graph_replays_of_a_captured_step_are_steps(tmp_path):
    """`--steps 2` ran all 30 replays of a captured training step and said 2/2: the capture's
    backward was its only step. Each replay is one now: warm-up step, one replay, stop."""
    res, log = _warm(tmp_path, CAPTURED, "--steps", "2")
    rep = res["report"]
    assert rep["status"] == "stopped" and rep["steps_done"] == 2 and rep["graph_replays"] == 1, rep
    assert "replay 0" in log and "replay 1" not in log, log[-3000:]


EAGER_ONLY = """\
import torch
model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
unused = torch.compile(model)  # made, never called
for step in range(3):
    model(torch.randn(2, 8, device="cuda")).sum().backward()
    opt.step()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")
def test_the_summary_says_when_no_compiled_code_ran(tmp_path):
    res, _ = _warm(tmp_path, EAGER_ONLY)
    assert res["report"]["status"] == "completed" and res["report"]["compiled_runs"] == 0, res["report"]
    assert any(ln.startswith("note: the script ended before any compiled code ran (3 eager steps)") for ln in res["lines"]), res["lines"]
