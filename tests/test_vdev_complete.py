"""The virtual device is complete and memory-safe: every entry point the installed torch, triton,
NCCL, cuDNN and cuBLAS can ask for is defined; cuGetProcAddress hands out our definitions; and the
memory-sensitive paths (alloc/free churn, VMM for expandable segments, graph capture, events, and the
warm's fake-tensor copies) run clean with the library built with AddressSanitizer and ASan's
allocator under the whole process (torch's frees included)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pcompile.errors import PcompileError
from pcompile.vdev import build, entry_points, preload
from pcompile.vdev.profile import resolve

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD virtual device is Linux-only")


@pytest.fixture(scope="module")
def build_dir(vdev_dir: Path) -> Path:
    return vdev_dir


@pytest.fixture(scope="module")
def lib(build_dir) -> Path:
    return build.library(sanitize="")


@pytest.fixture(scope="module")
def asan_lib(build_dir) -> Path:
    try:
        return build.library(sanitize="address")
    except PcompileError as exc:
        pytest.skip(f"no AddressSanitizer here: {exc}")


def _run(lib: Path, tmp: Path, code: str, env: dict | None = None, expect_ok: bool = True) -> tuple[dict, str]:
    full = preload.child_env(lib, resolve("h100"), tmp, False, base=dict(os.environ, **(env or {})))
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=600)
    if expect_ok:
        assert out.returncode == 0 and "AddressSanitizer" not in out.stderr, out.stderr[-6000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    return (json.loads(lines[-1]) if lines else {}), out.stderr


def test_every_entry_point_the_installed_libraries_ask_for_is_defined(lib):
    """Linked symbols and names looked up at run time (strings in the binaries), for every installed
    torch/triton/NCCL/cuDNN/cuBLAS library: each must be exported by the virtual device."""
    wanted = entry_points.asked()
    assert len(wanted) > 300 and "cuMemCreate" in wanted and "nvmlDeviceGetHandleByPciBusId_v2" in wanted
    assert "cudaStreamBeginCapture" in wanted and "cuFileRead" not in wanted and "cuDNN" not in wanted
    stale = entry_points.missing_from(set(entry_points.read_table()), wanted)
    assert not stale, f"entry_points.txt lacks {stale}; run python -m pcompile.vdev.entry_points --write"
    defined = entry_points.defined_names(lib) | entry_points.defined_names(lib.with_name(build.NVML_NAME))
    missing = entry_points.missing_from(defined, wanted)
    assert not missing, f"the virtual device does not define: {missing}"


def test_proc_address_hands_out_our_definitions_at_the_newest_abi(lib, tmp_path):
    code = (
        "import ctypes, json\n"
        "d = ctypes.CDLL('libcuda.so.1')\n"
        "def get(name):\n"
        "    fn = ctypes.c_void_p(); st = ctypes.c_int(-1)\n"
        "    rc = d.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn), 13000, ctypes.c_ulonglong(0), ctypes.byref(st))\n"
        "    return rc, fn.value, st.value\n"
        "addr = lambda n: ctypes.cast(getattr(d, n), ctypes.c_void_p).value\n"
        "rc, fn, st = get('cuMemCreate'); rc2, fn2, _ = get('cuMemGetAddressRange'); rc3, fn3, st3 = get('cuNoSuchCall')\n"
        "stub = ctypes.cast(get('cuGraphAddKernelNode')[1], ctypes.CFUNCTYPE(ctypes.c_int))()\n"
        "n = d.pcompile_vdev_stats(None, 0); buf = ctypes.create_string_buffer(n + 1); d.pcompile_vdev_stats(buf, n + 1)\n"
        "print(json.dumps({'ours': fn == addr('cuMemCreate') and rc == 0 and st == 0,\n"
        "  'v2': fn2 == addr('cuMemGetAddressRange_v2') and rc2 == 0, 'unknown': [rc3, fn3, st3], 'stub': stub,\n"
        "  'stats': json.loads(buf.value)}))\n"
    )
    got, _ = _run(lib, tmp_path, code)
    assert got["ours"] and got["v2"]
    assert got["unknown"] == [500, None, 1]  # CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
    # a refused call resolves to its newest ABI's stub (cuGraphAddKernelNode_v2) and is counted by that name
    assert got["stub"] == 801 and got["stats"]["unsupported:cuGraphAddKernelNode_v2"] == 1
    assert got["stats"]["entry_point_missing:cuNoSuchCall"] == 1


C_PATHS = r"""
import ctypes, json, os, random
d = ctypes.CDLL('libcuda.so.1')
P, S, U = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ulonglong
out = {}
# alloc/free churn, interleaved, random sizes; frees of foreign, interior and freed pointers are refused
live = []
for i in range(3000):
    if live and random.random() < 0.45:
        p = live.pop(random.randrange(len(live)))
        assert d.cudaFree(P(p)) == 0
    else:
        p = P(); assert d.cudaMalloc(ctypes.byref(p), S(random.randint(1, 1 << 20))) == 0
        ctypes.memset(p.value, 0xAB, 64); live.append(p.value)
