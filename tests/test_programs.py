"""Programs: a restarted job runs its compiled functions without Dynamo (pcompile/inductor/programs.py).

Each case is a real job in a fresh process on CPU graphs: the first run compiles and saves, the next
run with the same cache dir must convert zero frames and compute what the first (and stock) computed.
Whatever the program cannot vouch for (a failing guard, an edited source, another compile option, a
damaged entry) must fall back to Dynamo with stock's result, never run stale code.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

SCRIPT = r'''
import json, os, sys
import torch
import torch.nn.functional as F
from helper import act

if os.environ.get("CASE_BREAK_INSTALL") == "1":  # torch fails mid-install, after it put globals in place
    import torch._dynamo.package as _package
    def _broken(*args, **kwargs):
        raise AttributeError("'_Missing' object has no attribute '__name__'")
    _package.load_guard_manager = _broken

torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)
    def forward(self, x):
        return self.fc2(act(self.fc1(x)))

if os.environ.get("CASE_WRAPPED") == "1":  # forward wrapped by a decorator of another module
    from deco import checked
    Net.forward = checked(Net.forward)

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
options = json.loads(os.environ.get("CASE_OPTIONS", "null"))
backend = os.environ.get("CASE_BACKEND", "pcompile")
compiled = torch.compile(model, backend=backend, options=options) if options else torch.compile(model, backend=backend)
x = torch.randn(8, 16)
y = torch.randint(0, 4, (8,))
losses = []
for _ in range(2):
    loss = F.cross_entropy(compiled(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
out = {"losses": losses}
if os.environ.get("CASE_NO_GRAD") == "1":
    with torch.no_grad():
        got = compiled(x)
        out["no_grad_err"] = float((got - model(x)).abs().max())
        out["no_grad_requires_grad"] = got.requires_grad
from torch._dynamo.utils import counters
out["frames"] = int(counters["frames"]["total"])
out["aot_hits"] = int(counters["aot_autograd"]["autograd_cache_hit"])
print("RESULT " + json.dumps(out))
'''

HELPER = "import torch.nn.functional as F\n\ndef act(x):\n    return F.gelu(x)\n"
#: functools.wraps copies the wrapped function's __module__; the wrapper runs in this module's
#: globals (as transformers' can_return_tuple around every HF model's forward)
DECO = ("import functools\n\n_enabled = True\n\n\ndef checked(fn):\n    @functools.wraps(fn)\n"
        "    def wrapper(self, *args, **kwargs):\n        if not _enabled:\n            raise RuntimeError('off')\n"
        "        return fn(self, *args, **kwargs)\n    return wrapper\n")


def _run(work: Path, cache: Path, **env: str) -> dict[str, Any]:
    full = {**os.environ, "PCOMPILE_CACHE_DIR": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
            "PCOMPILE_EVENTS": "1", "PCOMPILE_POOL": "off", "PCOMPILE_PROGRAMS": "1", "PYTHONPATH": os.pathsep.join(
                [str(work), str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]), **env}
    proc = subprocess.run([sys.executable, str(work / "job.py")], cwd=work, env=full, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    result["stderr"] = proc.stderr
    result["program_lookups"] = _program_lookups(cache)
    return result


def _program_lookups(cache: Path) -> list[str]:
    """The outcome of every program look-up in the cache's event logs, oldest first."""
    out: list[tuple[float, str]] = []
    for log in (cache / "events").glob("*.jsonl"):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("kind") == "cache_lookup" and event.get("layer") == "program":
                out.append((float(event["ts"]), str(event.get("outcome"))))
    return [outcome for _, outcome in sorted(out)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    """A job that compiled once and saved its program (the cache is copied by each test that writes)."""
    work = tmp_path_factory.mktemp("prog-work")
    (work / "job.py").write_text(SCRIPT)
    (work / "helper.py").write_text(HELPER)
    cache = tmp_path_factory.mktemp("prog-cache")
    first = _run(work, cache)
    assert first["frames"] >= 1 and first["program_lookups"] == ["miss"], first
    return work, cache, first


def _job_dir(work: Path) -> Path:
    """A fresh copy of the job (its script and helper modules)."""
    work.mkdir()
    (work / "job.py").write_text(SCRIPT)
    (work / "helper.py").write_text(HELPER)
    (work / "deco.py").write_text(DECO)
    return work


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_a_restart_converts_no_frame_and_computes_what_the_first_run_and_stock_did(saved, tmp_path: Path) -> None:
    work, cache, first = saved
    again = _run(work, _copy(cache, tmp_path / "c"))
    assert again["frames"] == 0, again["stderr"][-3000:]
    assert again["program_lookups"][-1] == "hit"
    assert again["losses"] == first["losses"]
    stock = _run(work, tmp_path / "stock", CASE_BACKEND="inductor", PCOMPILE_DISABLE="1")
    assert stock["losses"] == first["losses"]


def test_a_failing_guard_traces_again_with_the_right_result(saved, tmp_path: Path) -> None:
    """The program was traced with grad on; a call under no_grad fails its guard and Dynamo traces it
    (torch 2.14.1 crashed here on a name the loaded program already held: compat bumps the counter)."""
    work, cache, first = saved
    got = _run(work, _copy(cache, tmp_path / "c"), CASE_NO_GRAD="1")
    assert got["losses"] == first["losses"]
    assert got["frames"] >= 1
    assert got["no_grad_err"] < 1e-5 and got["no_grad_requires_grad"] is False


def test_an_edited_source_is_never_run_from_the_old_program(saved, tmp_path: Path) -> None:
    """The function the forward inlines changed (gelu -> relu): the job must compute relu."""
    work, cache, first = saved
    edited = _copy(work, tmp_path / "w")
    (edited / "helper.py").write_text(HELPER.replace("F.gelu", "F.relu"))
    got = _run(edited, _copy(cache, tmp_path / "c"))
    stock = _run(edited, tmp_path / "stock", CASE_BACKEND="inductor", PCOMPILE_DISABLE="1")
    assert got["losses"] == stock["losses"] != first["losses"]
    assert got["frames"] >= 1


def test_another_compile_option_is_a_miss(saved, tmp_path: Path) -> None:
    work, cache, first = saved
    got = _run(work, _copy(cache, tmp_path / "c"), CASE_OPTIONS=json.dumps({"epilogue_fusion": False}))
    assert got["program_lookups"][-1] == "miss"
    assert got["frames"] >= 1
    assert got["losses"] == pytest.approx(first["losses"], rel=1e-5)
    # the miss names what differs from the program the cache holds for the function (program_misses.py)
    said = [line for line in got["stderr"].splitlines() if "made under other settings" in line]
    assert len(said) == 1 and "Net.forward" in said[0] and "options" in said[0], got["stderr"][-2000:]
    assert "fingerprint" not in said[0] and "device" not in said[0], said[0]


def test_another_dynamo_setting_is_a_miss_that_names_the_setting(saved, tmp_path: Path) -> None:
    """A miss names the one setting of torch's ~800 that differs (the H200's after-warm miss named
    only `configs.dynamo` until per-setting digests were kept with each program)."""
    work, cache, first = saved
    got = _run(work, _copy(cache, tmp_path / "c"), TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS="1")
    assert got["program_lookups"][-1] == "miss"
    assert got["losses"] == pytest.approx(first["losses"], rel=1e-5)
    said = [line for line in got["stderr"].splitlines() if "made under other settings" in line]
    assert len(said) == 1 and "(configs.dynamo.capture_scalar_outputs)" in said[0], got["stderr"][-2000:]


def test_a_damaged_program_is_detected_and_never_loaded(saved, tmp_path: Path) -> None:
    work, cache, first = saved
    copy = _copy(cache, tmp_path / "c")
    manifests = list((copy / "store" / "manifests" / "program").rglob("*.json"))
    assert len(manifests) == 1
    blob_sha = json.loads(manifests[0].read_text())["blobs"]["value"]["sha256"]
    blobs = [p for p in (copy / "store" / "blobs").rglob("*") if p.is_file() and blob_sha in p.name]
    assert blobs, "the program's blob is not where the store keeps blobs"
    for blob in blobs:
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.chmod(0o644)
        blob.write_bytes(bytes(data))
    got = _run(work, copy)
    assert got["frames"] >= 1
    assert got["program_lookups"][-1] == "miss"
    assert got["losses"] == first["losses"]


def test_programs_off_traces_every_frame(saved, tmp_path: Path) -> None:
    work, cache, _first = saved
    got = _run(work, _copy(cache, tmp_path / "c"), PCOMPILE_PROGRAMS="0")
    assert got["frames"] >= 1 and got["program_lookups"] == ["miss"]


OPT_STEP = r'''
import json
import torch
torch.manual_seed(0)
m = torch.nn.Linear(8, 8)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

@torch.compile
def opt_step():
    opt.step()

for _ in range(2):
    m(torch.randn(4, 8)).sum().backward()
    opt_step()
    opt.zero_grad()
print("RESULT " + json.dumps({"weight_sum": float(m.weight.sum()), "frames": 0, "losses": []}))
'''


def test_a_frame_whose_guards_cannot_be_saved_still_compiles_and_restarts(tmp_path: Path) -> None:
    """A compiled `opt.step()` has guards torch cannot serialise: torch bypasses the package entry,
    then asserted `guards_state is not None` and failed the job (2.11 and 2.14.1). It must run, twice,
    with stock's result; and torch's per-guard warnings must not fill the job's stderr."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "job.py").write_text(OPT_STEP)
    cache = tmp_path / "c"
    first = _run(work, cache, PCOMPILE="1")
    again = _run(work, cache, PCOMPILE="1")
    stock = _run(work, tmp_path / "stock", PCOMPILE_DISABLE="1")
    assert first["weight_sum"] == again["weight_sum"] == stock["weight_sum"]
    assert "is dropped with caching_precompile=True" not in first["stderr"]
UNNAMEABLE_SCRIPT = r'''
import json
import torch
import torch.nn.functional as F

#: a function torch cannot name by module and qualified name ("<lambda>", reached through a dict),
#: converted as a frame of its own (a graph break inside it)
LOSSES = {"ce": lambda logits, y: (torch._dynamo.graph_break(), F.cross_entropy(logits, y))[1]}

torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)
    def forward(self, x, y):
        return LOSSES["ce"](self.fc(x), y)

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
compiled = torch.compile(model, backend="pcompile")
x = torch.randn(8, 16)
y = torch.randint(0, 4, (8,))
losses = []
for _ in range(2):
    loss = compiled(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
from torch._dynamo.utils import counters
print("RESULT " + json.dumps({"losses": losses, "frames": int(counters["frames"]["total"])}))
'''


def test_a_frame_torch_cannot_name_never_fails_the_job_and_the_rest_is_still_a_program(tmp_path: Path) -> None:
    """torch raised PackageError ("Cannot resolve a fully qualified name for <code object ...>") out
    of the compile: transformers' GPT-2 crashed under pcompile (its `loss_function` property getter,
    named since by compat/program_property_code.py). Such a frame is compiled and left out of the
    program (one warning), and a restart traces only it, also after a restart re-saved the program
    (the loaded frames keep their compiled graphs instead of being saved as bypassed)."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "job.py").write_text(UNNAMEABLE_SCRIPT)
    cache = tmp_path / "c"
    first = _run(work, cache)
    assert "left out of its program" in first["stderr"] and "PackageError" in first["stderr"]
    second = _run(work, cache)
    third = _run(work, cache)
    assert first["losses"] == second["losses"] == third["losses"]
    assert 1 <= second["frames"] < first["frames"], (first["frames"], second["frames"])
    assert third["frames"] == second["frames"], third["stderr"][-3000:]


