"""The warm host's GPUs never matter: whatever CUDA_VISIBLE_DEVICES says, and whatever driver
and NVML the host has, the warm sees the virtual device(s) only and never opens the real driver.

The "host driver" here is an impostor pair of libraries (libcuda.so.1, libnvidia-ml.so.1) that
report 8 GPUs and leave a marker file when loaded, put first on LD_LIBRARY_PATH: a process that
looks for the host's driver or NVML by name would load them.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_warm import STOCK, warm

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")

IMPOSTOR = r"""
#include <stdio.h>
#include <stdlib.h>
static void mark(const char *what) {
  const char *m = getenv("HOST_DRIVER_MARKER");
  char cmd[400] = {0};
  FILE *c = fopen("/proc/self/cmdline", "r");
  if (c) { size_t n = fread(cmd, 1, sizeof cmd - 1, c); for (size_t i = 0; i < n; i++) if (!cmd[i]) cmd[i] = ' '; fclose(c); }
  if (m) { FILE *f = fopen(m, "a"); if (f) { fprintf(f, "%s %s by %s\n", what, LIBNAME, cmd); fclose(f); } }
}
__attribute__((constructor)) static void loaded(void) { mark("load"); }
int cuInit(unsigned f) { (void)f; mark("init"); return 0; }
int cuDeviceGetCount(int *n) { *n = 8; return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int nvmlInit(void) { mark("init"); return 0; }
int nvmlInit_v2(void) { mark("init"); return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 8; return 0; }
int nvmlDeviceGetCount(unsigned *n) { *n = 8; return 0; }
"""

SCRIPT = """\
import os
import torch
print("device_count", torch.cuda.device_count(), flush=True)
torch.cuda.set_device(0)
f = torch.compile(lambda x: (x.sin() * 2).sum())
print("out", f(torch.randn(64, device="cuda")).shape)
"""


@pytest.fixture(scope="module")
def host_driver(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hostdriver")
    src = d / "impostor.c"
    src.write_text(IMPOSTOR)
    for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
        subprocess.run(["cc", "-shared", "-fPIC", f'-DLIBNAME="{name}"', "-Wl,-soname," + name, "-o", str(d / name), str(src)],
                       check=True)
    return d


def _impostor_is_reachable(host_driver: Path, marker: Path) -> bool:
    """Sanity: without the warm, a process looking for NVML by name does load the impostor."""
    code = "import ctypes; ctypes.CDLL('libnvidia-ml.so.1')"
    env = dict(os.environ, LD_LIBRARY_PATH=str(host_driver), HOST_DRIVER_MARKER=str(marker))
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return marker.exists()


@pytest.mark.parametrize("visible,backend", [(None, "stock"), ("", "stock"), ("NoDevFiles", "stock"), ("3,5", "stock"),
                                             ("GPU-5e2a7a43-0000-0000-0000-000000000000", "stock"), ("", "pcompile")])
def test_warm_ignores_host_gpus_and_never_opens_the_driver(tmp_path, host_driver, visible, backend):
    """No process of the warm initialises the host's driver or NVML (cuInit, nvmlInit), and the
    warm's own processes never even load them. (The node pool's compile workers import torch,
    whose cuBLASLt maps libcuda.so.1 at import; they compile Triton code and never initialise it.)"""
    assert _impostor_is_reachable(host_driver, tmp_path / "sanity")
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    marker = tmp_path / "marker"
    env = dict(STOCK if backend == "stock" else {}, LD_LIBRARY_PATH=str(host_driver), HOST_DRIVER_MARKER=str(marker))
    base = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    old = os.environ.copy()
    os.environ.clear()
    os.environ.update(base)
    try:
        rc, res, log = warm(script, tmp_path / "cache", env=env)
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert rc == 0, log[-3000:]
    assert "device_count 1" in log
    seen = marker.read_text().splitlines() if marker.exists() else []
    assert not [ln for ln in seen if ln.startswith("init ")], seen
    assert not [ln for ln in seen if "pcompile.warm.child" in ln or "pcompile.cli.main" in ln], seen