gone = live.pop(); assert d.cudaFree(P(gone)) == 0
host = ctypes.create_string_buffer(4096)
out['refused'] = [d.cudaFree(P(gone)), d.cudaFree(P(live[0] + 8)), d.cudaFree(P(ctypes.addressof(host)))]
for p in live: assert d.cudaFree(P(p)) == 0
h = P(); assert d.cudaMallocHost(ctypes.byref(h), S(100)) == 0 and d.cudaFreeHost(h) == 0 and d.cudaFreeHost(h) != 0
# VMM as expandable segments drive it: reserve, create, map, access, write, second view, unmap, release, free
g = S(); assert d.cuMemGetAllocationGranularity(ctypes.byref(g), None, 0) == 0
va = U(); assert d.cuMemAddressReserve(ctypes.byref(va), S(4 * g.value), S(0), U(0), U(0)) == 0
handle = U(); assert d.cuMemCreate(ctypes.byref(handle), S(2 * g.value), None, U(0)) == 0
assert d.cuMemMap(U(va.value), S(2 * g.value), S(0), handle, U(0)) == 0
assert d.cuMemMap(U(va.value + 2 * g.value), S(g.value), S(g.value), handle, U(0)) == 0  # 2nd half again
assert d.cuMemSetAccess(U(va.value), S(3 * g.value), None, S(1)) == 0
ctypes.memset(va.value + g.value, 0x5A, 16)
out['shared_bytes'] = ctypes.string_at(va.value + 2 * g.value, 4).hex()
attr = (ctypes.c_int * 6)(); d.cudaPointerGetAttributes(attr, P(va.value + 100)); out['vmm_is_device'] = attr[0]
base, size = U(), S(); d.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), U(va.value + 5))
out['range'] = [base.value == va.value, size.value == 4 * g.value]
assert d.cuMemRelease(handle) == 0  # still mapped: stays readable
out['after_release'] = ctypes.string_at(va.value + g.value, 2).hex()
assert d.cuMemUnmap(U(va.value), S(3 * g.value)) == 0 and d.cuMemAddressFree(U(va.value), S(4 * g.value)) == 0
# streams and events: create/destroy churn, timing, refused destroys of constants and dead handles
for i in range(500):
    s, e = P(), P()
    assert d.cudaStreamCreate(ctypes.byref(s)) == 0 and d.cudaEventCreateWithFlags(ctypes.byref(e), 2) == 0
    assert d.cudaEventDestroy(e) == 0 and d.cudaStreamDestroy(s) == 0
out['destroy_default'] = [d.cudaStreamDestroy(P(0)), d.cudaStreamDestroy(P(2))]
a, b = P(), P(); d.cudaEventCreate(ctypes.byref(a)); d.cudaEventCreate(ctypes.byref(b))
d.cudaEventRecord(a, None); d.cudaEventRecord(b, None)
ms = ctypes.c_float(); out['elapsed_rc'] = d.cudaEventElapsedTime(ctypes.byref(ms), a, b); out['elapsed'] = ms.value
# capture state machine: begin, info, end, instantiate, launch, destroy
s = P(); d.cudaStreamCreate(ctypes.byref(s))
st, cid = ctypes.c_int(-1), U()
out['capture'] = [d.cudaStreamBeginCapture(s, 0), d.cudaStreamGetCaptureInfo(s, ctypes.byref(st), ctypes.byref(cid), None, None, None, None), st.value, cid.value > 0]
out['legacy'] = d.cudaStreamBeginCapture(P(0), 0)
mode = ctypes.c_int(2); d.cudaThreadExchangeStreamCaptureMode(ctypes.byref(mode)); out['mode'] = mode.value
graph, ex = P(), P()
out['end'] = [d.cudaStreamEndCapture(s, ctypes.byref(graph)), d.cudaStreamIsCapturing(s, ctypes.byref(st)), st.value,
              d.cudaStreamEndCapture(s, ctypes.byref(graph))]