def test_programs_and_backward_ahead_are_both_on_by_default_on_a_gpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backward ahead no longer gives way to programs (test_backward_ahead.py: a program saved with
    backwards compiled ahead is whole); `PCOMPILE_BACKWARD_AHEAD=0` still turns it off."""
    from pcompile.inductor import backward_ahead, features

    monkeypatch.setattr(backward_ahead, "_default_on", lambda: True)
    monkeypatch.delenv("PCOMPILE_PROGRAMS", raising=False)
    monkeypatch.delenv("PCOMPILE_BACKWARD_AHEAD", raising=False)
    assert features._programs_wanted() and features._backward_ahead_wanted()
    monkeypatch.setenv("PCOMPILE_BACKWARD_AHEAD", "0")
    assert not features._backward_ahead_wanted()


def test_a_program_lacking_a_compiled_graph_is_named(saved, tmp_path: Path) -> None:
    """When AOTAutograd saves no bundled entry for a graph (here: its cache is off), torch saves the
    program's frames bypassed; pcompile says which function and graphs, once, and the job goes on."""
    work, _cache, first = saved
    got = _run(work, tmp_path / "c", TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    assert "lacks" in got["stderr"] and "compiled graph" in got["stderr"], got["stderr"][-3000:]
    assert got["losses"] == first["losses"]


def test_a_program_torch_fails_to_install_traces_again_and_never_fails_the_job(saved, tmp_path: Path) -> None:
    """GPT-2's restart (torch 2.14.1): torch raised AttributeError inside CompilePackage.install after
    it had put the program's builtins dict into the module; torch catches only RuntimeError there,
    and Dynamo's fresh trace then reused that name (`Name '__builtins_dict___N' already exists`)."""
    work, cache, first = saved
    got = _run(work, _copy(cache, tmp_path / "c"), CASE_BREAK_INSTALL="1")
    assert "no program for" in got["stderr"] and "install: AttributeError" in got["stderr"]
    assert got["frames"] >= 1
    assert got["losses"] == first["losses"]


def test_a_job_with_programs_hits_the_entries_a_job_without_them_wrote(tmp_path: Path) -> None:
    """torch gives a graph another AOTAutograd key with caching_precompile on (its backend id's
    place in the GraphModule's pickled dict; on 2.14 also the id itself): a job with programs
    missed every entry a warm or job without them wrote. Now it hits them, then saves its program."""
    work = _job_dir(tmp_path / "w")
    cache = tmp_path / "c"
    without = _run(work, cache, PCOMPILE_PROGRAMS="0")
    assert without["frames"] >= 1 and without["aot_hits"] == 0, without
    first = _run(work, cache, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "fresh-inductor"))
    assert first["aot_hits"] >= 1, first["stderr"][-3000:]
    again = _run(work, cache, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "fresh-inductor-2"))
    assert again["frames"] == 0, again["stderr"][-3000:]
    assert without["losses"] == first["losses"] == again["losses"]


