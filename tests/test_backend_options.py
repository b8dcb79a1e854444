"""backend="pcompile" treats mode= and options= exactly as backend="inductor" does.

torch.compile hands a custom backend `mode`/`options` as keyword arguments; pcompile builds the
same inductor wrapper torch builds for backend="inductor", so the config patches that reach
Inductor's `compile_fx` must be identical, and a bad option must fail with stock's error.
"""
from __future__ import annotations

from pathlib import Path

from pcompile.inductor import _testing as t

SPY_SCRIPT = r'''
import json
import torch
import torch._inductor.compile_fx as cfx

seen = []
real = cfx.compile_fx


regions = []


def spy(gm, inputs, *args, **kwargs):
    seen.append({k: repr(v) for k, v in sorted((kwargs.get("config_patches") or {}).items())})
    regions.append(kwargs.get("compile_region_name"))
    return real(gm, inputs, *args, **kwargs)


cfx.compile_fx = spy
x = torch.randn(8)
cases = [dict(mode="max-autotune-no-cudagraphs"), dict(options={"epilogue_fusion": False, "max_autotune_gemm": False}), {}]
patches = {}
for i, kw in enumerate(cases):
    for backend in ("inductor", "pcompile"):
        torch._dynamo.reset()
        seen.clear()
        y = torch.compile(lambda v, i=i: (v + i).sin(), backend=backend, **kw)(x)
        assert torch.allclose(y, (x + i).sin())
        patches.setdefault(backend, []).append(seen[0])  # the outer call; compile_fx recurses without patches
errors = {}
for backend in ("inductor", "pcompile"):
    torch._dynamo.reset()
    try:
        torch.compile(lambda v: v + 1, backend=backend, options={"no_such_option": 1})(x)
    except Exception as exc:
        errors[backend] = str(exc).split("known options")[0]
names = {}
for backend in ("inductor", "pcompile"):  # torch.compile(name=): 2.15 forwards it to custom backends
    torch._dynamo.reset()
    regions.clear()
    torch.compile(lambda v: v * 3, backend=backend, name="region_a")(x)
    names[backend] = regions[0]
from pcompile.inductor import hooks
print("PCOMPILE_RESULT " + json.dumps({"patches": patches, "errors": errors, "names": names,
                                       "active": hooks.state.active, "torch": torch.__version__}))
'''


def test_mode_and_options_reach_inductor_unchanged(tmp_path: Path) -> None:
    script = t.write_script(tmp_path / "app", "spy.py", SPY_SCRIPT)
    env = t.clean_env(PCOMPILE_CACHE_DIR=str(tmp_path / "pc"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"))
    result, _ = t.run(script, "-", env)
    assert result["active"]
    assert result["patches"]["pcompile"] == result["patches"]["inductor"]
    assert result["patches"]["pcompile"][0]["max_autotune"] == "True"
    assert result["patches"]["pcompile"][1]["epilogue_fusion"] == "False"
    # Same error text. Stock raises it from torch.compile() itself; a custom backend first sees its
    # options at the first call, where Dynamo wraps it as "backend='pcompile' raised: RuntimeError: ...".
    assert result["errors"]["inductor"].startswith("Unexpected optimization option no_such_option")
    assert result["errors"]["inductor"] in result["errors"]["pcompile"]
    # name= never breaks backend="pcompile" (2.15 passes it to custom backends); where torch
    # passes it on, it reaches Inductor as it does for backend="inductor".
    assert result["names"]["inductor"] == "region_a"
    forwarded = tuple(int(p) for p in result["torch"].split(".")[:2]) >= (2, 15)
    assert result["names"]["pcompile"] == ("region_a" if forwarded else None)
