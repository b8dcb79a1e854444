"""The warm path's private-torch touches still resolve, and its pure-Python pieces behave."""
from __future__ import annotations

import importlib
import runpy

import numpy as np
import pytest
import torch

from pcompile.inductor.graph_normalize import normalize_placeholder_types
from pcompile.compat import warm_fakes, warm_runtime, warm_timings
from pcompile.warm import reads


#: named here, not taken from warm_runtime.CONCERNS: a module left out of CONCERNS must still be
#: checked (test_the_whole_check_covers_every_warm_module then fails on the omission)
@pytest.mark.parametrize("name", ("warm_runtime", "warm_compiled_autograd", "warm_fakes", "warm_launches", "warm_nested", "warm_programs", "warm_storage", "warm_timings", "warm_tracers", "warm_training", "warm_uncached",
                                  "warm_values"))
def test_private_apis_present_in_this_torch(name):
    module = importlib.import_module(f"pcompile.compat.{name}")
    assert warm_runtime.version_supported(), f"torch {torch.__version__} outside {warm_runtime.SUPPORTED}"
    assert module.check() == [], f"private torch APIs used by pcompile warm moved; update {module.__file__}"


def test_the_whole_check_covers_every_warm_module():
    """warm_runtime.check() is what the warm child refuses on: it must run each concern's check()."""
    from pathlib import Path

    here = Path(warm_runtime.__file__).parent
    on_disk = sorted(p.stem for p in here.glob("warm_*.py") if p.stem != "warm_runtime")
    assert sorted(warm_runtime.CONCERNS) == on_disk
    warm_timings.PRIVATE_SYMBOLS.append(("torch._inductor", "_no_such_name_pcompile_test"))
    try:
        assert warm_runtime.check() == ["torch._inductor._no_such_name_pcompile_test"]
    finally:
        warm_timings.PRIVATE_SYMBOLS.pop()


def test_every_value_read_of_a_fake_reaches_the_route(scoped):
    """Each way a script reads a value (`.item()`, `bool()`, `float()`, `int()`, an index, `complex()`,
    `.tolist()`, `.numpy()`) reaches warm_fakes' route: a read torch serves without one of the
    methods it patches would hand the script FakeTensor's own error instead of a stand-in."""
    import operator

    mode, seen = scoped
    with mode:
        f, i = torch.ones((), device="cuda"), torch.ones((), dtype=torch.int64, device="cuda")
        f.item(), bool(f), float(f), int(f), operator.index(i), complex(f), f.tolist()
        with pytest.raises(TypeError, match="numpy"):  # as the GPU job: a CUDA tensor has no numpy()
            f.numpy()
    assert seen == ["item", "__bool__", "__float__", "__int__", "__index__", "__complex__", "tolist", "numpy"]


def test_caching_autotuner_run_signature():
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    assert callable(CachingAutotuner.run)


def test_normalize_placeholder_types_matches_real_annotations():
    """Inside a backend (where Dynamo's grapharg metadata is live), a warm-style FakeTensor
    annotation normalises back to exactly what the real run recorded."""
    from torch._subclasses.fake_tensor import FakeTensor

    seen = {}

    def backend(gm, example_inputs):
        real = {n.name: n.type for n in gm.graph.find_nodes(op="placeholder")}
        for n in gm.graph.find_nodes(op="placeholder"):
            n.type = FakeTensor  # what a warm process records
        gm.recompile()
        seen["fake_code"] = gm.code
        normalize_placeholder_types(gm)
        seen["real"], seen["normalized"], seen["code"] = real, {n.name: n.type for n in gm.graph.find_nodes(op="placeholder")}, gm.code
        return gm.forward

    torch._dynamo.reset()
    torch.compile(torch.nn.Linear(4, 3), backend=backend)(torch.randn(2, 4))
    torch._dynamo.reset()
    assert torch.nn.Parameter in seen["real"].values() and torch.Tensor in seen["real"].values()
    assert "FakeTensor" in seen["fake_code"]
    assert seen["normalized"] == seen["real"]
    assert "FakeTensor" not in seen["code"]


@pytest.fixture
def scoped():
    """The warm's device-scoped fake mode, with value reads routed as in the warm child."""
    seen: list[str] = []
    mode = warm_fakes.new_fake_mode(seen.append)
    warm_fakes.fake_scalar_reads(lambda t: getattr(t, "fake_mode", None) is mode, lambda t, how: (seen.append(how), reads.read_fake(t, how))[1])
    return mode, seen


