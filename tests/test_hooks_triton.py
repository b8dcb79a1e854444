"""Triton kernels for an sm_90 target compile on this CPU-only host and land in the store.

An Inductor-generated kernel module (DeviceProperties cc=90, as Inductor writes for an H100) is
compiled standalone, the way a compile worker does it. pcompile's Triton cache manager must
publish the kernel's whole file group (cubin, metadata JSON, IRs) as one entry of layer kernel;
a second process with an empty Triton cache must get it from the store (a hit, no compile)
with the files written into its local Triton dir, byte-identical.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pcompile.inductor import _testing as t

pytest.importorskip("triton")

KERNEL = r"""
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

@triton_heuristics.pointwise(
    size_hints={'x': 1024},
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused_relu_0', 'mutated_arg_names': [], 'optimize_mem': False, 'no_x_dim': False, 'num_load': 1, 'num_reduction': 0, 'backend_hash': None, 'are_deterministic_algorithms_enabled': False, 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False},
    min_elem_per_thread=0
)
@triton.jit
def triton_poi_fused_relu_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 1024
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), xmask)
    tmp1 = tl.full([1], 0, tl.int32)
    tmp2 = triton_helpers.maximum(tmp1, tmp0)
    tl.store(out_ptr0 + (x0), tmp2, xmask)
"""

SCRIPT = r'''
import json, os, sys
from pcompile.inductor import hooks
assert hooks.install_hooks() and "kernel.triton" in hooks.state.layers, hooks.state
from pcompile.compat.triton_compile import compile_kernel_source
kernel, _ = compile_kernel_source("triton_poi_fused_relu_0", open(sys.argv[1]).read())
from pcompile.inductor import store_gateway
from pcompile.store.compose import default_store
st = default_store()
st.stats.flush()
cubins = {}
for root, _, files in os.walk(os.environ["TRITON_CACHE_DIR"]):
    for name in files:
        if name.endswith(".cubin"):
            cubins[os.path.basename(root)] = open(os.path.join(root, name), "rb").read().hex()
print("PCOMPILE_RESULT " + json.dumps({"kernel": st.stats.data["layers"]["kernel"], "compiles": st.stats.data["compiles"],
      "configs": len(kernel.compile_results), "cubins": cubins, "held": store_gateway.held_keys()}))
'''


def test_sm90_kernel_compiles_on_cpu_host_and_lands_in_store(tmp_path: Path) -> None:
    source = tmp_path / "kernel_src.py"
    source.write_text(KERNEL)
    script = t.write_script(tmp_path / "app", "compile_kernel.py", SCRIPT)
    cache = tmp_path / "pc"

    def env(n: int) -> dict[str, str]:
        return t.clean_env(PCOMPILE_CACHE_DIR=str(cache), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"ind{n}"),
                           TRITON_CACHE_DIR=str(tmp_path / f"triton{n}"))

    first, _ = t.run(script, str(source), env(1))
    assert first["configs"] >= 1 and first["held"] == []
    assert first["kernel"] == {"hits": 0, "misses": first["configs"]} and first["compiles"] == first["configs"]
    manifests = sorted((cache / "store" / "manifests" / "kernel").rglob("*.json"))
    assert len(manifests) == first["configs"], "one entry per compiled kernel (file group)"
    for path in manifests:
        body = json.loads(path.read_text())
        names = set(body["blobs"])
        assert {"triton_poi_fused_relu_0.cubin", "triton_poi_fused_relu_0.json"} <= names, names
        assert body["meta"]["target"] == "cuda:90" and body["meta"]["source"] == "triton"

    second, _ = t.run(script, str(source), env(2))
    assert second["kernel"] == {"hits": second["configs"], "misses": 0} and second["compiles"] == 0
    assert second["cubins"] == first["cubins"] and len(second["cubins"]) == first["configs"]


NATIVE = r'''
import json, os, sys
from pcompile.inductor import hooks
assert hooks.install_hooks() and "kernel.triton" in hooks.state.layers, hooks.state
from triton.runtime.build import compile_module_from_src
src = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject* answer(PyObject* self, PyObject* args) { return PyLong_FromLong(42); }
static PyMethodDef M[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "pc_native_probe", NULL, -1, M};
PyMODINIT_FUNC PyInit_pc_native_probe(void) { return PyModule_Create(&D); }
"""
mod = compile_module_from_src(src, "pc_native_probe")
from pcompile.store.compose import default_store
st = default_store()
st.stats.flush()
sos = [n for _, _, fs in os.walk(os.environ["TRITON_CACHE_DIR"]) for n in fs if n.endswith(".so")]
print("PCOMPILE_RESULT " + json.dumps({"answer": mod.answer(), "kernel": st.stats.data["layers"]["kernel"], "sos": sos}))
'''


def test_native_modules_come_from_the_store_on_a_fresh_node(tmp_path: Path) -> None:
    """Triton's host-compiled modules (cuda_utils, launchers) are stored: a process with an empty
    Triton dir loads the stored .so instead of running the C compiler (CC points at `false`)."""
    script = t.write_script(tmp_path / "app", "native.py", NATIVE)
    cache = tmp_path / "pc"

    def env(n: int, **extra: str) -> dict[str, str]:
        return t.clean_env(PCOMPILE_CACHE_DIR=str(cache), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"ind{n}"),
                           TRITON_CACHE_DIR=str(tmp_path / f"triton{n}"), **extra)

    first, _ = t.run(script, "build", env(1))
    assert first["answer"] == 42 and first["kernel"] == {"hits": 0, "misses": 1} and len(first["sos"]) == 1
    second, _ = t.run(script, "load", env(2, CC="/bin/false"))
    assert second["answer"] == 42 and second["kernel"] == {"hits": 1, "misses": 0} and second["sos"] == first["sos"]
