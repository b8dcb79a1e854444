"""Whole-program entries: a second process runs a compiled model without any Dynamo trace.

Every case runs real child processes on one cache dir, a compiled CPU training step each, and
reads Dynamo's own counters (`frames`: frames Dynamo converted) and pcompile's program counts.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conftest import run_py

MODEL = """\
import torch
from helpers import act


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)
        self.l2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.l2(act(self.l1(x))) + x


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x.pow(2).mean()
"""

HELPERS = """\
import torch


def act(x):
    return torch.relu(x)
"""

JOB = """
import json, sys, torch
from torch._dynamo.utils import counters
sys.path.insert(0, {lib!r})
from model import Net
from pcompile.inductor import programs

torch.manual_seed(0)
net = Net()
cnet = torch.compile(net, backend="pcompile", **{kwargs})
opt = torch.optim.SGD(net.parameters(), lr=0.1)
losses = []
for rows in {rows}:
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled={amp}):
        loss = cnet(torch.ones(rows, 16) * 0.5)
    loss.backward()
    opt.step()
    losses.append(round(float(loss), 6))
print("RESULT", json.dumps({{"frames": dict(counters["frames"]), "programs": programs.snapshot(), "losses": losses}}))
"""


@pytest.fixture(autouse=True)
def programs_on(cache_env: dict[str, str]) -> None:
    cache_env["PCOMPILE_PROGRAMS"] = "1"  # opt-in (programs.wanted() says why)


@pytest.fixture
def lib(tmp_path: Path) -> Path:
    d = tmp_path / "lib"
    d.mkdir()
    (d / "model.py").write_text(MODEL)
    (d / "helpers.py").write_text(HELPERS)
    return d


def job(lib: Path, env: dict[str, str], rows: tuple[int, ...] = (4, 4), kwargs: str = "{}", amp: bool = False) -> dict:
    proc = run_py(JOB.format(lib=str(lib), rows=list(rows), kwargs=kwargs, amp=amp), env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT "):])
    out["stderr"] = proc.stderr
    return out


def test_second_process_runs_without_any_dynamo_trace(lib: Path, cache_env: dict[str, str]) -> None:
    first = job(lib, cache_env)
    assert first["frames"].get("total", 0) >= 1
    assert first["programs"]["saved"] == 1 and first["programs"]["loaded"] == 0
    second = job(lib, cache_env)
    assert second["frames"].get("total", 0) == 0, second["frames"]  # Dynamo converted no frame
    assert second["programs"]["loaded"] == 1
    assert second["losses"] == first["losses"]
    assert "is dropped with caching_precompile" not in first["stderr"] + second["stderr"]


def test_a_model_run_under_autocast_loads_without_a_trace(lib: Path, cache_env: dict[str, str]) -> None:
    """Tensor guards fold the thread's dispatch-key state (autocast adds its key) into the keys they
    expect; torch rebuilds a loaded program's guards at torch.compile(), outside the caller's
    autocast, so without care every call under autocast failed them (found on the H100)."""
    first = job(lib, cache_env, amp=True)
    assert first["programs"]["saved"] == 1
    second = job(lib, cache_env, amp=True)
    assert second["programs"]["loaded"] == 1 and second["programs"]["not_covered"] == 0
    assert second["frames"].get("total", 0) == 0, second["frames"]
    assert second["losses"] == first["losses"]


def test_editing_one_line_of_the_model_file_recompiles(lib: Path, cache_env: dict[str, str]) -> None:
    first = job(lib, cache_env)
    model = lib / "model.py"
    model.write_text(model.read_text().replace("return x.pow(2).mean()", "return x.pow(2).mean() * 2"))
    second = job(lib, cache_env)
    assert second["programs"]["loaded"] == 0 and second["frames"]["total"] >= 1
    assert second["losses"][0] == pytest.approx(2 * first["losses"][0], rel=1e-5)  # the edited code ran


def test_editing_an_inlined_function_in_another_file_refuses_the_program(lib: Path, cache_env: dict[str, str]) -> None:
    first = job(lib, cache_env)
    (lib / "helpers.py").write_text(HELPERS.replace("torch.relu(x)", "torch.relu(x) * 3"))
    second = job(lib, cache_env)
    assert second["programs"]["refused"] == 1 and second["programs"]["loaded"] == 0
    assert second["frames"]["total"] >= 1
    assert second["losses"][0] != first["losses"][0]
    assert "helpers" in second["stderr"] and "changed since it was compiled" in second["stderr"]
    assert "Traceback" not in second["stderr"]
    third = job(lib, cache_env)  # the program was stored again for the new code
    assert third["programs"]["loaded"] == 1 and third["frames"].get("total", 0) == 0
    assert third["losses"] == second["losses"]


def test_a_failing_guard_falls_back_and_the_program_grows(lib: Path, cache_env: dict[str, str]) -> None:
    job(lib, cache_env, rows=(4, 4), kwargs='{"dynamic": False}')
    second = job(lib, cache_env, rows=(4, 6), kwargs='{"dynamic": False}')  # 6 rows: the shape guard fails
    assert second["programs"]["loaded"] == 1 and second["programs"]["not_covered"] == 1
    assert second["frames"]["total"] >= 1
    assert "did not cover this call" in second["stderr"]
    third = job(lib, cache_env, rows=(4, 6), kwargs='{"dynamic": False}')
    assert third["frames"].get("total", 0) == 0 and third["programs"]["not_covered"] == 0


def test_another_compile_setting_is_another_program(lib: Path, cache_env: dict[str, str]) -> None:
    job(lib, cache_env)
    other = job(lib, cache_env, kwargs='{"options": {"epilogue_fusion": False}}')
    assert other["programs"]["loaded"] == 0 and other["frames"]["total"] >= 1


def test_a_corrupted_program_is_detected_and_compiled_again(lib: Path, cache_env: dict[str, str]) -> None:
    first = job(lib, cache_env)
    tiers = [Path(cache_env["PCOMPILE_CACHE_DIR"]), Path(cache_env["PCOMPILE_SHARED_DIR"])]
    manifests = list(tiers[0].rglob("manifests/program/*/*.json"))
    assert len(manifests) == 1
    blob_sha = json.loads(manifests[0].read_text())["blobs"]["program"]["sha256"]
    blobs = [b for tier in tiers for b in tier.rglob(f"blobs/{blob_sha[:2]}/{blob_sha}")]
    assert len(blobs) == 2  # the local tier and the shared one: a bad local copy is fetched again
    for blob in blobs:
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.chmod(0o644)
        blob.write_bytes(bytes(data))
    second = job(lib, cache_env)
    assert second["programs"]["loaded"] == 0 and second["frames"]["total"] >= 1
    assert any(any(q.iterdir()) for tier in tiers for q in tier.rglob("quarantine") if q.is_dir())  # reported
    assert second["losses"] == first["losses"]
    third = job(lib, cache_env)
    assert third["programs"]["loaded"] == 1 and third["frames"].get("total", 0) == 0


def test_programs_off_traces_as_usual(lib: Path, cache_env: dict[str, str]) -> None:
    env = {**cache_env, "PCOMPILE_PROGRAMS": "0"}
    job(lib, env)
    second = job(lib, env)
    assert second["frames"]["total"] >= 1 and second["programs"]["loaded"] == 0


def test_model_compile_of_torch_code_is_not_stored(lib: Path, cache_env: dict[str, str]) -> None:
    code = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {str(lib)!r})
        from model import Net
        from pcompile.inductor import hooks, programs
        hooks.at_torch_compile()  # what torch.compile(backend="pcompile") does first
        net = Net()
        net.compile(backend="pcompile")
        net(torch.ones(4, 16)).backward()
        print("RESULT", programs.snapshot())
    """)
    proc = run_py(code, env=cache_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "'saved': 0" in proc.stdout and "'loaded': 0" in proc.stdout


def test_a_lazily_lowered_backward_still_gets_its_program_stored(lib: Path, cache_env: dict[str, str]) -> None:
    env = {**cache_env, "PCOMPILE_EAGER_BACKWARD": "0"}  # the AOTAutograd entry completes at .backward()
    first = job(lib, env)
    assert first["programs"]["pending"] >= 1 and first["programs"]["saved"] >= 1
    second = job(lib, env)
    assert second["programs"]["loaded"] == 1 and second["frames"].get("total", 0) == 0
    assert second["losses"] == first["losses"]
