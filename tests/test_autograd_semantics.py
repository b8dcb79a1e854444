"""pcompile never changes what a script computes or whether it runs: an autograd-semantics matrix.

One script runs every row (retained graphs, double backward, tensor and module hooks, custom
autograd.Function, checkpointing in both modes, no_grad/inference_mode, torch.func transforms
over a compiled function), each on its own compiled region, and prints each row's values
(outputs, grads, what hooks saw) or its error's type and first line. It runs twice, as a plain
`PCOMPILE=1` job and as stock torch.compile, each in fresh cache dirs; every row must agree.
The row that retains a graph first is the one pcompile's eager backward lowering once broke
(AOTAutograd's donated-buffer check); the one that frees it first must raise stock's own error.
The same retained-graph script is also warmed unchanged (`pcompile warm`, which lowers ahead too).
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pcompile.inductor import _testing as t

pytestmark = pytest.mark.slow

MATRIX = r'''
import json, sys
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def inputs(x_grad=False):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, generator=g, requires_grad=x_grad)
    p = [torch.randn(16, 8, generator=g), torch.randn(16, generator=g),
         torch.randn(4, 16, generator=g), torch.randn(4, generator=g)]
    return x, [q.requires_grad_() for q in p]


def mlp(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


def grads(ts):
    return [q.grad for q in ts]


# Each row compiles its own function with its own constant: its own code object and its own graph, so
# its own region, first backward and AOTAutograd cache entry (stock shares an entry across equal graphs).
def retain_graph():
    x, p = inputs()
    f = torch.compile(lambda x, *p: mlp(x, *p) * 1.125)
    out = f(x, *p).sum()
    out.backward(retain_graph=True)
    out.backward()
    return [out, *grads(p)]


def retain_graph_module():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    f = torch.compile(m)
    x = torch.randn(4, 8)
    out = f(x).sum()
    out.backward(retain_graph=True)
    out.backward(retain_graph=True)
    out2 = f(x).sum()
    out2.backward()
    return [out, out2, *[q.grad for q in m.parameters()]]


def retain_after_a_freed_backward():
    x, p = inputs()
    f = torch.compile(lambda x, *p: mlp(x, *p) * 1.25)
    f(x, *p).sum().backward()
    out = f(x, *p).sum()
    out.backward(retain_graph=True)
    return [out, *grads(p)]


def autograd_grad_retained():
    x, p = inputs()
    f = torch.compile(lambda x, *p: mlp(x, *p) * 1.375)
    out = f(x, *p).sum()
    first = torch.autograd.grad(out, p, retain_graph=True)
    second = torch.autograd.grad(out, p)
    return [out, *first, *second]


def create_graph_first_order():
    x, p = inputs(x_grad=True)
    f = torch.compile(lambda x, *p: mlp(x, *p) * 1.5)
    out = f(x, *p).sum()
    gx, = torch.autograd.grad(out, x, create_graph=True)
    return [out, gx, torch.tensor(float(gx.requires_grad))]


def double_backward():
    x, p = inputs(x_grad=True)
    f = torch.compile(lambda x, *p: mlp(x, *p) * 1.625)
    out = f(x, *p).sum()
    gx, = torch.autograd.grad(out, x, create_graph=True)
    (gx ** 2).sum().backward()
    return [gx, x.grad, *grads(p)]


def tensor_hooks():
    x, p = inputs(x_grad=True)
    seen = []
    x.register_hook(lambda g: g * 2)
    p[0].register_hook(lambda g: seen.append(g.sum()) or g * 3)

    def body(x, *p):
        h = F.linear(x, p[0], p[1])
        h.register_hook(lambda g: g * 0.5)
        return F.linear(F.gelu(h), p[2], p[3])

    f = torch.compile(body)
    y = f(x, *p)
    y.register_hook(lambda g: g + 1)
    y.sum().backward()
    return [y, x.grad, *grads(p), *seen]


def module_hooks():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    seen = []
    m[2].register_full_backward_hook(lambda mod, gi, go: seen.extend([go[0].sum(), gi[0].sum()]))
    m[0].register_full_backward_pre_hook(lambda mod, go: (go[0] * 2,))
    m.register_forward_hook(lambda mod, inp, out: out * 1.5)
    f = torch.compile(m)
    x = torch.randn(4, 8, requires_grad=True)
    y = f(x)
    y.sum().backward()
    return [y, x.grad, *[q.grad for q in m.parameters()], *seen]


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * 3 * x ** 2 + 1


def autograd_function():
    x, p = inputs(x_grad=True)
    f = torch.compile(lambda x, *p: mlp(Cube.apply(x), *p).tanh())
    out = f(x, *p).sum()
    out.backward()
    return [out, x.grad, *grads(p)]


def checkpoint_nonreentrant():
    x, p = inputs(x_grad=True)
    f = torch.compile(lambda x, *p: checkpoint(mlp, x, *p, use_reentrant=False).sin())
    out = f(x, *p).sum()
    out.backward()
    return [out, x.grad, *grads(p)]


def checkpoint_reentrant():
    x, p = inputs(x_grad=True)
    f = torch.compile(lambda x, *p: checkpoint(mlp, x, *p, use_reentrant=True).cos())
    out = f(x, *p).sum()
    out.backward()
    return [out, x.grad, *grads(p)]


def no_grad():
    x, p = inputs()
    f = torch.compile(lambda x, *p: mlp(x, *p) * 2)
    with torch.no_grad():
        y = f(x, *p)
    y2 = f(x, *p)
    y2.sum().backward()
    return [y, torch.tensor(float(y.requires_grad)), y2, *grads(p)]


def inference_mode():
    x, p = inputs()
    f = torch.compile(lambda x, *p: mlp(x, *p) * 3)
    with torch.inference_mode():
        y = f(x, *p)
    return [y, torch.tensor(float(y.is_inference())), torch.tensor(float(y.requires_grad))]


def func_grad():
    x, p = inputs()
    f = torch.compile(lambda x, *p: (mlp(x, *p) * 1.75).pow(2).sum())
    gx = torch.func.grad(f)(x.detach(), *[q.detach() for q in p])
    return [gx]


def func_vmap():
    x, p = inputs()
    f = torch.compile(lambda x, *p: (mlp(x, *p) * 1.875).relu())
    xs = torch.stack([x.detach(), x.detach() * 2])
    y = torch.func.vmap(f, in_dims=(0, None, None, None, None))(xs, *p)
    y.sum().backward()
    return [y, *grads(p)]


def func_grad_of_vmap_retained():
    x, p = inputs()
    f = torch.compile(lambda x, *p: (mlp(x, *p) * 2.25).sigmoid())
    out = f(x, *p).mean()
    g1 = torch.autograd.grad(out, p[0], retain_graph=True)[0]
    jac = torch.func.vmap(lambda v: torch.autograd.grad(out, p[2], v.expand_as(out), retain_graph=True)[0])(
        torch.ones(2))
    return [out, g1, jac]


ROWS = [retain_graph, retain_graph_module, retain_after_a_freed_backward, autograd_grad_retained,
        create_graph_first_order, double_backward, tensor_hooks, module_hooks, autograd_function,
        checkpoint_nonreentrant, checkpoint_reentrant, no_grad, inference_mode, func_grad, func_vmap,
        func_grad_of_vmap_retained]

result = {}
for row in ROWS:
    try:
        values = row()
        result[row.__name__] = {"values": [v.detach().double().flatten().tolist() if v is not None else None
                                           for v in values]}
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        result[row.__name__] = {"error": f"{type(exc).__name__}: {first}"}
try:
    from pcompile.inductor import hooks
    active = bool(hooks.state.active)
except Exception:
    active = False
print("PCOMPILE_RESULT " + json.dumps({"rows": result, "pcompile_active": active}))
'''


def _start(tmp_path: Path, **env: str) -> Any:
    script = t.write_script(tmp_path / "app", "matrix.py", MATRIX)
    return t.start(script, "-", t.clean_env(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"), **env))


def _close(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for u, v in zip(a, b):
        if (u is None) != (v is None) or (u is not None and (len(u) != len(v) or not all(
                math.isclose(p, q, rel_tol=1e-5, abs_tol=1e-6) or (math.isnan(p) and math.isnan(q))
                for p, q in zip(u, v)))):
            return False
    return True


def _differ(stock: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """Rows where pcompile's outcome (values, or the error raised) is not stock's."""
    assert stock["rows"].keys() == ours["rows"].keys()
    differ = {}
    for name, want in stock["rows"].items():
        got = ours["rows"][name]
        same = got.get("error") == want.get("error") if "error" in want or "error" in got else \
            _close(got["values"], want["values"])
        if not same:
            differ[name] = {"stock": want.get("error", "values"), "pcompile": got.get("error", "values")}
    return differ


def test_every_row_matches_stock_on_a_restart_from_programs(tmp_path: Path) -> None:
    """Programs are on by default: the second start runs the matrix's compiled functions from
    their programs (no Dynamo), and every row must still behave as stock's."""
    stock = t.finish(_start(tmp_path / "stock"), timeout=900)[0]
    env = {"PCOMPILE": "1", "PCOMPILE_PROGRAMS": "1", "PCOMPILE_CACHE_DIR": str(tmp_path / "pcompile" / "pc")}
    t.finish(_start(tmp_path / "pcompile", **env), timeout=900)
    again = t.finish(_start(tmp_path / "pcompile", **env), timeout=900)[0]
    assert again["pcompile_active"]
    assert not _differ(stock, again), f"rows where a restart from programs differs from stock: {_differ(stock, again)}"


