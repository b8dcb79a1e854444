"""Probes of the software that changes a compiled binary. Each probe is cached per process.

These are the only places the keys module reads torch/triton internals; each probe returns a
string and degrades to "unknown:<reason>" instead of raising, so a version that moved an API
changes keys (a miss) rather than crashing a job. tests/test_keys.py fails loudly on such drift.
"""
from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


@functools.cache
def torch_build() -> str:
    try:
        import torch

        return f"{torch.__version__}+git.{torch.version.git_version}"
    except Exception as exc:  # pragma: no cover - torch is a dependency
        return f"unknown:{type(exc).__name__}"


@functools.cache
def cuda_version() -> str:
    try:
        import torch

        return str(torch.version.cuda or "none")
    except Exception as exc:  # pragma: no cover
        return f"unknown:{type(exc).__name__}"


@functools.cache
def cudnn_version() -> str:
    try:
        import torch

        if not torch.version.cuda:
            return "none"
        from pcompile.compat.cudnn_version import version

        return str(version())
    except Exception as exc:
        return f"unknown:{type(exc).__name__}"


@functools.cache
def triton_build() -> str:
    """triton's version plus its own content key (sources + libtriton bytes), as Triton's cache uses."""
    try:
        import triton
    except Exception:
        return "none"
    try:
        from pcompile.keys import triton_memo

        version = str(triton.__version__)

        def compute() -> str:
            import xxhash

            from pcompile.compat.triton_build import triton_key

            return f"{version}+{xxhash.xxh3_64_hexdigest(triton_key().encode())}"

        where, writable = _memo_dir()
        return triton_memo.remembered(where, os.path.dirname(triton.__file__), version, compute, write=writable)
    except Exception as exc:
        return f"{getattr(triton, '__version__', '?')}+unknown:{type(exc).__name__}"


def _memo_dir() -> tuple[Path | None, bool]:
    """Where slow probes are remembered across processes (the cache dir; None where it cannot be
    named), and whether they may be written there (not in a read-only cache)."""
    try:
        from pcompile.config import Settings

        settings = Settings.from_env()
        return settings.cache_dir, not settings.read_only
    except Exception:
        return None, False


def _ptxas_path(arch: int | None = None) -> str | None:
    if arch is not None:  # the ptxas Triton itself picks for this arch (3.9 uses ptxas-blackwell from sm_90)
        try:
            from pcompile.compat.triton_build import ptxas_path

            path = ptxas_path(arch)
            if path and os.path.exists(path):
                return path
        except Exception:
            pass
    for env in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"):
        path = os.environ.get(env)
        if path and os.path.exists(path):
            return path
    try:
        import triton

        bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
        if os.path.exists(bundled):
            return bundled
    except Exception:
        pass
    return shutil.which("ptxas")


@functools.cache
def ptxas_version(arch: int | None = None) -> str:
    """ptxas's version: the one Triton runs for sm_`arch`, or (no arch) the default one."""
    path = _ptxas_path(arch)
    if not path:
        return "none"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except Exception as exc:
        return f"unknown:{type(exc).__name__}"
    match = re.search(r"release (\S+), V(\S+)", out)
    return match.group(2) if match else (out.strip().splitlines() or ["unknown"])[-1]


def machine() -> str:
    """CPU architecture only (x86_64, aarch64): C++ kernels add their ISA themselves."""
    return platform.machine()


def build_software(arch: int | None = None) -> dict[str, str]:
    """The build-relevant versions of this process, which a pool worker reports with each result
    and the parent compares before it publishes. `arch`: the kernel's target, so "ptxas" names
    the ptxas Triton runs for it, as the key does."""
    import json

    from pcompile.compat.pool_hook import triton_env

    return {
        "torch": torch_build(),
        "triton": triton_build(),
        "ptxas": ptxas_version(arch),
        "python": python_version(),
        "triton_env": json.dumps(triton_env(), sort_keys=True),
    }


@functools.cache
def cpu_identity() -> str:
    """The CPU's model and feature flags (/proc/cpuinfo's first processor, flags hashed), plus the
    C library: what a library's load probe on one host says about another. "unknown" parts where
    the host does not say (no /proc/cpuinfo)."""
    import hashlib

    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor is enough: every core of a node reports the same
                name, _, value = line.partition(":")
                fields[name.strip().lower()] = value.strip()
    except OSError:
        pass
    model = fields.get("model name") or fields.get("cpu model") or fields.get("cpu") or platform.processor() or "unknown"
    flags = fields.get("flags") or fields.get("features") or ""
    vendor = fields.get("vendor_id") or fields.get("cpu implementer") or ""
    flag_hash = hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:16] if flags else "unknown"
    libc = "-".join(platform.libc_ver()) or "unknown"
    return f"{machine()}|{vendor}|{model}|flags:{flag_hash}|{libc}"
