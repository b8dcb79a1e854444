"""Capture real Inductor-generated Triton kernel sources into tests/data/ on a CPU-only host.

Why: the pool tests need genuine `async_compile.triton(name, source)` inputs (the exact module
text Inductor hands to its workers), but CI has no GPU. This script compiles a few small
functions under FakeTensorMode with torch.cuda spoofed as one H100 (the Python-level spoof set
of research/INDUCTOR_TRITON_INTERNALS.md section 3), records every source that Inductor passes
to `AsyncCompile.triton`, and writes them as JSON. Nothing is compiled by Triton here.

Run once per torch version (output name carries it):
    python tools/capture_triton_kernels.py            # torch 2.14 -> tests/data/triton_kernels_2.14.json
    PYTHONPATH=/tmp/t211 python tools/capture_triton_kernels.py   # torch 2.11
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

H100 = SimpleNamespace(
    name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132,
    total_memory=81559 * 2**20, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048,
    max_threads_per_block=1024, warp_size=32, L2_cache_size=50 * 2**20,
    shared_memory_per_block_optin=232448, gcnArchName="", uuid="00000000", is_integrated=False,
    is_multi_gpu_board=False,
)


def _spoof_cuda() -> None:
    import torch._subclasses.fake_tensor as fake_tensor
    import torch.utils._triton as utils_triton
    from torch._dynamo import device_interface as di
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        from triton.compiler.compiler import triton_key

    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.get_device_properties = lambda *a, **k: H100
    cuda.get_device_capability = lambda *a, **k: (9, 0)
    cuda.get_device_name = lambda *a, **k: H100.name
    cuda.is_current_stream_capturing = lambda: False
    cuda._lazy_init = lambda: None
    cuda.set_device = lambda *a: None
    cuda.get_rng_state = lambda *a, **k: torch.zeros(16, dtype=torch.uint8)
    cuda.set_rng_state = lambda *a, **k: None
    cuda._exchange_device = lambda d: 0
    cuda._maybe_exchange_device = lambda d: 0
    di.CudaInterface.get_device_properties = staticmethod(lambda *a, **k: H100)
    di.CudaInterface.current_device = staticmethod(lambda: 0)
    di.CudaInterface.exchange_device = staticmethod(lambda d: 0)
    di.CudaInterface.maybe_exchange_device = staticmethod(lambda d: 0)
    di.CudaInterface.get_compute_capability = staticmethod(lambda *a: 90)
    di.CudaInterface.is_available = staticmethod(lambda: True)
    di.CudaInterface.device_count = staticmethod(lambda: 1)
    FakeTensorMode.avoid_device_init = property(lambda self: True)
    fake_tensor.init_gpu_context = lambda *a, **k: None
    backend_hash = hashlib.sha256(f"{triton_key()}-{make_backend(GPUTarget('cuda', 90, 32)).hash()}".encode()).hexdigest().upper()
    utils_triton.triton_hash_with_backend = lambda: backend_hash
    utils_triton.has_triton.cache_clear()


def pointwise(a, b):
    return (a.sin() + b).relu() * 2


def softmax(a, b):
    return torch.softmax(a * b, -1)


def layernorm(a, b):
    return torch.nn.functional.layer_norm(a + b, a.shape[-1:]).tanh()


def main() -> int:
    import torch._inductor.async_compile as async_compile

    captured: list[dict[str, str]] = []

    def record(self, kernel_name, source_code, device_str="cuda"):
        if all(k["source"] != source_code for k in captured):
            captured.append({"name": kernel_name, "source": source_code})
        return None

    async_compile.AsyncCompile.triton = record
    torch._inductor.config.fx_graph_cache = False
    mode = FakeTensorMode()
    with mode:
        a = torch.empty(512, 1024, device="cuda")
        b = torch.empty(512, 1024, device="cuda")
    _spoof_cuda()
    for fn in (pointwise, softmax, layernorm):
        torch._dynamo.reset()
        with mode:
            try:
                torch.compile(fn)(a, b)
            except Exception:
                pass  # running the compiled code needs a driver; the sources are captured by then
    if not captured:
        print("no kernels captured", file=sys.stderr)
        return 1
    version = ".".join(torch.__version__.split(".")[:2])
    out = Path(__file__).resolve().parent.parent / "tests" / "data" / f"triton_kernels_{version}.json"
    meta = {"torch": torch.__version__, "target": "sm_90 (H100 profile)", "kernels": captured}
    out.write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {len(captured)} kernels to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
