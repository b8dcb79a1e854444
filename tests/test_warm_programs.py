"""The job after a warm runs from the warm's programs: no Dynamo trace (compat/warm_programs.py).

The warm runs the script on fakes; the "GPU job" is the same script run for real on the virtual
device (it compiles, loads and launches as on a GPU; no matmul, which the virtual device cannot
run). Each job is a fresh process, with programs on as by default.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pcompile.inductor import _testing as t
from pcompile.vdev import build, preload
from pcompile.vdev.profile import resolve

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")

#: Two frames (a graph break), parameters, a buffer and a LayerNorm, trained for two steps.
SCRIPT = r'''
import json, os
import torch

torch.manual_seed(0)
batch = int(os.environ.get("CASE_BATCH", "16"))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64))
        self.b = torch.nn.Parameter(torch.zeros(64))
        self.register_buffer("shift", torch.full((64,), 0.25))
        self.ln = torch.nn.LayerNorm(64)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.ln(x * self.w + self.b))
        torch._dynamo.graph_break()
        return torch.where(h > 0, h, h + self.shift).sum(-1)


model = Block().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = torch.compile(model)
for _ in range(2):
    opt.zero_grad()
    out = step(torch.randn(batch, 64, device="cuda"))
    out.float().pow(2).mean().backward()
    opt.step()
if os.environ.get("CASE_REPORT"):
    from torch._dynamo.utils import counters
    from pcompile.inductor import programs
    print("RESULT " + json.dumps({"frames": counters["frames"].get("ok", 0),
                                  "loaded": sum(programs.loaded.values())}), flush=True)
'''


@pytest.fixture(scope="module")
def lib(vdev_dir: Path) -> Path:
    return build.library()


@pytest.fixture(scope="module")
def warmed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    tmp = tmp_path_factory.mktemp("warm_programs")
    script = t.write_script(tmp, "train.py", SCRIPT)
    cache = tmp / "cache"
    env = t.clean_env(PCOMPILE_PROGRESS="0", PCOMPILE_PROGRAMS="1")
    proc = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "warm", str(script), "--target", "h100",
                           "--cache-dir", str(cache)], env=env, cwd=str(tmp), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return script, cache, proc


def job(lib: Path, script: Path, cache: Path, **extra: str) -> tuple[dict, str]:
    work = script.parent / f"vdev-job-{len(list(script.parent.glob('vdev-job-*')))}"
    work.mkdir()
    env = preload.child_env(lib, resolve("h100"), work, strict=False,
                            base=t.clean_env(PCOMPILE_CACHE_DIR=str(cache), PCOMPILE_PROGRAMS="1"))
    env.update(PCOMPILE="1", CASE_REPORT="1", **extra)
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=str(script.parent), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), proc.stderr


def program_entries(cache: Path) -> list[Path]:
    return sorted((cache / "store" / "manifests" / "program").rglob("*.json"))


def test_the_warm_writes_a_program_and_the_job_after_it_traces_nothing(lib, warmed):
    script, cache, _ = warmed
    assert program_entries(cache), "the warm wrote no program"
    got, err = job(lib, script, cache)
    # both frames of the graph break came from the warm's program: its guards passed on real tensors
    assert got == {"frames": 0, "loaded": 2}, (got, err[-3000:])
    assert "PcompileFallbackWarning" not in err, err[-3000:]


def test_a_job_whose_tensors_differ_from_the_warms_fails_the_guards_and_traces(lib, warmed):
    """The guards check the job's tensors for real: another batch size re-traces, and runs."""
    script, cache, _ = warmed
    got, err = job(lib, script, cache, CASE_BATCH="24", PCOMPILE_EVENTS="1")
    assert got["loaded"] == 2 and got["frames"] >= 1, (got, err[-3000:])
    failed = [json.loads(line) for log in (cache / "events").glob("*.jsonl") for line in log.read_text().splitlines()
              if '"program_guard_failed"' in line]
    assert failed and "expected 16, actual 24" in failed[0]["reason"], (failed, err[-3000:])  # named, not silent


def test_a_warm_never_loads_a_program(warmed, tmp_path):
    """The warm traces to fill the caches; its guards stand for real tensors its fakes never pass."""
    script, cache, first = warmed
    env = t.clean_env(PCOMPILE_PROGRESS="0", PCOMPILE_PROGRAMS="1")
    proc = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "warm", str(script), "--target", "h100",
                           "--cache-dir", str(cache), "--json"], env=env, cwd=str(script.parent),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    assert result["report"]["counters"]["stats"].get("unique_graphs", 0) >= 2, result["report"]["counters"]  # traced
    assert "program" not in json.dumps(result["lookups"]), result["lookups"]


def test_a_program_is_keyed_by_the_gpu_a_rank_will_use_before_cuda_is_initialised(monkeypatch) -> None:
    """A warm never initialises CUDA: rank r of a `--world-size W --ranks all` warm must key its
    program as the GPU job's rank r does after `set_device(r)` (each rank runs its own program)."""
    import torch

    from pcompile.inductor import programs

    if torch.cuda.is_initialized():
        pytest.skip("CUDA is initialised in this process")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert programs.device_context() == {"cuda_device": 1, "local_rank": "1"}
    monkeypatch.delenv("LOCAL_RANK")
    assert programs.device_context() == {"cuda_device": 0, "local_rank": None}


