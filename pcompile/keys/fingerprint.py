"""The fingerprint: every input besides source that changes a compiled artifact.

Deliberately absent: hostname, rank, PID, device index, absolute paths, time. Anything added
here must be the same on every rank and host that should share an artifact.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

from pcompile.keys import versions
from pcompile.settings import TARGET_ARCH, TARGET_NAME

FINGERPRINT_VERSION = "1"


@dataclasses.dataclass(frozen=True)
class Target:
    """The device an artifact is built for: an arch like sm_90 (or cpu) and the exact board name."""

    arch: str
    name: str

    @staticmethod
    def current() -> "Target":
        arch = TARGET_ARCH.get()
        if arch:
            return Target(arch, TARGET_NAME.get())
        return _local_target()


def _local_target() -> Target:
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return Target(f"sm_{major}{minor}", torch.cuda.get_device_name())
    except Exception:
        pass
    return Target("cpu", versions.machine())


def software() -> dict[str, str]:
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "python": versions.python_version(),
        "torch": versions.torch_build(),
        "cuda": versions.cuda_version(),
        "cudnn": versions.cudnn_version(),
        "triton": versions.triton_build(),
        "machine": versions.machine(),
    }


def fingerprint(target: Target | None = None, extra: Mapping[str, str] | None = None, ptxas: bool = False) -> dict[str, str]:
    """Fields for one key. `ptxas=True` for layers that run ptxas (Triton kernels)."""
    target = target or Target.current()
    fields = software()
    fields["target_arch"] = target.arch
    fields["target_name"] = target.name
    if ptxas:
        sm = target.arch[3:] if target.arch.startswith("sm_") else ""
        fields["ptxas"] = versions.ptxas_version(int(sm) if sm.isdigit() else None)
    for name, value in (extra or {}).items():
        fields[f"x.{name}"] = str(value)
    return fields
