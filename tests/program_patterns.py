"""Compile patterns of real scripts, each run once per process: what tests/test_program_patterns.py
runs stock, pcompile cold and pcompile restarted (from programs), and compares.

Prints one JSON line: pattern -> {"out": digest of every output, "frames": Dynamo frames
converted during the pattern, "error": text if it raised}.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Callable

import torch
import torch.nn as nn

PATTERNS: dict[str, Callable[[], list[torch.Tensor]]] = {}


def pattern(fn: Callable[[], list[torch.Tensor]]) -> Callable[[], list[torch.Tensor]]:
    PATTERNS[fn.__name__] = fn
    return fn


class Scaler:  # at module scope, as a script's classes are (torch saves no local class's guards)
    def __init__(self, k: float) -> None:
        self.k = k

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * self.k


class Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        x.mul_(2)
        return x + self.calls


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))


@pattern
def closure_constant() -> list[torch.Tensor]:
    scale = 3.0

    @torch.compile
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * scale

    return [f(torch.arange(8.0)), f(torch.ones(8))]


@pattern
def compiled_optimizer_step() -> list[torch.Tensor]:
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    @torch.compile
    def step() -> None:
        opt.step()

    out = []
    for i in range(3):
        torch.manual_seed(i)
        loss = model(torch.randn(4, 16)).square().mean()
        loss.backward()
        step()
        opt.zero_grad()
        out.append(loss.detach())
    return out + [p.detach().clone() for p in model.parameters()]


@pattern
def dynamic_batch() -> list[torch.Tensor]:
    model = torch.compile(_mlp(), dynamic=True)
    return [model(torch.ones(n, 16) * n) for n in (2, 5, 9)]


@pattern
def mark_dynamic_then_other_sizes() -> list[torch.Tensor]:
    f = torch.compile(lambda x: (x * x).sum(dim=0))
    out = []
    for n in (3, 7, 11):
        x = torch.arange(n * 4.0).reshape(n, 4)
        torch._dynamo.mark_dynamic(x, 0)
        out.append(f(x))
    return out


@pattern
def fullgraph_module() -> list[torch.Tensor]:
    model = torch.compile(_mlp(), fullgraph=True)
    x = torch.linspace(-1, 1, 32).reshape(2, 16)
    y = model(x)
    y.sum().backward()
    return [y.detach()] + [p.grad for p in model.parameters()]


@pattern
def graph_break_in_the_middle() -> list[torch.Tensor]:
    @torch.compile
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.cos() + 1
        torch._dynamo.graph_break()
        return y * x.sin()

    return [f(torch.arange(6.0)), f(torch.arange(6.0) + 1)]


@pattern
def item_branch() -> list[torch.Tensor]:
    @torch.compile
    def f(x: torch.Tensor) -> torch.Tensor:
        if x.sum().item() > 0:  # a graph break on .item(), then a branch on its value
            return x * 2
        return x - 1

    return [f(torch.ones(4)), f(-torch.ones(4))]


@pattern
def module_hooks() -> list[torch.Tensor]:
    """Its own layer widths. Every compiled module's frame is `Module._call_impl`, and Dynamo does
    not guard a module's hooks by default (`skip_nnmodule_hook_guards`): an entry traced without
    hooks serves a hooked module whose other guards it passes. Stock does that too, from the
    second call on (hooked A, then plain B, then A again: A's hooks are skipped), and a restart
    from programs holds every entry from the start, so with `_mlp()`'s widths the first call
    already ran without its hooks."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 24), nn.GELU(), nn.Linear(24, 4))
    model[0].register_forward_pre_hook(lambda m, args: (args[0] * 0.5,))
    model[2].register_forward_hook(lambda m, args, out: out + 1)
    compiled = torch.compile(model)
    return [compiled(torch.ones(3, 16))]


@pattern
def autocast_bf16_cpu() -> list[torch.Tensor]:
    model = _mlp()

    @torch.compile
    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)

    y = f(torch.ones(2, 16))
    return [y.float(), torch.tensor(float(y.dtype == torch.bfloat16))]


@pattern
def eval_no_grad_then_train() -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16), nn.Dropout(0.0), nn.Linear(16, 2))
    compiled = torch.compile(model)
    x = torch.linspace(0, 1, 64).reshape(4, 16)
    model.eval()
    with torch.no_grad():
        a = compiled(x)
    with torch.inference_mode():
        b = compiled(x)
    model.train()
    c = compiled(x)
    c.sum().backward()
    return [a, b.clone(), c.detach(), model[1].running_mean.clone(), model[0].weight.grad]