def test_a_program_saved_before_its_backward_was_compiled_is_saved_again_complete(tmp_path: Path) -> None:
    """A training graph's AOTAutograd entry is written after its lazily compiled backward (torch
    2.11 always; here PCOMPILE_EAGER_BACKWARD=0), i.e. after the frame's program was first saved:
    that save lacked the graph, and every restart traced the frame again. It is saved again after
    the optimizer step, complete."""
    work = _job_dir(tmp_path / "w")
    cache = tmp_path / "c"
    first = _run(work, cache, PCOMPILE_EAGER_BACKWARD="0")
    assert "lacks" not in first["stderr"], first["stderr"][-3000:]
    again = _run(work, cache, PCOMPILE_EAGER_BACKWARD="0", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "fresh-inductor"))
    assert again["frames"] == 0, again["stderr"][-3000:]
    assert again["losses"] == first["losses"]


def test_a_forward_wrapped_by_another_modules_decorator_restarts_without_tracing(tmp_path: Path) -> None:
    """torch files the program's main code under the wrapped function's module, but the wrapper runs
    in its own module's globals: the guards were rebuilt over the wrong globals, failed on every
    restart, and each restart traced the frame again and grew the program by one entry."""
    work, cache = _job_dir(tmp_path / "work"), tmp_path / "cache"
    runs = [_run(work, cache, CASE_WRAPPED="1") for _ in range(3)]
    assert runs[0]["frames"] >= 1, runs[0]
    assert [r["frames"] for r in runs[1:]] == [0, 0], [r["stderr"][-2000:] for r in runs[1:]]
    assert runs[1]["losses"] == runs[2]["losses"] == runs[0]["losses"]
    assert runs[0]["program_lookups"] == ["miss"] and runs[2]["program_lookups"] == ["miss", "hit", "hit"]


