"""The environment of the one process that loads the virtual device, and what it can ask it.

Only `child_env` puts the library into LD_PRELOAD, and only for a child process: the CLI process,
pytest and any training process never load it (`loaded_here()` lets tests check that).
"""
from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path
from typing import Any

from pcompile import settings
from pcompile.vdev.build import LIB_NAME, NVML_NAME, SANITIZE_MARK, build_root
from pcompile.vdev import smi
from pcompile.vdev.profile import DeviceProfile

#: vcuda.c's MAX_DEVICES
MAX_DEVICES = 64


def child_env(lib: Path, profile: DeviceProfile, workdir: Path, strict: bool, base: dict[str, str] | None = None,
              devices: int | None = None) -> dict[str, str]:
    """Environment for a child that should see `devices` virtual `profile` GPUs and no real one.

    Several devices are for scripts that pick `cuda:LOCAL_RANK` (one process per GPU of a node):
    every device has the same profile, as the GPUs of one node do. `devices=None`: the
    environment's PCOMPILE_VDEV_DEVICES, else 1.
    """
    env = dict(os.environ if base is None else base)
    if devices is None:
        devices = settings.VDEV_DEVICES.get(env)
    if not 1 <= devices <= MAX_DEVICES:
        raise ValueError(f"the virtual device exposes 1 to {MAX_DEVICES} devices, not {devices}")
    flat = profile.write_flat(workdir / "vdev-profile.txt")
    ours = (LIB_NAME, NVML_NAME)
    preload = [str(lib), str(lib.with_name(NVML_NAME))]
    preload += [p for p in env.get("LD_PRELOAD", "").split(":") if p and not p.endswith(tuple("/" + n for n in ours))]
    runtime = lib.parent / SANITIZE_MARK  # a sanitized build: its runtime must be loaded first
    if runtime.exists():
        preload.insert(0, runtime.read_text().strip())
        # Python and torch never free some memory at exit: leaks are not what this looks for
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0:allocator_may_return_null=1:handle_segv=1")
    env["LD_PRELOAD"] = ":".join(preload)
    # The host's GPUs never matter: torch counts devices from CUDA_VISIBLE_DEVICES and NVML before
    # CUDA initialises, so both must describe the virtual devices (NVML is ours, vnvml.c).
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(devices))
    env.pop("CUDA_DEVICE_ORDER", None)
    env[settings.VDEV_PROFILE.name] = str(flat)
    env[settings.VDEV_STATS.name] = str(workdir / "vdev-stats.jsonl")
    env[settings.VDEV_STRICT.name] = "1" if strict else "0"
    env[settings.VDEV_DEVICES.name] = str(devices)
    # Triton links its driver helpers against "the" libcuda.so.1: make it ours, by directory.
    env["TRITON_LIBCUDA_PATH"] = str(lib.parent)
    env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "0"
    # The profiler's CUDA activities come from CUPTI, which asks the driver for private tables
    # (cuGetExportTable) the virtual device refuses: kineto then warns at the first
    # profile(activities=[..., CUDA]) that "CUPTI initialization failed", which a GPU host never
    # prints. The refused call is in the warm's summary; kineto's errors still show.
    env.setdefault("KINETO_LOG_LEVEL", "3")
    # and the management tool scripts shell out to lists these devices, not the host's (or fails)
    smi.install(workdir / "bin", env)
    return env


def loaded_here() -> bool:
    """True if this process has the virtual device mapped (it must not, outside a warm child)."""
    root = str(build_root())
    try:
        with open("/proc/self/maps") as fh:
            return any(line.rstrip().endswith("/" + LIB_NAME) and root in line for line in fh)
    except OSError:
        return False


def _self_lib() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(LIB_NAME)
        lib.pcompile_vdev_is_virtual  # noqa: B018  (raises AttributeError on a real driver)
        return lib
    except (OSError, AttributeError):
        return None


def stats_here() -> dict[str, Any]:
    """Call counts of the virtual device in this process ({} when it is not loaded)."""
    lib = _self_lib()
    if lib is None:
        return {}
    need = lib.pcompile_vdev_stats(None, 0)
    buf = ctypes.create_string_buffer(need + 1)
    lib.pcompile_vdev_stats(buf, need + 1)
    return json.loads(buf.value.decode())


def set_strict(on: bool) -> bool:
    """Turn strict launches on/off at run time (warm enables it only while Inductor compiles)."""
    lib = _self_lib()
    if lib is None:
        return False
    lib.pcompile_vdev_set_strict(1 if on else 0)
    return True


def read_stats_file(path: Path) -> list[dict[str, Any]]:
    """Per-process counts the library appended at exit (the warm child and its compile workers)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
