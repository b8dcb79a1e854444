"""Issue 31 item 2: a checkpoint saved during a warm loads back inside the warm.

Saves of virtual tensors were skipped: a torch.save to a BytesIO (Lightning's atomic save, YOLO's
trainers) left it empty, so the script's own torch.load raised EOFError; a path got a text stub
(UnpicklingError). Now they write torch's format with empty records for the fakes' data
(compat/warm_checkpoints.py): O(1) bytes per tensor, the same keys, shapes and dtypes on load.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")

SCRIPT = """\
import io, os, torch, torch.nn as nn
model = nn.Sequential(nn.Linear(64, 1024), nn.GELU(), nn.Linear(1024, 8)).cuda().half()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step = torch.compile(lambda x: model(x).float().sum())
for i in range(2):
    step(torch.randn(4, 64, device="cuda", dtype=torch.half)).backward()
    opt.step(); opt.zero_grad()
rng = torch.get_rng_state()
ck = {"model": model.state_dict(), "opt": opt.state_dict(), "rng": rng, "epoch": 3}
os.makedirs("ckpt", exist_ok=True)
torch.save(ck, "ckpt/last.pt")                      # a path
buf = io.BytesIO(); torch.save(ck, buf)             # Lightning's atomic save: BytesIO, then write
with open("ckpt/atomic.pt", "wb") as fh: fh.write(buf.getvalue())
with open("ckpt/fobj.pt", "wb") as fh: torch.save(ck, fh)  # a file object
print("SIZES", max(os.path.getsize(p) for p in ("ckpt/last.pt", "ckpt/atomic.pt", "ckpt/fobj.pt")), flush=True)
want = [(k, tuple(v.shape), v.dtype) for k, v in model.state_dict().items()]
for src in ("ckpt/last.pt", "ckpt/atomic.pt", "ckpt/fobj.pt", io.BytesIO(buf.getvalue())):
    if not isinstance(src, str):
        src.seek(0)
    back = torch.load(src)
    got = [(k, tuple(v.shape), v.dtype) for k, v in back["model"].items()]
    assert got == want, (got, want)
    assert all(v.device.type == "cuda" for v in back["model"].values())
    assert back["epoch"] == 3 and torch.equal(back["rng"], rng)  # real tensors keep their bytes
    model.load_state_dict(back["model"]); opt.load_state_dict(back["opt"])
    if not isinstance(src, str):
        src.seek(0)
    cpu = torch.load(src, map_location="cpu", weights_only=True)["model"]["0.weight"]
    assert cpu.device.type == "cpu" and cpu.dtype == torch.half and tuple(cpu.shape) == (1024, 64)
    assert float(cpu.abs().sum()) == 0.0  # placeholders load as zeros
try:
    import safetensors.torch as st
except ImportError:
    st = None
if st is not None:  # HF save_pretrained's saver; save_model de-duplicates, then calls save_file
    st.save_file(model.state_dict(), "ckpt/model.safetensors", metadata={"format": "pt"})
    st.save_model(model, "ckpt/model2.safetensors")
    for path in ("ckpt/model.safetensors", "ckpt/model2.safetensors"):
        assert os.stat(path).st_blocks * 512 < 64 * 1024, os.stat(path)  # the data is a hole
        back = st.load_file(path)
        got = [(k, tuple(v.shape), v.dtype) for k, v in back.items()]
        assert sorted(got) == sorted(want), (got, want)
        assert float(back["0.weight"].abs().sum()) == 0.0
    print("SAFETENSORS", flush=True)
print("LOADED ALL", flush=True)
step(torch.randn(4, 64, device="cuda", dtype=torch.half)).backward(); opt.step()
"""


def _warm(tmp_path, script: str, json_out: bool, timeout: float):
    """`pcompile warm train.py --target h100 --steps all` of `script` in a fresh job dir."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(script)
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", "train.py", "--target", "h100",
           "--cache-dir", str(tmp_path / "cache"), *(["--json"] if json_out else []), "--steps", "all"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(job),
                         env=dict(os.environ, PCOMPILE_PROGRESS="0", PCOMPILE_DISABLE="1"))
    return job, out