GROWING = r'''
import json, os
import torch
torch._dynamo.config.recompile_limit = 2
SCALE = int(os.environ["CASE_SCALE"])  # a Python constant Dynamo guards on: another value each run

@torch.compile(backend="pcompile")
def f(x):
    return (x * SCALE).sin()

x = torch.randn(8)
err = float((f(x) - (x * SCALE).sin()).abs().max())
from torch._dynamo.utils import counters
print("RESULT " + json.dumps({"losses": [err], "frames": int(counters["frames"]["total"]), "aot_hits": 0}))
'''


def _program_frames(cache: Path) -> list[int]:
    """The frame count each stored program's manifest records."""
    out = []
    for manifest in (cache / "store" / "manifests" / "program").rglob("*.json"):
        out.append(int(json.loads(manifest.read_text())["meta"]["frames"]))
    return out


def test_a_program_whose_guards_fail_on_every_restart_stays_within_the_recompile_limit(tmp_path: Path) -> None:
    """Each restart fails the stored entries' guards, traces the frame and saves one more entry: the
    program grew by one per restart without end (and each restart checked every stale guard first).
    It keeps the newest `recompile_limit` entries of a code, as Dynamo does within one process."""
    work, cache = tmp_path / "w", tmp_path / "c"
    work.mkdir()
    (work / "job.py").write_text(GROWING)
    runs = [_run(work, cache, CASE_SCALE=str(scale)) for scale in (2, 3, 4, 5)]
    assert all(r["frames"] == 1 and r["losses"][0] < 1e-6 for r in runs), runs
    assert _program_frames(cache) == [2], _program_frames(cache)
    again = _run(work, cache, CASE_SCALE="5")  # the newest entry is kept and still runs without tracing
    assert again["frames"] == 0 and again["losses"][0] < 1e-6, again["stderr"][-3000:]
    older = _run(work, cache, CASE_SCALE="2")  # dropped: traced again, never a wrong result
    assert older["frames"] == 1 and older["losses"][0] < 1e-6, older


