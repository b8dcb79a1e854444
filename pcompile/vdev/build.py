"""Build vcuda.c into libcuda.so.1 (and vnvml.c into libnvidia-ml.so.1) once per source hash.

The library is built at the user's site (no wheel carries a binary) with whatever C compiler is
there; no CUDA headers are needed. Publishing is atomic (temp dir + rename), so concurrent warm
runs either build the same bytes or reuse the first one.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from pcompile import settings
from pcompile.errors import PcompileError

SOURCE = Path(__file__).with_name("vcuda.c")
LIB_NAME = "libcuda.so.1"
NVML_SOURCE = Path(__file__).with_name("vnvml.c")
NVML_NAME = "libnvidia-ml.so.1"


def build_root() -> Path:
    """Per-user build dir: $PCOMPILE_VDEV_DIR, else $XDG_CACHE_HOME/pcompile-vdev."""
    chosen = settings.VDEV_DIR.get()
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pcompile-vdev"


def find_compiler() -> str:
    """$CC, else cc, gcc or clang on PATH; a one-line error names the fix when none exists."""
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand and shutil.which(cand.split()[0]):
            return cand
    raise PcompileError("no C compiler found to build pcompile's virtual CUDA device; install gcc (or set CC)")


def _compiler_id(cc: str) -> str:
    try:
        out = subprocess.run([*cc.split(), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return out.splitlines()[0] if out else cc


def source_key(cc: str | None = None) -> str:
    """Hash of everything that changes the built bytes: source, compiler, machine."""
    h = hashlib.sha256(SOURCE.read_bytes() + NVML_SOURCE.read_bytes())
    h.update(_compiler_id(cc or find_compiler()).encode())
    h.update(platform.machine().encode())
    return h.hexdigest()[:20]


def library(force: bool = False) -> Path:
    """Path of the built library, building it first if this source/compiler has none yet."""
    cc = find_compiler()
    final_dir = build_root() / source_key(cc)
    lib = final_dir / LIB_NAME
    if lib.exists() and (final_dir / NVML_NAME).exists() and not force:
        return lib
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final_dir.parent))
    try:
        for name, source in ((LIB_NAME, SOURCE), (NVML_NAME, NVML_SOURCE)):
            cmd = [*cc.split(), "-O2", "-shared", "-fPIC", "-Wl,-soname," + name, "-o", str(tmp / name),
                   str(source), "-ldl", "-lpthread"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                first = (proc.stderr.strip().splitlines() or ["(no output)"])[0]
                raise PcompileError(f"building pcompile's virtual CUDA device failed ({cc}): {first}")
        if force and final_dir.exists():
            shutil.rmtree(final_dir, ignore_errors=True)
        try:
            os.rename(tmp, final_dir)
        except OSError:
            if not lib.exists():  # lost a race to a broken dir: surface it
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return lib