def test_checkpoints_saved_during_the_warm_load_back(tmp_path):
    job, out = _warm(tmp_path, SCRIPT, json_out=True, timeout=600)
    log = out.stdout + out.stderr
    assert out.returncode == 0 and "LOADED ALL" in log, log[-4000:]
    size = int(log.split("SIZES ")[1].split()[0])
    assert size < 64 * 1024  # the fp16 weights alone are 2 x 128 KiB (AdamW's state 4x that): none written
    assert not (job / "ckpt").exists()  # only inside the sandbox
    res = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
    # where safetensors is installed (HF's save_pretrained writes with it), its saves load back too
    assert ("SAFETENSORS" in log) == (importlib.util.find_spec("safetensors") is not None)
    n = 3 + 2 * ("SAFETENSORS" in log)
    assert res["report"]["writes"]["n_placeholder_saves"] == n
    assert any(ln.startswith(f"{n} checkpoints of virtual tensors written as placeholders") for ln in res["lines"]), res["lines"]



HF_SCRIPT = """\
import torch
from transformers import GPT2Config, GPT2LMHeadModel
cfg = GPT2Config(n_layer=1, n_head=2, n_embd=64, vocab_size=256, n_positions=64)
model = GPT2LMHeadModel(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step = torch.compile(model)
ids = torch.randint(0, 256, (2, 32), device="cuda")
for i in range(2):
    step(input_ids=ids, labels=ids).loss.backward(); opt.step(); opt.zero_grad()
model.save_pretrained("ckpt/hf")
back = GPT2LMHeadModel.from_pretrained("ckpt/hf").cuda()
got = sorted((k, tuple(v.shape), v.dtype) for k, v in back.state_dict().items())
want = sorted((k, tuple(v.shape), v.dtype) for k, v in model.state_dict().items())
assert got == want, (got[:3], want[:3])
print("HF LOADED", len(got), flush=True)
step(input_ids=ids, labels=ids).loss.backward(); opt.step()
"""


def test_hf_save_pretrained_during_the_warm_loads_back_with_from_pretrained(tmp_path):
    """HF's own round trip (save_pretrained writes safetensors shards from native code, then
    from_pretrained reads the header and maps the data) inside a warm: the placeholder file loads."""
    pytest.importorskip("transformers")
    job, out = _warm(tmp_path, HF_SCRIPT, json_out=True, timeout=900)
    log = out.stdout + out.stderr
    assert out.returncode == 0 and "HF LOADED" in log, log[-4000:]
    res = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
    assert res["report"]["writes"]["n_placeholder_saves"] >= 1, res["report"]["writes"]
    assert not (job / "ckpt").exists()  # only inside the sandbox


CHILD_SCRIPT = """\
import os, subprocess, sys, torch, torch.nn as nn
model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 8)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = torch.compile(lambda x: model(x).sum())
for i in range(2):
    step(torch.randn(4, 64, device="cuda")).backward(); opt.step(); opt.zero_grad()
os.makedirs("ckpt", exist_ok=True)
torch.save({"model": model.state_dict()}, "ckpt/last.pt")
child = ("import torch; sd = torch.load('ckpt/last.pt')['model']; "
         "cpu = torch.load('ckpt/last.pt', map_location='cpu')['model']; "
         "print('CHILD', sorted((k, tuple(v.shape), str(v.dtype)) for k, v in sd.items()) == "
         "sorted((k, tuple(v.shape), str(v.dtype)) for k, v in cpu.items()), len(sd), "
         "sum(float(v.abs().sum()) for v in cpu.values()))")
r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
assert r.returncode == 0, r.stderr[-2000:]
print(r.stdout.strip(), flush=True)
"""


def test_a_child_process_of_the_script_loads_the_checkpoint_the_warm_saved(tmp_path):
    """An eval step run as its own process (`python eval.py ckpt`) inherits the warm: the placeholder
    checkpoint loads there too (it raised "record size (0 bytes) does not match expected size")."""
    job, out = _warm(tmp_path, CHILD_SCRIPT, json_out=False, timeout=600)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    line = [ln for ln in log.splitlines() if ln.startswith("CHILD ")]
    assert line == ["CHILD True 4 0.0"], log[-4000:]  # same keys, shapes, dtypes either way; zeros on the CPU