MODULE_GLOBAL = r'''
import collections as _c  # the frame's globals hold `collections` under another name
import functools, json
import torch

def keep(func):
    @functools.wraps(func)
    def wrapper(self, x):
        out = func(self, x)
        return _c.OrderedDict(out=out, twice=out * 2)  # rebuilt by Dynamo's bytecode: it loads the module
    return wrapper

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    @keep
    def forward(self, x):
        return self.lin(x).relu()

torch.manual_seed(0)
out = torch.compile(Net(), backend="pcompile")(torch.ones(2, 8))
out["twice"].sum().backward()  # torch 2.11 writes a training graph's entry at its first backward
from torch._dynamo.utils import counters
print("RESULT " + json.dumps({"losses": [float(out["twice"].sum().detach())], "kind": type(out).__name__,
                              "frames": int(counters["stats"]["unique_graphs"])}))
'''


def test_a_module_the_bytecode_loads_through_a_global_is_installed_with_the_program(tmp_path: Path) -> None:
    """Dynamo's bytecode loads a module the frame's globals do not hold by its name through a global it
    installs (`___module_collections_<id>_c0`); the program did not record it, so the restart that ran
    the program raised NameError inside the model's forward (transformers' output wrapper, torch 2.15):
    a job that runs without programs failed with them. Now it is one of the program's import sources."""
    work, cache = tmp_path / "w", tmp_path / "c"
    work.mkdir()
    (work / "job.py").write_text(MODULE_GLOBAL)
    first = _run(work, cache)
    again = _run(work, cache)
    assert first["frames"] == 1 and again["frames"] == 0, again["stderr"][-3000:]
    assert again["losses"] == first["losses"] and again["kind"] == "OrderedDict"



PROPERTY_GETTER = r"""
import json, torch
import torch.nn.functional as F


class Base(torch.nn.Module):
    @property
    def loss_function(self):  # as transformers' PreTrainedModel.loss_function: a frame of its own
        torch._dynamo.graph_break()
        return F.mse_loss


class Net(Base):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x, y):
        return self.loss_function(self.fc(x), y)


torch.manual_seed(0)
model = Net()
compiled = torch.compile(model, backend="pcompile")
x, y = torch.randn(4, 8), torch.randn(4, 4)
losses = []
for _ in range(2):
    loss = compiled(x, y)
    loss.backward()
    losses.append(loss.item())
from torch._dynamo.utils import counters
print("RESULT " + json.dumps({"losses": losses, "frames": int(counters["frames"]["ok"])}))
"""


def test_a_frame_in_a_property_getter_restarts_from_the_program(tmp_path: Path) -> None:
    """A property's getter compiled as a frame of its own (every HF causal LM's `self.loss_function`)
    could not be named ("Lookup scope: <property object>"), so the program left it out and every
    restart traced it, with a warning (compat/program_property_code.py)."""
    _restarts_with_every_frame_in_its_program(tmp_path, PROPERTY_GETTER)


def _restarts_with_every_frame_in_its_program(tmp_path: Path, script: str) -> None:
    """The first run traces the frame torch could not name before; the restart traces none."""
    work, cache = tmp_path / "w", tmp_path / "c"
    work.mkdir()
    (work / "job.py").write_text(script)
    first = _run(work, cache)
    again = _run(work, cache)
    assert first["frames"] >= 2 and again["frames"] == 0, again["stderr"][-3000:]
    assert again["losses"] == first["losses"]
    assert "left out of its program" not in first["stderr"] + again["stderr"]


