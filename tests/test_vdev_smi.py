"""`nvidia-smi` inside a warm lists the virtual devices (pcompile/vdev/smi.py).

modded-nanogpt logs `subprocess.run(["nvidia-smi"], ...)` at start: on a host without the tool the
warm died with FileNotFoundError before compiling anything. The warm child's PATH now leads to a
tool answering from the target profile, as many devices as the job has local ranks.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pcompile.vdev import profile, smi

SCRIPT = """\
import subprocess, torch
print("TABLE", subprocess.run(["nvidia-smi"], capture_output=True, text=True, check=True).stdout)
q = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
                   capture_output=True, text=True, check=True).stdout
print("QUERY", q.strip().replace(chr(10), " | "))
print("CUDA", torch.cuda.device_count(), torch.cuda.get_device_name(0))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")
def test_a_script_running_nvidia_smi_in_a_warm_sees_the_virtual_devices(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, PCOMPILE_PROGRESS="0", PCOMPILE_DISABLE="1", PATH="/usr/bin:/bin")  # no host nvidia-smi
    out = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "warm", "train.py", "--target", "h100",
                          "--world-size", "2", "--cache-dir", str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=300, cwd=str(job), env=env)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    mib = profile.resolve("h100").fields()["totalGlobalMem"] // 2**20
    assert f"QUERY 0, NVIDIA H100 80GB HBM3, {mib} | 1, NVIDIA H100 80GB HBM3, {mib}" in log, log[-3000:]
    assert "CUDA 2 NVIDIA H100 80GB HBM3" in log and "NVIDIA-SMI pcompile-virtual" in log
    assert "Traceback" not in log


def test_queries_answer_like_nvidia_smi(tmp_path, capsys):
    env = {"PCOMPILE_VDEV_PROFILE": str(profile.resolve("h100").write_flat(tmp_path / "flat.txt")),
           "PCOMPILE_VDEV_DEVICES": "2"}
    assert smi.main(["-L"], env) == 0
    assert capsys.readouterr().out.splitlines()[1] == "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000001)"
    assert smi.main(["--query-gpu", "driver_version,temperature.gpu", "--format", "csv", "-i", "1"], env) == 0
    assert capsys.readouterr().out.splitlines() == ["driver_version, temperature.gpu", "580.159.04, [N/A]"]
    assert smi.main(["--query-gpu=nonsense", "--format=csv"], env) == 2
    assert 'Field "nonsense" is not a valid field to query.' in capsys.readouterr().out
