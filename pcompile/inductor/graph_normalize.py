"""Make Dynamo graphs hash the same in a warm process (fake inputs) and in the GPU job (real ones).

Dynamo annotates each placeholder with the Python type of the value it saw: `FakeTensor` when
`pcompile warm` runs the script on fake tensors, `Parameter`/`Tensor` in the real job. The
annotation is part of the graph's code, which AOTAutograd hashes into its cache key, so without
this the GPU job misses every AOTAutograd entry the warm wrote. The pcompile backend calls
`normalize_placeholder_types` in both processes before handing the graph on.
"""
from __future__ import annotations

import torch


def _is_fake(value: object) -> bool:
    from pcompile.compat.fake_tensor import is_fake

    return is_fake(value)


def _canonical_type(node: torch.fx.Node) -> type | None:
    """Parameter if Dynamo recorded an nn.Parameter for this input, else Tensor; None to keep."""
    if node.type is None or not isinstance(node.type, type) or not issubclass(node.type, torch.Tensor):
        return None
    grapharg = node.meta.get("grapharg")
    example = getattr(grapharg, "example", None) if grapharg is not None else None
    if isinstance(example, torch.nn.Parameter) or getattr(example, "_is_param", False):
        return torch.nn.Parameter
    if node.type is torch.nn.Parameter:
        return torch.nn.Parameter
    if _is_fake_type(node.type) or node.type is torch.Tensor:
        return torch.Tensor
    return None  # a user tensor subclass: its type is real information, keep it


def _is_fake_type(tp: type) -> bool:
    from pcompile.compat.fake_tensor import is_fake_type

    return is_fake_type(tp)


def normalize_placeholder_types(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Rewrite placeholder annotations FakeTensor -> Parameter/Tensor in place and recompile."""
    changed = False
    for node in gm.graph.find_nodes(op="placeholder"):
        want = _canonical_type(node)
        if want is not None and node.type is not want:
            node.type = want
            changed = True
    if changed:
        gm.recompile()
    return gm
