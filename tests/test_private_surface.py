"""The private torch/triton surface: one generated table, every touch owned by a compat module."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import private_surface  # noqa: E402


#: compat modules whose check() runs in a test named otherwise
_TESTED_ELSEWHERE = {"autotune_choice": "test_hooks_autotune.py", "ddp_first_call_fakes": "test_compat_ddp_autograd_cache.py",
                     **{p.stem: "test_warm_compat.py" for p in private_surface.COMPAT.glob("warm_*.py")}}


def test_compat_readme_table_is_up_to_date() -> None:
    assert private_surface.main(["--check"]) == 0, "run: python tools/private_surface.py"


def test_no_private_name_is_touched_outside_compat() -> None:
    stray = [f"{r.owner}: {r.name}" for r in private_surface.outside_compat(private_surface.scan())]
    assert stray == [], "move these behind pcompile/compat/ (one module per concern):\n" + "\n".join(stray)


def test_every_compat_module_records_what_it_was_checked_against_and_has_a_test() -> None:
    import torch

    here = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    for path in sorted(private_surface.COMPAT.glob("*.py")):
        if path.name == "__init__.py":
            continue
        checked = private_surface.checked_versions(ast.parse(path.read_text()))
        assert checked, f"{path.name} has no CHECKED"
        if "torch" in checked:
            assert any(v.strip().startswith(here) for v in checked["torch"].split(",")), \
                f"{path.name} was not checked against torch {here}: {checked['torch']}"
        tests = ROOT / "tests" / _TESTED_ELSEWHERE.get(path.stem, f"test_compat_{path.stem}.py")
        assert tests.exists(), f"{path.name} has no {tests.name}"
        assert f"{path.stem}" in tests.read_text() and "check()" in tests.read_text(), f"{tests.name} never runs {path.stem}.check()"


def test_scanner_finds_the_kinds_of_touch_it_claims(tmp_path: Path) -> None:
    pkg = tmp_path / "pcompile"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        '"""torch._in_a_docstring is not a touch."""\n'
        "import torch\n"
        "import torch._inductor.config as ic\n"
        "from torch._subclasses.fake_tensor import FakeTensor\n"
        "import triton\n"
        "x = ic.fx_graph_cache\n"
        "y = getattr(getattr(torch, 'autograd'), '_profiler_enabled')\n"
        "z = ('torch._tensor_str', '_str')\n"
        "w = triton.runtime.cache.FileCacheManager\n"
        "v = triton.jit\n"
        "u = torch.nn.Linear\n"
    )
    names = {r.name for r in private_surface.scan(pkg)}
    assert names == {"torch._inductor.config.fx_graph_cache", "torch._subclasses.fake_tensor.FakeTensor",
                     "torch.autograd._profiler_enabled", "torch._tensor_str._str",
                     "triton.runtime.cache.FileCacheManager"}
