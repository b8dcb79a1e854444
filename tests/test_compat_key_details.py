"""compat/key_details.py: Inductor still returns (key, description lines) from its FX graph and
AOTAutograd key functions, and the description names each input's shape (what `explain` reads)."""
from __future__ import annotations

import torch

from pcompile.compat import key_details


def test_check_passes_on_this_torch() -> None:
    key_details.check()


def test_recorded_description_names_each_input_shape(tmp_path, monkeypatch) -> None:
    from pcompile.keys import key_details as words

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "ind"))
    seen: dict[str, list[str]] = {}
    key_details.install(lambda key, lines: seen.__setitem__(key, lines))
    try:
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(torch.nn.Linear(16, 8))(torch.randn(4, 16))
    finally:
        key_details.uninstall()
        torch._dynamo.reset()
    fx = [lines for key, lines in seen.items() if lines and any("example_inputs[" in ln for ln in lines)]
    assert fx, list(seen)
    fields = words.fields(fx[0])
    shapes = {words._tensor(v)["shape"] for name, (_h, v) in fields.items() if name.startswith("example_inputs[")}
    assert "[4, 16]" in shapes, shapes