def test_host_ops_run_for_real_and_cuda_ops_are_virtual(scoped):
    from torch._subclasses.fake_tensor import FakeTensor

    mode, seen = scoped
    data = np.arange(100, dtype=np.uint16)
    with mode:
        ix = torch.randint(90, (4,))                       # a real CPU index ...
        x = torch.stack([torch.from_numpy(data[i:i + 8].astype(np.int64)) for i in ix])  # ... into a memmap-like array
        assert not isinstance(x, FakeTensor) and x[0, 1] - x[0, 0] == 1  # real values
        sched = [v.item() for v in torch.linspace(0, 0.1, 3)]   # CPU values read for real
        assert sched == pytest.approx([0.0, 0.05, 0.1])
        xc = x.to("cuda")
        assert isinstance(xc, FakeTensor) and xc.device.type == "cuda"
        y = (xc.float() * 3).sum()
        assert isinstance(y, FakeTensor)
    assert seen == []  # no GPU value was read so far


def test_gpu_values_read_back_as_zeros_and_are_counted(scoped):
    mode, seen = scoped
    with mode:
        loss = torch.randn(4, 4, device="cuda").sum()
        assert loss.item() == 0.0 and float(loss) == 0.0 and f"{loss:.4f}" == "0.0000"
        assert not bool(loss > 1.0)
        losses = torch.zeros(3)
        losses[1] = loss                                    # a copy into a real CPU tensor
        assert losses.tolist() == [0.0, 0.0, 0.0]
        h = (torch.randn(2, 3, device="cuda") + 7).long().cpu()  # device to host: real zeros, right shape/dtype
        assert h.device.type == "cpu" and h.dtype == torch.int64 and h.shape == (2, 3) and int(h.sum()) == 0
        nz = (torch.randn(5, device="cuda").abs() + 1).nonzero()  # value-dependent shape: empty, as zeros would give
        assert nz.device.type == "cuda" and tuple(nz.shape) == (0, 1)
        assert torch.rand(2, 2, device="cuda").tolist() == [[0.0, 0.0], [0.0, 0.0]]
        with pytest.raises(TypeError, match="numpy"):
            torch.ones(2, device="cuda").numpy()
        with pytest.raises(RuntimeError, match="ambiguous"):
            bool(torch.ones(2, device="cuda"))
    assert seen.count("item") >= 1 and ".cpu()" in seen and "copy to a CPU tensor" in seen


def test_printing_a_device_tensor_shows_the_gpu_jobs_repr_of_its_values(scoped):
    """print(t), str(t) and f"{t}" of a virtual tensor print what the GPU job would (torch's repr,
    with the device and autograd suffixes) of a GPU holding zeros, and count as reads; host data
    copied to the GPU prints its real values, uncounted. FakeTensor's own repr was printed."""
    from pcompile.compat.warm_values import forget

    mode, _ = scoped
    before = reads.summary()["total"]
    with mode:
        x = torch.randn(4, device="cuda")
        assert str(x) == repr(x) == f"{x}" == "tensor([0., 0., 0., 0.], device='cuda:0')"
        w = torch.randn(2, 3, device="cuda", requires_grad=True)
        assert repr(w) == "tensor([[0., 0., 0.],\n        [0., 0., 0.]], device='cuda:0', requires_grad=True)"
        assert repr((w * 2).sum()) == "tensor(0., device='cuda:0', grad_fn=<SumBackward0>)"
        assert repr(torch.randint(9, (2,), device="cuda", dtype=torch.int32)) == "tensor([0, 0], device='cuda:0', dtype=torch.int32)"
        assert repr(torch.empty(0, 3, device="cuda")) == "tensor([], device='cuda:0', size=(0, 3))"
        n_reads = reads.summary()["total"] - before
        big = torch.empty(1 << 16, 1 << 16, device="cuda", dtype=torch.bfloat16)  # 8 GiB on the GPU
        assert repr(big).startswith("tensor([[0., 0., 0.,  ..., 0., 0., 0.],") and "dtype=torch.bfloat16" in repr(big)
        bias = torch.nn.Linear(2, 2).cuda().bias
        assert repr(bias) == "Parameter containing:\ntensor([0., 0.], device='cuda:0', requires_grad=True)"
        labels = torch.tensor([3, -100, 7]).to("cuda")    # the script's own host data
        assert repr(labels) == "tensor([   3, -100,    7], device='cuda:0')"
        forget(labels)
    assert n_reads == 6 and reads.summary()["total"] - before == n_reads + 3  # str, repr, format, 3 more, big x2, the bias; not the empty one