#: torchrun-style DDP around a compiled module of the script's own (nanoGPT's order), elementwise
#: (no matmul on the virtual device); gloo in the job (no NCCL on the virtual device)
DDP_SCRIPT = r'''
import json, os
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend=os.environ.get("CASE_BACKEND", "nccl"))
rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
torch.manual_seed(0)


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.ParameterList(nn.Parameter(torch.randn(512)) for _ in range(4))

    def forward(self, x):
        for w in self.w:
            x = torch.relu(x * w + 0.5)
        return x


model = torch.compile(Stack().cuda())
ddp = DDP(model, device_ids=[rank], bucket_cap_mb=1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    ddp(torch.randn(8, 512, device="cuda")).mean().backward()
    opt.step()
    opt.zero_grad()
if os.environ.get("CASE_REPORT"):
    from torch._dynamo.utils import counters
    from pcompile.inductor import programs
    print("RESULT " + json.dumps({"rank": rank, "loaded": sum(programs.loaded.values()),
                                  "aot": dict(counters["aot_autograd"])}), flush=True)
'''


def test_every_rank_of_a_ddp_job_runs_from_a_ranks_all_warms_programs(lib, tmp_path) -> None:
    """`--world-size 2 --ranks all`: each rank's program is keyed by its GPU, and the warm runs with
    torchrun's OMP_NUM_THREADS=1, which every frame's guards check: the job's ranks install their
    programs and never reach AOTAutograd for the forward (before: both traced it again)."""
    script = t.write_script(tmp_path, "train.py", DDP_SCRIPT)
    cache = tmp_path / "cache"
    env = t.clean_env(PCOMPILE_PROGRESS="0", PCOMPILE_PROGRAMS="1")
    env.pop("OMP_NUM_THREADS", None)
    warm = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "warm", str(script), "--target", "h100",
                           "--world-size", "2", "--ranks", "all", "--cache-dir", str(cache)], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=900)
    assert warm.returncode == 0, (warm.stdout + warm.stderr)[-4000:]
    work = tmp_path / "vdev-ddp"
    work.mkdir()
    job_env = preload.child_env(lib, resolve("h100"), work, strict=False, devices=2,
                                base=t.clean_env(PCOMPILE_CACHE_DIR=str(cache), PCOMPILE_PROGRAMS="1"))
    job_env.pop("OMP_NUM_THREADS", None)
    job_env.update(PCOMPILE="1", CASE_REPORT="1", CASE_BACKEND="gloo")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)],
                          env=job_env, cwd=str(tmp_path), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # the ranks print at once: two results can share a line, so each is decoded where its marker ends
    decoder, text = json.JSONDecoder(), proc.stdout
    found = [decoder.raw_decode(text, at + len("RESULT "))[0] for at in _marks(text, "RESULT ")]
    ranks = sorted(found, key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1], proc.stdout[-2000:]
    for r in ranks:
        assert r["loaded"] >= 1 and not r["aot"].get("autograd_cache_hit") and not r["aot"].get("autograd_cache_miss"), \
            (r, proc.stderr[-3000:])


def _marks(text: str, mark: str) -> list[int]:
    at, out = text.find(mark), []
    while at >= 0:
        out.append(at)
        at = text.find(mark, at + 1)
    return out


def test_the_warm_runs_with_the_thread_count_its_profile_recorded_on_the_gpu_host(lib, tmp_path) -> None:
    """Every frame's guards check torch's thread count (one per core by default): a warm on a host
    with another core count wrote programs no job on the GPU node could install, and the job traced
    every frame. A `pcompile profile` records the GPU host's count and the warm runs with it
    (warm/host_threads.py); the job here stands for that host by running with the count recorded."""
    import torch

    here = torch.get_num_threads()
    if here < 2:
        pytest.skip("one CPU thread here: no other count to stand for the GPU host's")
    gpu_threads = 1  # torch caps OMP_NUM_THREADS at this host's cores: the job can only run with fewer
    board = dict(resolve("h100").data, host={"cpu_threads": gpu_threads}, software={})
    profile = tmp_path / "board.json"
    profile.write_text(json.dumps(board))
    script = t.write_script(tmp_path, "train.py", SCRIPT)
    cache = tmp_path / "cache"
    env = t.clean_env(PCOMPILE_PROGRESS="0", PCOMPILE_PROGRAMS="1")
    env.pop("OMP_NUM_THREADS", None)
    warm = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "warm", str(script), "--target", str(profile),
                           "--cache-dir", str(cache)], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=600)
    assert warm.returncode == 0, (warm.stdout + warm.stderr)[-4000:]
    got, err = job(lib, script, cache, OMP_NUM_THREADS=str(gpu_threads))
    assert got == {"frames": 0, "loaded": 2}, (got, err[-3000:])


def test_the_thread_count_is_left_to_the_user_torchrun_or_the_warm_where_the_profile_does_not_say() -> None:
    from pcompile.warm import host_threads

    recorded = {"host": {"cpu_threads": 16}}
    assert host_threads.threads_for(recorded, 0, {}) == 16
    assert host_threads.threads_for(recorded, 0, {"OMP_NUM_THREADS": "4"}) is None  # the user's own setting
    assert host_threads.threads_for(recorded, 2, {}) is None  # torchrun's ranks: fakepg.env_for sets 1
    assert host_threads.threads_for({}, 0, {}) is None  # a built-in profile: the warm's own count
    assert host_threads.threads_for({"host": {"cpu_threads": True}}, 0, {}) is None