@pattern
def kwargs_defaults_and_scalars() -> list[torch.Tensor]:
    @torch.compile
    def f(x: torch.Tensor, *, alpha: float = 2.0, mode: str = "add") -> torch.Tensor:
        return x + alpha if mode == "add" else x * alpha

    x = torch.arange(4.0)
    return [f(x), f(x, alpha=3.0), f(x, mode="mul"), f(x, alpha=0.5, mode="mul")]


@pattern
def bound_method_two_instances() -> list[torch.Tensor]:
    a, b = Scaler(2.0), Scaler(5.0)
    fa, fb = torch.compile(a.apply), torch.compile(b.apply)
    x = torch.arange(5.0)
    return [fa(x), fb(x), fa(x + 1)]


@pattern
def nested_compiled_calls() -> list[torch.Tensor]:
    @torch.compile
    def inner(x: torch.Tensor) -> torch.Tensor:
        return x.exp() - 1

    @torch.compile
    def outer(x: torch.Tensor) -> torch.Tensor:
        return inner(x) * 2 + inner(x * 0.5)

    return [outer(torch.linspace(0, 1, 8)), inner(torch.ones(3))]


@pattern
def module_compile_in_place() -> list[torch.Tensor]:
    model = _mlp()
    model.compile()
    x = torch.ones(2, 16)
    y = model(x)
    y.sum().backward()
    return [y.detach(), model[0].weight.grad]


GLOBAL_SHIFT = torch.zeros(4)


@pattern
def global_tensor_mutated_between_calls() -> list[torch.Tensor]:
    @torch.compile
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + GLOBAL_SHIFT

    x = torch.arange(4.0)
    first = f(x)
    GLOBAL_SHIFT.add_(10)
    second = f(x)
    GLOBAL_SHIFT.zero_()
    return [first, second]


@pattern
def rng_inside_compiled() -> list[torch.Tensor]:
    @torch.compile
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand_like(x)

    torch.manual_seed(123)
    a = f(torch.zeros(6))
    b = f(torch.zeros(6))
    return [a, b]


@pattern
def input_mutation_and_buffers() -> list[torch.Tensor]:
    m = torch.compile(Counter())
    x = torch.ones(3)
    y1 = m(x)
    y2 = m(x)
    return [y1, y2, x, m.calls]


@pattern
def activation_checkpointing() -> list[torch.Tensor]:
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(16, 40), nn.SiLU(), nn.Linear(40, 16))

    @torch.compile
    def f(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(block, x, use_reentrant=False).square().mean()

    loss = f(torch.linspace(-1, 1, 48).reshape(3, 16))
    loss.backward()
    return [loss.detach(), block[0].weight.grad, block[2].bias.grad]


@pattern
def sdpa_attention() -> list[torch.Tensor]:
    torch.manual_seed(0)
    qkv = nn.Linear(16, 48)

    @torch.compile
    def attend(x: torch.Tensor) -> torch.Tensor:
        q, k, v = qkv(x).view(2, 5, 3, 2, 8).unbind(2)
        return nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                          is_causal=True)

    y = attend(torch.linspace(0, 1, 160).reshape(2, 5, 16))
    y.sum().backward()
    return [y.detach(), qkv.weight.grad]


@pattern
def freeze_a_layer_midway() -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 20), nn.Tanh(), nn.Linear(20, 3))
    compiled = torch.compile(model)
    out = []
    for step in range(3):
        if step == 2:
            model[0].requires_grad_(False)  # a guard on requires_grad: the last step traces again
        model.zero_grad(set_to_none=True)
        loss = compiled(torch.full((2, 16), 0.1 * (step + 1))).sum()
        loss.backward()
        out += [loss.detach(), model[2].weight.grad.clone()]
    return out


def digest(tensors: list[torch.Tensor]) -> list[Any]:
    return [[str(t.dtype), list(t.shape), t.detach().double().flatten().tolist()] for t in tensors]


def main(names: list[str]) -> None:
    from torch._dynamo.utils import counters

    result: dict[str, dict[str, Any]] = {}
    for name in names or list(PATTERNS):
        before = counters["frames"]["ok"]
        try:
            out = digest(PATTERNS[name]())
            error = None
        except Exception as exc:  # reported, compared across runs
            out, error = None, f"{type(exc).__name__}: {str(exc)[:300]}"
        after = counters["frames"]["ok"]
        result[name] = {"out": out, "error": error, "frames": after - before}
    print("PATTERNS " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