def test_graphs_inductor_does_not_cache_are_named_in_the_summary():
    """A graph whose FX cache Inductor bypasses (here a foreach_map higher-order op) is compiled by
    the GPU job whatever the warm did: the warm says so, with Inductor's reason."""
    from types import SimpleNamespace

    from torch._higher_order_ops.foreach_map import foreach_map

    from pcompile.compat import warm_uncached
    from pcompile.warm import report

    seen: list[str] = []
    warm_uncached.on_fx_cache_bypass(seen.append)
    torch._dynamo.reset()
    try:
        torch.compile(lambda xs: foreach_map(lambda x: x * 2, xs))([torch.ones(4), torch.ones(3)])
    finally:
        torch._dynamo.reset()
        warm_uncached.on_fx_cache_bypass(lambda reason: None)
    assert len(seen) == 1 and "foreach_map" in seen[0], seen
    result = SimpleNamespace(report={"status": "completed", "fx_cache_bypassed": {seen[0]: 2}}, seconds=1.0,
                             profile=SimpleNamespace(name="H100", arch="sm_90"), written={}, cache_dir="c", lookups=None,
                             worker_vdev=[], version_warnings=[])
    lines = [ln for ln in report.report_lines(result) if "does not cache" in ln]
    assert lines == [f"not warmed: 2 graphs Inductor does not cache ({seen[0]} x2); the GPU job compiles them again, "
                     "only their Triton kernels come from the cache"]


