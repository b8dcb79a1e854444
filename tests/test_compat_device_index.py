"""compat/device_index.py against the installed torch: its private touches exist, the code
patterns match what Inductor prints, a graph reads cuda:0 only inside a key scope, and a pool
result is rebound to the requesting device."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from pcompile import compat
from pcompile.compat import device_index as di

WRAPPER = """
    with torch.cuda._DeviceGuard(1):
        torch.cuda.set_device(1)
        buf0 = torch.full([4], 0.5, device=device(type='cuda', index=1))
        raw_stream1 = get_raw_stream(1)
        semaphores_cuda_1 = empty_strided_cuda((8, ), (1, ), torch.int32)
async_compile.triton('k', '''
@triton_heuristics.pointwise(triton_meta={'device': DeviceProperties(type='cuda', index=1, multi_processor_count=132, cc=90)})
''', device_str='cuda')
    x = rand_strided((4, ), (1, ), device='cuda:1', dtype=torch.float32)
"""


def test_check_passes_on_this_torch() -> None:
    assert compat.check("device_index") is None
    di.check()  # raises CompatError naming the private API that moved
    assert di.cpp_wrapper_on() is False


def test_patterns_find_and_rebind_every_device_reference() -> None:
    assert di.indices_in(WRAPPER) == {1}
    out = di.rebind_text(WRAPPER, 1, 3)
    assert di.indices_in(out) == {3}
    assert "_DeviceGuard(3)" in out and "set_device(3)" in out and "get_raw_stream(3)" in out
    assert "index=3, multi_processor_count" in out and "'cuda:3'" in out
    # names that only contain the index are not device references
    assert "raw_stream1 =" in out and "semaphores_cuda_1 =" in out
    assert di.rebind_text(WRAPPER, 2, 3) == WRAPPER  # another device's code is left alone


def test_kernel_source_is_hashed_as_for_cuda0(tmp_path: Path) -> None:
    src = "triton_meta={'device': DeviceProperties(type='cuda', index=5, multi_processor_count=132, cc=90)}\n"
    zero = src.replace("index=5", "index=0")
    assert di.canonical_kernel_source(src) == zero
    assert di.canonical_kernel_source(zero) is zero
    f5, f0 = tmp_path / "a.py", tmp_path / "b.py"
    f5.write_text(src)
    f0.write_text(zero)
    assert Path(di.canonical_kernel_filename(str(f5))).name == di._code_hash(zero) + ".py"
    assert di.canonical_kernel_filename(str(f0)) == str(f0)


def _graph_with_constant(device: object) -> torch.fx.GraphModule:
    """x + arange(4, device=device), built node by node (tracing would run arange on a GPU)."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    c = g.call_function(torch.arange, (4,), {"device": device})
    g.output(g.call_function(torch.add, (x, c)))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_graph_reads_cuda0_only_inside_the_key_scope() -> None:
    gm = _graph_with_constant(torch.device("cuda", 1))
    before = gm.code
    assert di.graph_devices(gm) == {1}
    with di.mapped_graph(gm, 1):
        assert "index=0" in gm.code and "index=1" not in gm.code
    assert gm.code == before
    assert di.graph_devices(gm) == {1}


def test_unindexed_cuda_is_reported_as_current() -> None:
    assert di.graph_devices(_graph_with_constant("cuda")) == {di.CURRENT}
    assert di.graph_devices(_graph_with_constant(torch.device("cuda"))) == {di.CURRENT}
    assert di.graph_devices(_graph_with_constant("cuda:2")) == {2}


def test_pool_result_rebinds_to_the_requesting_device() -> None:
    from torch._inductor.runtime.hints import DeviceProperties

    @dataclasses.dataclass
    class Result:
        compile_meta: dict

    class Kernel:
        device_props = DeviceProperties(type="cuda", index=0, multi_processor_count=132, cc=90, major=9,
                                        regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048,
                                        max_threads_per_block=1024, warp_size=32)
        triton_meta = {"device": 0, "device_type": "cuda"}
        compile_results = [Result({"device": 0, "cc": 90})]

    k = Kernel()
    assert di.rebind_autotuner(k, 2)
    assert k.device_props.index == 2 and k.triton_meta["device"] == 2 and k.compile_results[0].compile_meta["device"] == 2
    assert k.device_props.multi_processor_count == 132
    assert not di.rebind_autotuner(k, 2)
