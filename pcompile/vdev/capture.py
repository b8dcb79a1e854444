"""Capture a device profile on a real GPU host (`pcompile profile`).

Reads the board through the same libcudart torch loaded (ctypes), so the bytes are exactly what
torch sees: the full cudaDeviceProp struct, every cudaDeviceGetAttribute 1..255, the exact name
and driver/runtime versions, plus the software fingerprint that decides cache keys.
"""
from __future__ import annotations

import ctypes
import datetime
import platform
import re
import struct
import subprocess
from typing import Any

from pcompile.errors import PcompileError
from pcompile.vdev.profile import FORMAT, PROP_SIZE_CUDA13, VERSION


def _loaded_libcudart() -> ctypes.CDLL:
    with open("/proc/self/maps") as fh:
        for line in fh:
            m = re.search(r"(/\S*libcudart\.so[.\d]*)$", line.strip())
            if m:
                return ctypes.CDLL(m.group(1))
    return ctypes.CDLL("libcudart.so.13")


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise PcompileError(f"{what} failed with CUDA error {rc}; run `pcompile profile` on a host with a working GPU")


def ptxas_path(arch: int = 90) -> str:
    """The ptxas Triton uses for `arch` (honours TRITON_PTXAS_PATH, which torch may set)."""
    from pcompile.compat.triton_build import ptxas_path as triton_ptxas

    return triton_ptxas(arch)


def _ptxas_version(arch: int = 90) -> str:
    """As the keys spell it (keys/versions.py: `12.9.86`, `none` without one), so a profile and a
    key fingerprint can be compared field by field."""
    from pcompile.keys import versions

    try:
        return versions.ptxas_version(arch)
    except Exception as exc:  # the fingerprint is informative; never fail the capture for it
        return f"unknown ({type(exc).__name__}: {exc})"


def _triton_backend_hash() -> str:
    try:
        from pcompile.compat.warm_runtime import triton_backend_hash

        return triton_backend_hash()
    except Exception as exc:
        return f"unknown ({type(exc).__name__})"


def _driver_release() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
        return out.strip().splitlines()[0] if out.strip() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def board_slug(name: str) -> str:
    s = name.lower().replace("nvidia", "").strip()
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-")


def capture(device: int = 0, board: str | None = None) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise PcompileError("no CUDA GPU visible; run `pcompile profile` on the GPU host (it reads the real board)")
    torch.cuda.init()
    rt = _loaded_libcudart()
    runtime, driver = ctypes.c_int(), ctypes.c_int()
    _check(rt.cudaRuntimeGetVersion(ctypes.byref(runtime)), "cudaRuntimeGetVersion")
    _check(rt.cudaDriverGetVersion(ctypes.byref(driver)), "cudaDriverGetVersion")
    if runtime.value // 1000 != 13:
        raise PcompileError(f"CUDA runtime {runtime.value} is not supported (the virtual device speaks the CUDA 13 ABI)")
    buf = ctypes.create_string_buffer(4096)
    _check(rt.cudaGetDeviceProperties(buf, device), "cudaGetDeviceProperties")
    raw = buf.raw[:PROP_SIZE_CUDA13]
    attrs: dict[str, int] = {}
    val = ctypes.c_int()
    for attr in range(1, 256):
        if rt.cudaDeviceGetAttribute(ctypes.byref(val), attr, device) == 0:
            attrs[str(attr)] = val.value
    rt.cudaGetLastError()
    name = raw[:256].split(b"\0", 1)[0].decode()
    import triton

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "format": FORMAT,
        "version": VERSION,
        "board": board or board_slug(name),
        "name": name,
        "captured_at": datetime.date.today().isoformat(),
        "driver_version": driver.value,
        "runtime_version": runtime.value,
        "driver_release": _driver_release(),
        "cuda_device_prop": {"size": len(raw), "hex": raw.hex()},
        "attributes": attrs,
        # torch's thread count here: the warm gives it to the script, whose programs guard on it (warm/host_threads.py)
        "host": {"cpu_threads": int(torch.get_num_threads())},
        "software": {
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "triton": triton.__version__,
            "cudnn": cudnn,
            "ptxas": _ptxas_version(int(struct.unpack_from("<i", raw, 360)[0]) * 10 + int(struct.unpack_from("<i", raw, 364)[0])),
            "triton_backend_hash": _triton_backend_hash(),
            "python": platform.python_version(),
        },
    }