GENERATED_CODE = r"""
import dataclasses, json, torch
import torch.nn.functional as F


@dataclasses.dataclass
class Output:  # as transformers' ModelOutput subclasses: a dataclass, whose __init__ is exec'd code
    loss: torch.Tensor
    scale: float = 1.0

    def __post_init__(self):
        torch._dynamo.graph_break()
        self.loss = self.loss * self.scale


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x, y):
        return Output(F.mse_loss(self.fc(x), y), 2.0)


torch.manual_seed(0)
compiled = torch.compile(Net(), backend="pcompile")
x, y = torch.randn(4, 8), torch.randn(4, 4)
losses = []
for _ in range(2):
    loss = compiled(x, y).loss
    loss.backward()
    losses.append(loss.item())
from torch._dynamo.utils import counters
print("RESULT " + json.dumps({"losses": losses, "frames": int(counters["frames"]["ok"])}))
"""


def test_a_frame_in_exec_generated_code_restarts_from_the_program(tmp_path: Path) -> None:
    """A dataclass's generated `__init__` compiled as a frame of its own (a graph break in its
    `__post_init__`, as in transformers' ModelOutput) had no module torch could name ("file
    <string>"), so the program left it out and every restart traced it, with a warning
    (compat/program_generated_code.py)."""
    _restarts_with_every_frame_in_its_program(tmp_path, GENERATED_CODE)


GUARDED = r"""
import json, os, torch

torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x).sum()


compiled = torch.compile(Net(), backend="pcompile")
loss = compiled(torch.randn(int(os.environ.get("CASE_BATCH", "16")), 8))
loss.backward()
from torch._dynamo.utils import counters
print("RESULT " + json.dumps({"losses": [loss.item()], "frames": int(counters["frames"]["ok"])}))
"""


def test_a_call_that_fails_its_programs_guards_is_traced_and_the_failing_guard_named(tmp_path: Path) -> None:
    """The program installs, the call's batch is not the one its guards hold: Dynamo traces the
    frame (right), and the job's event log names the failing guard instead of looking like a job
    without programs (compat/program_guard_failures.py)."""
    work, cache = tmp_path / "w", tmp_path / "c"
    work.mkdir()
    (work / "job.py").write_text(GUARDED)
    _run(work, cache)
    other = _run(work, cache, CASE_BATCH="24")
    assert other["frames"] == 1, other["stderr"][-3000:]
    assert "PcompileFallbackWarning" not in other["stderr"], other["stderr"][-3000:]  # a new shape: recorded, not warned
    failed = _guard_failures(cache)
    assert [e.get("fn") for e in failed] == ["Net.forward"], failed
    assert "expected 16, actual 24" in failed[0]["reason"], failed
    again = _run(work, cache, CASE_BATCH="24")  # the program saved again holds both calls' guards
    assert again["frames"] == 0 and len(_guard_failures(cache)) == 1, again["stderr"][-3000:]


def _guard_failures(cache: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for log in (cache / "events").glob("*.jsonl") for line in log.read_text().splitlines()
            if '"program_guard_failed"' in line]


TRANSFORMERS = r'''
import json
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)
model = LlamaForCausalLM(cfg)
opt = torch.optim.AdamW(model.parameters())
compiled = torch.compile(model, backend="pcompile")
ids = torch.randint(0, 256, (2, 32))
losses = []
for _ in range(2):
    loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
from torch._dynamo.utils import counters
print("RESULT " + json.dumps({"losses": losses, "frames": int(counters["stats"]["unique_graphs"])}))
'''


def test_a_transformers_model_restarts_from_its_program(tmp_path: Path) -> None:
    """transformers' decorated forwards: a guard on the wrapped function (`L['func'].__name__`) could
    not be rebuilt on torch 2.11-2.14 (compat/program_wrapped_functions.py: the program was refused at
    every install), and its output wrapper's module global failed the job once it was not
    (compat/program_module_globals.py)."""
    pytest.importorskip("transformers")
    work, cache = tmp_path / "w", tmp_path / "c"
    work.mkdir()
    (work / "job.py").write_text(TRANSFORMERS)
    first = _run(work, cache)
    again = _run(work, cache)
    assert first["frames"] >= 1 and again["frames"] == 0, again["stderr"][-3000:]
    assert again["losses"] == first["losses"]
    assert "no program for" not in again["stderr"], again["stderr"][-3000:]
