"""compat/ddp_programs.py against the installed torch: fails loudly when a version moves what it
touches (the converter's clone, DDPOptimizer's compile_fn and bucket wrappers, backend artifacts).
The 2-rank restarts that run a DDP program are in test_ddp_autograd_cache.py."""
from __future__ import annotations

import pickle
import types

import pytest

torch = pytest.importorskip("torch")

from pcompile.compat import ddp_programs as compat  # noqa: E402


def test_check_passes_on_this_torch() -> None:
    compat.check()


def _split_graph(extra_attr: bool = False) -> torch.fx.GraphModule:
    """What SubmodCompiler leaves: a graph calling `compiled_submod_N` wrappers around callables."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    a = graph.call_module("compiled_submod_0", (x,))
    b = graph.call_module("compiled_submod_1", (a,))
    out = graph.call_function(torch.add, (b, graph.get_attr("const") if extra_attr else 1.0))
    graph.output(out)
    root = torch.nn.Module()
    for i, fn in enumerate((lambda t: (t * 2,), lambda t: t + 3)):
        wrapper = torch.nn.Module()
        wrapper.submod, wrapper.unwrap_singleton_tuple = fn, i == 0
        setattr(root, f"compiled_submod_{i}", wrapper)
    if extra_attr:
        root.register_buffer("const", torch.ones(1))
    return torch.fx.GraphModule(root, graph)


def test_a_split_graph_is_described_with_its_buckets_as_slots_and_pickles() -> None:
    gm = _split_graph()
    ids = {id(gm.compiled_submod_0.submod): "__compiled_fn_1_x_ddp0", id(gm.compiled_submod_1.submod): "__compiled_fn_1_x_ddp1"}
    described = compat._describe(gm, ids)
    assert described is not None
    assert described["buckets"] == {"compiled_submod_0": ("__compiled_fn_1_x_ddp0", True),
                                    "compiled_submod_1": ("__compiled_fn_1_x_ddp1", False)}
    graph = pickle.loads(described["graph"])
    assert type(graph.compiled_submod_0).__name__ == "Slot" and graph.code == gm.code
    # the rebuilt buckets do what SubmodCompiler's wrappers did (unwrapping a 1-tuple)
    graph.compiled_submod_0 = compat._made("Bucket")(gm.compiled_submod_0.submod, True)
    graph.compiled_submod_1 = compat._made("Bucket")(gm.compiled_submod_1.submod, False)
    assert torch.equal(graph(torch.ones(2)), torch.full((2,), 6.0))


def test_a_split_graph_holding_anything_else_or_an_unknown_bucket_is_refused() -> None:
    gm = _split_graph(extra_attr=True)
    ids = {id(gm.compiled_submod_0.submod): "a", id(gm.compiled_submod_1.submod): "b"}
    assert compat._describe(gm, ids) is None
    plain = _split_graph()
    assert compat._describe(plain, {id(plain.compiled_submod_0.submod): "a"}) is None


def test_resolve_puts_the_buckets_inside_and_leaves_out_a_split_graph_missing_one() -> None:
    klass = compat._made("SplitGraphArtifact")
    content = {"graph": b"", "buckets": {"compiled_submod_0": ("f_ddp0", False), "compiled_submod_1": ("f_ddp1", True)},
               "resolved": {}}
    bucket = types.SimpleNamespace(content="entry0")
    partial = compat.resolve({"f": klass("f", content), "f_ddp0": bucket})
    assert "f" not in partial and partial["f_ddp0"] is bucket  # torch marks that frame bypassed: saved again later
    whole = compat.resolve({"f": klass("f", content), "f_ddp0": bucket, "f_ddp1": types.SimpleNamespace(content="entry1")})
    assert whole["f"].content["resolved"] == {"f_ddp0": "entry0", "f_ddp1": "entry1"}
    assert content["resolved"] == {}  # the recorded artifact itself is left as it was
    again = compat.resolve({"f": whole["f"]})  # a loaded program saved again: already complete
    assert again["f"].content["resolved"] == whole["f"].content["resolved"]


def test_install_and_uninstall_leave_torch_as_it_was() -> None:
    from torch._dynamo import convert_frame
    from torch._dynamo.backends import distributed

    before = (convert_frame.ConvertFrame.__dict__["_clone_with_backend"], distributed.DDPOptimizer.compile_fn)
    compat.install()
    try:
        assert distributed.DDPOptimizer.compile_fn is not before[1]
    finally:
        compat.uninstall()
    assert (convert_frame.ConvertFrame.__dict__["_clone_with_backend"], distributed.DDPOptimizer.compile_fn) == before