n = S(); d.cudaGraphGetNodes(graph, None, ctypes.byref(n)); out['nodes'] = n.value
out['replay'] = [d.cudaGraphInstantiateWithFlags(ctypes.byref(ex), graph, U(0)), d.cudaGraphLaunch(ex, s), d.cudaGraphLaunch(ex, s),
                 d.cudaGraphExecDestroy(ex), d.cudaGraphDestroy(graph)]
print(json.dumps(out))
"""


def test_c_paths_are_memory_safe_under_asan(asan_lib, tmp_path):
    got, _ = _run(asan_lib, tmp_path, C_PATHS)
    assert got["refused"] == [1, 1, 1]
    assert got["shared_bytes"] == "5a5a5a5a" and got["after_release"] == "5a5a"  # one handle, two views
    assert got["vmm_is_device"] == 2 and got["range"] == [True, True]
    assert got["destroy_default"] == [400, 400]
    assert got["elapsed_rc"] == 0 and got["elapsed"] > 0
    assert got["capture"] == [0, 0, 1, True] and got["legacy"] != 0 and got["mode"] == 0
    assert got["end"] == [0, 0, 0, 903] and got["nodes"] >= 1 and got["replay"] == [0, 0, 0, 0, 0]


TORCH_PATHS = r"""
import copy, json, torch, torch.nn as nn
from pcompile.compat import warm_fakes, warm_storage
out = {}
# real allocations through the caching allocator with expandable segments (set in the environment)
xs = [torch.empty(n, device='cuda', dtype=torch.uint8) for n in (1 << 10, 3 << 20, 1 << 22, 513)]
out['distinct_real'] = len({x.data_ptr() for x in xs}) == 4
del xs; torch.cuda.empty_cache()
a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
a.record(); b.record(); torch.cuda.synchronize(); out['elapsed'] = a.elapsed_time(b)
mode = warm_fakes.new_fake_mode(lambda how: None)
warm_storage.install(mode)
with mode:
    m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).cuda()
    m.register_buffer('step', torch.tensor([3.0]).cuda())   # small, from host data: has a real constant
    g = torch.cuda.CUDAGraph()
    x = torch.randn(8, 64, device='cuda')
    with torch.cuda.graph(g):
        y = m(x)
    g.replay()
    copies = [copy.deepcopy(m) for _ in range(5)]
    c = m[0].weight.detach().clone()
    out['ptrs'] = len({p.data_ptr() for mm in [m] + copies for p in mm.parameters()})
    out['zero'] = any(p.data_ptr() == 0 for p in m.parameters())
    out['clone_differs'] = c.data_ptr() != m[0].weight.data_ptr()
    out['copy_device'] = str(copies[-1].step.device)
del copies, m
import gc; gc.collect()
print(json.dumps(out))
"""


def test_torch_paths_are_memory_safe_under_asan(asan_lib, tmp_path):
    """Expandable segments, events, CUDA graph capture and deep copies of a model's fakes (which
    corrupted the heap before) under ASan's allocator for the whole process."""
    got, _ = _run(asan_lib, tmp_path, TORCH_PATHS, env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    assert got["distinct_real"] and got["elapsed"] > 0
    assert got["ptrs"] == 6 * 4 and not got["zero"] and got["clone_differs"] and got["copy_device"] == "cuda:0"


def test_asan_run_catches_the_double_release_the_fix_removes(asan_lib, tmp_path):
    """Without warm_storage's fix a deep-copied StorageWeakRef releases its storage twice: the
    sanitized run must fail on it (so the runs above can fail)."""
    code = ("import copy, gc, torch\nfrom torch.multiprocessing.reductions import StorageWeakRef\n"
            "t = torch.randn(4)\nfor _ in range(3):\n    r = StorageWeakRef(t.untyped_storage()); r2 = copy.deepcopy(r); del r, r2; gc.collect()\n"
            "del t; gc.collect()\nprint('{}')\n")
    full = preload.child_env(asan_lib, resolve("h100"), tmp_path, False)
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=600)
    assert out.returncode != 0 and ("AddressSanitizer" in out.stderr or "use_count" in out.stderr), out.stderr[-2000:]