def test_every_row_matches_stock_under_pcompile(tmp_path: Path) -> None:
    procs = [_start(tmp_path / "stock"),
             _start(tmp_path / "pcompile", PCOMPILE="1", PCOMPILE_CACHE_DIR=str(tmp_path / "pcompile" / "pc"))]
    stock, ours = (t.finish(proc, timeout=900)[0] for proc in procs)
    assert ours["pcompile_active"] and not stock["pcompile_active"], (ours["pcompile_active"], stock["pcompile_active"])
    differ = _differ(stock, ours)
    assert not differ, f"rows where PCOMPILE=1 differs from stock: {differ}"
    # the retained-graph rows run (as stock), the freed-then-retained row raises stock's own error
    assert "values" in ours["rows"]["retain_graph"] and "values" in ours["rows"]["retain_graph_module"]
    assert "donated buffers" in stock["rows"]["retain_after_a_freed_backward"].get("error", "")


RETAINED = textwrap.dedent("""\
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).cuda()
    f = torch.compile(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(4, 8, device="cuda")
    for step in range(3):
        out = f(x).sum()
        out.backward(retain_graph=True)
        out.backward()
        opt.step()
        opt.zero_grad()
    """)


@pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")
def test_a_script_that_retains_its_graph_warms(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(RETAINED)
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", str(job / "train.py"), "--target", "h100",
           "--cache-dir", str(tmp_path / "cache"), "--json", "--steps", "3"]
    env = t.clean_env(PCOMPILE_PROGRESS="0", PCOMPILE_POOL="off")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=str(job))
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    report = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])["report"]
    assert report["status"] == "completed" and report["steps_done"] == 3 and report["backward_calls"] == 6, log[-3000:]
    assert report["pcompile_backend"] == "installed", report["pcompile_backend"]
