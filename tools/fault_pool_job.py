"""The pool rows' job: real Triton kernels (an H100's, captured from Inductor, compiled here to
cubins without a GPU) submitted exactly as Inductor's AsyncCompile does, through pcompile's node
pool, with a fault applied while the first kernel compiles in a worker.

Why a separate job: on a CPU host Inductor's own graphs build C++ in-process; only Triton kernels
go through the pool. Prints `RESULT <digest of the cubins>` and `DAEMON <pid before> <pid after>`.

    python tools/fault_pool_job.py FAULT       # none | daemon-kill | worker-kill | socket-rm
    python tools/fault_pool_job.py --stock     # Inductor's worker function called directly
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _kernels() -> list[dict]:
    import torch

    version = ".".join(torch.__version__.split(".")[:2])
    data = REPO / "tests" / "data" / f"triton_kernels_{version}.json"
    if not data.exists():
        print(f"SKIP no captured Triton kernels for torch {version}", flush=True)
        sys.exit(0)
    nonce = os.environ.get("FAULT_NONCE", "0")  # a fresh source per row: a real, slow compile
    return [dict(k, source=k["source"] + f"\n# fault matrix {nonce}\n") for k in json.loads(data.read_text())["kernels"]]


def _text_sections(elf: bytes) -> bytes:
    """The code (`.text.*` sections) of a cubin: its other sections carry build-unique notes, so
    two stock compiles of one source differ there but never in the code."""
    import struct

    if elf[:4] != b"\x7fELF":
        return b""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_off = headers[shstrndx][4]
    out = b""
    for name, _type, _flags, _addr, off, size, *_ in headers:
        label = elf[names_off + name: elf.index(b"\0", names_off + name)]
        if label.startswith(b".text"):
            out += label + elf[off: off + size]
    return out


def _cubins(kernel: object) -> bytes:
    out = b""
    for result in kernel.compile_results:  # type: ignore[attr-defined]
        k = getattr(result, "kernel", None)
        raw = getattr(k, "cubin_raw", None) or (getattr(k, "asm", None) or {}).get("cubin") or b""
        out += _text_sections(bytes(raw))
    return out


def _submit_args(name: str, source: str) -> tuple:
    import torch
    from torch._inductor.codecache import _load_triton_kernel_from_source

    extra_env = {"TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
                 "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR")}
    extra_config = {"use_static_triton_launcher": torch._inductor.config.use_static_triton_launcher}
    return functools.partial(_load_triton_kernel_from_source, name, source), extra_env, extra_config


def main() -> int:
    import triton  # noqa: F401 - no Triton, no pool rows
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    fault = sys.argv[1] if len(sys.argv) > 1 else "none"
    kernels = _kernels()
    digest = hashlib.sha256()
    if fault == "--stock":
        for k in kernels:
            digest.update(_cubins(_worker_compile_triton(*_submit_args(k["name"], k["source"]))[0]))
        print("RESULT", digest.hexdigest()[:16], flush=True)
        return 0
    import torch._inductor.async_compile as ac
    from pcompile.inductor import pool_install

    assert pool_install.install_pool()
    pool = ac.AsyncCompile.process_pool()  # what Inductor's first kernel does: builds the router
    router = pool_install.router()
    connected = router.jobs.wait_connected(120)
    before = router.jobs.daemon_pid if connected else None
    futures = [pool.submit(_worker_compile_triton, *_submit_args(k["name"], k["source"])) for k in kernels[:1]]
    if fault != "none":
        deadline = time.time() + 120
        while time.time() < deadline and not futures[0].done():
            try:
                busy = [s for s in router.jobs.status()["slots"] if s["label"] == kernels[0]["name"] and s["pid"]]
            except Exception:
                busy = []
            if busy:
                if fault == "daemon-kill" and before:
                    os.kill(before, signal.SIGKILL)
                elif fault == "worker-kill":
                    os.kill(busy[0]["pid"], signal.SIGKILL)
                elif fault == "socket-rm":
                    from pcompile.pool.paths import PoolPaths

                    os.unlink(PoolPaths.for_cache_dir(router.settings.cache_dir).socket)
                print("FAULTED", flush=True)
                break
            time.sleep(0.01)
    futures += [pool.submit(_worker_compile_triton, *_submit_args(k["name"], k["source"])) for k in kernels[1:]]
    for fut in futures:
        digest.update(_cubins(fut.result(timeout=300)[0]))
    print("RESULT", digest.hexdigest()[:16], flush=True)
    print("DAEMON", before, router.jobs.daemon_pid, json.dumps(pool_install.counts()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
