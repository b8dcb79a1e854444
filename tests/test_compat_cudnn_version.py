"""cuDNN's version is read without a CUDA init (compile workers and warm hosts never open a driver)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from pcompile.compat import cudnn_version


def test_check_passes_on_this_torch():
    cudnn_version.check()


@pytest.mark.skipif(not torch.version.cuda, reason="a CPU build of torch has no cuDNN")
def test_same_version_as_torch_and_no_cuda_init():
    code = ("import torch\nfrom pcompile.compat import cudnn_version\n"
            "v = cudnn_version.version()\nprint(v, torch.cuda.is_initialized(), torch._C._cuda_isInBadFork())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) == torch.backends.cudnn.version()
    assert out[1] == "False"