def test_compile_counters_survive_a_script_that_clears_them():
    """Tutorials and torch's own TestCase call `torch._dynamo.utils.counters.clear()`; the warm's
    summary and report read those counters at the end, and showed only what came after the clear."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import fresh_inductor_cache

    warm_runtime.during_inductor_compile(lambda: None, lambda: None)
    torch._dynamo.reset()
    before = warm_runtime.counters().get("inductor", {})
    n_before = sum(v for k, v in before.items() if k.startswith("fxgraph_cache_"))
    try:
        with fresh_inductor_cache():                       # compiled here: inside the compile windows
            torch.compile(lambda x: x.sin() + 1)(torch.randn(3))
            counters.clear()                               # as the script does
            torch.compile(lambda x: x.cos() * 3)(torch.randn(5))
    finally:
        torch._dynamo.reset()
    after = warm_runtime.counters()["inductor"]
    assert sum(v for k, v in after.items() if k.startswith("fxgraph_cache_")) - n_before == 2, after


def test_a_clear_is_banked_but_a_lower_gauge_is_not():
    """Torch sets some counters as gauges (DDP's bucket count): one lower value is not a clear."""
    from torch._dynamo.utils import counters

    group = "pcompile_test_gauges"
    try:
        counters[group].update(hits=5, buckets=3)
        warm_runtime.observe_counters()
        counters[group]["buckets"] = 2                    # a gauge set lower
        warm_runtime.observe_counters()
        assert warm_runtime.counters()[group] == {"hits": 5, "buckets": 2}
        counters[group].clear()                           # the script clears
        counters[group]["hits"] = 1
        assert warm_runtime.counters()[group] == {"hits": 6, "buckets": 2}
    finally:
        counters.pop(group, None)


def test_read_sites_name_the_script_line(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import pcompile.warm.reads as r\nfor _ in range(3):\n    r.record('item')\n")
    reads.set_script(str(script))
    try:
        runpy.run_path(str(script))
        rows = [ln for ln in reads.summary()["lines"] if ln["file"] == str(script)]
        assert rows and rows[0]["line"] == 3 and rows[0]["count"] == 3 and rows[0]["how"] == ["item"]
    finally:
        reads.set_script("")


def test_higher_order_operators_get_fake_tensor_modes_rule(scoped):
    """HOPs look their rule up by the mode's exact type; activation checkpointing's rng wrappers
    (graphsafe_run_with_rng_state on torch 2.11, timm's ViT with --grad-checkpointing) reach the
    device-scoped mode and must get FakeTensorMode's rule, not NotImplementedError."""
    from torch._prims.rng_prims import run_with_rng_state
    from torch._subclasses.fake_tensor import FakeTensor

    mode, _ = scoped
    with mode:
        x = torch.randn(4, device="cuda")
        out = run_with_rng_state(torch.zeros(16, dtype=torch.uint8), torch.ops.aten.mul.Tensor, x, x)
    assert isinstance(out, FakeTensor) and out.device.type == "cuda" and out.shape == (4,)


def test_host_data_keeps_its_values_and_model_state_stays_a_placeholder(scoped):
    """compat/warm_values.py: tensors made from host data compute for real through cheap ops
    (uncounted); parameters, random and uninitialised tensors, big tensors and anything a
    placeholder writes into read as zeros (counted)."""
    from pcompile.compat import warm_values

    mode, seen = scoped
    labels = torch.tensor([[1, -100, 3], [-100, 5, 6]])
    counted = lambda: reads.summary()["total"]  # noqa: E731  placeholder reads (the fixture's `seen` logs every read)
    start = counted()
    with mode:
        y = labels.to("cuda")
        valid = y != -100
        assert valid.sum().item() == 4 and int(y.max()) == 6 and bool(valid.any())
        assert torch.nonzero(valid).tolist() == [[0, 0], [0, 2], [1, 1], [1, 2]]
        rows, cols = torch.where(valid)
        assert rows.tolist() == [0, 0, 1, 1] and y[rows, cols].cpu().tolist() == [1, 3, 5, 6]
        assert torch.arange(4, device="cuda").cumsum(0).tolist() == [0, 1, 3, 6]
        buf = torch.empty(2, 3, dtype=torch.long, device="cuda")
        buf.copy_(labels)  # a preallocated device buffer filled from the host
        assert buf.eq(-100).sum().item() == 2
        assert counted() == start  # real values: no placeholder read
        lin = torch.nn.Linear(3, 2).cuda()
        assert lin.weight.sum().item() == 0.0 and counted() == start + 1  # parameters stay placeholders
        out = lin(y.float())
        assert tuple(out[valid[:, :2]].shape) == (2,)  # a real mask indexing a placeholder: real row count
        assert torch.empty(3, device="cuda").tolist() == [0.0, 0.0, 0.0]
        big = torch.ones(warm_values.SIZE_LIMIT + 1, dtype=torch.bool).to("cuda")
        assert big.sum().item() == 0  # above the limit: a placeholder, no CPU twin
        z = y.clone()
        z.add_(out.sum().long())  # written from a placeholder: the shadow goes
        assert z.tolist() == [[0, 0, 0], [0, 0, 0]]


def test_wrapper_reinterpret_makes_no_autograd_view_as_the_real_helper():
    """A compiled graph's sliced output (e.g. padded logits) must reach the next frame as it does on
    the GPU: same storage, no `_base`. A view would change the next graph's symbol names and keys."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from pcompile.compat.warm_launches import alias_without_base

    real = torch.empty(4, 16)
    stock = torch._C._dynamo.guards._reinterpret_tensor(real, (4, 10), (16, 1), 2)
    with FakeTensorMode():
        fake = torch.empty(4, 16)
        ours = alias_without_base(fake, (4, 10), (16, 1), 2)
        assert (ours._base is None) == (stock._base is None)
        assert (ours.shape, ours.stride(), ours.storage_offset()) == (stock.shape, stock.stride(), 2)
        assert ours.untyped_storage()._cdata == fake.untyped_storage()._cdata
        assert type(ours) is type(fake) and ours.fake_mode is fake.fake_mode and ours.device == fake.device
        assert ours.dtype == fake.dtype and not ours.requires_grad


def test_wrapper_reinterpret_costs_less_than_an_eager_view(scoped):
    """Compiled code must not cost the warm more host time than the eager ops it replaces: a
    wrapper reinterprets a buffer for almost every extern kernel and view, and scripts that time
    compiled against eager (the torch.compile tutorial asserts the speedup) branch on the result.
    Through the fake mode the alias took two dispatches, ~5x an eager `view`; built directly it
    takes a fraction of one."""
    import time

    from pcompile.compat.warm_launches import alias_without_base

    mode, _ = scoped

    def per_call(fn) -> float:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            best = min(best, time.perf_counter() - t0)
        return best

    with mode:
        x = torch.randn(64, 64, device="cuda")
        alias = per_call(lambda: alias_without_base(x, (32, 64), (64, 1), 64))
        view = per_call(lambda: x.view(32, 128))
    assert alias < view, f"reinterpret {alias * 5e3:.0f} us per call, eager view {view * 5e3:.0f} us"


def test_wrapper_realignment_of_a_fake_reads_no_device_pointer(capfd):
    """Inductor's wrapper realigns its inputs with a C++ helper that reads the data pointer: on a
    fake that printed torch's "Accessing the data pointer of FakeTensor ... almost definitely a bug
    in your code" on the user's terminal (C++, past Python's warning filters). An aligned fake
    passes through untouched; a misaligned one is still copied, as on the GPU."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from pcompile.compat.warm_launches import route_wrapper_allocations

    g = torch._C._dynamo.guards
    if not hasattr(g, "copy_if_misaligned"):
        pytest.skip("this torch's wrappers realign inputs in Python")
    route_wrapper_allocations()
    always = torch._C._get_warnAlways()
    torch._C._set_warnAlways(True)
    try:
        with FakeTensorMode():
            x = torch.empty(64, 4, device="cuda")
            aligned, misaligned = x[4:], x.view(-1)[1:]
            assert g.copy_if_misaligned(aligned) is aligned
            assert "data pointer of FakeTensor" not in capfd.readouterr().err
            copied = g.copy_if_misaligned(misaligned)
        assert copied is not misaligned and copied.shape == misaligned.shape
        assert copied.storage_offset() * copied.element_size() % 16 == 0
    finally:
        torch._C._set_warnAlways(always)


def test_aot_cache_bypass_reason_is_read_and_named_in_the_summary():
    """AOTAutograd's cache bypasses a graph whose key it cannot pickle (a nested jagged tensor input,
    on torch 2.14+; 2.11 pickles that key and caches the graph) or one compiled with freezing on (every
    version); torch only logs why. The warm reads that reason and names it instead of guessing (DDP's graphs)."""
    from types import SimpleNamespace

    from torch._dynamo.utils import counters

    from pcompile.compat import warm_uncached
    from pcompile.warm import report

    def bypassed() -> int:
        return counters["aot_autograd"]["autograd_cache_bypass"]

    seen: list[str] = []
    warm_uncached.on_aot_cache_bypass(seen.append)
    torch._dynamo.reset()
    lin = torch.nn.Linear(4, 4)
    try:
        before = bypassed()
        x = torch.nested.nested_tensor([torch.randn(n, 4) for n in (2, 3)], layout=torch.jagged)
        torch.compile(lambda t: torch.relu(lin(t)))(x).values().sum().backward()
        assert seen == ["Failed to pickle cache key"] * (bypassed() - before), (seen, bypassed() - before)
        torch._dynamo.reset()
        seen.clear()
        with torch._inductor.config.patch(freezing=True), torch.no_grad():
            torch.compile(lambda t: torch.relu(lin(t)))(torch.randn(2, 4))
    finally:
        torch._dynamo.reset()
        warm_uncached.on_aot_cache_bypass(lambda reason: None)
    assert seen == ["Cannot cache a graph with freezing enabled"], seen
    result = SimpleNamespace(report={"status": "completed", "counters": {"aot_autograd": {"autograd_cache_bypass": 1}},
                                     "aot_cache_bypassed": {"Failed to pickle cache key": 1}}, seconds=1.0,
                             profile=SimpleNamespace(name="H100", arch="sm_90"), written={}, cache_dir="c", lookups=None,
                             worker_vdev=[], version_warnings=[])
    lines = [ln for ln in report.report_lines(result) if "AOTAutograd of" in ln]
    assert lines == ["not warmed: AOTAutograd of 1 graphs (torch's reason: Failed to pickle cache key x1; the GPU job "
                     "traces them again, then hits their FX graphs and kernels)"], lines


def test_placeholder_checkpoints_round_trip_through_torchs_own_save_and_load():
    """compat/warm_checkpoints.py leans on torch.save's skip_data path and its zip writer/reader:
    a fake's storage becomes an empty record, a real tensor keeps its bytes, and torch.load gives
    zeros of the saved shape and dtype back (outside a fake mode)."""
    import io

    from torch._subclasses.fake_tensor import FakeTensorMode

    from pcompile.compat import warm_checkpoints

    with FakeTensorMode():
        big = torch.empty(512, 512, dtype=torch.bfloat16)
    real = torch.arange(5)
    buf = io.BytesIO()
    assert warm_checkpoints.save_placeholders(torch.save, {"w": big, "view": big[1:], "r": real}, buf)
    assert len(buf.getvalue()) < 8192  # 512 KiB of weights: none written
    warm_checkpoints.read_placeholders()
    buf.seek(0)
    back = torch.load(buf, weights_only=True)
    assert back["w"].shape == (512, 512) and back["w"].dtype == torch.bfloat16 and not back["w"].any()
    assert back["view"].shape == (511, 512) and torch.equal(back["r"], real)
