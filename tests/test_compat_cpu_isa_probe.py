"""compat/cpu_isa_probe.py: Inductor's ISA probe still builds the library `probe_library` names and
skips its build and dlopen probe when that library and its `.load_ok` marker are in place."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pcompile.compat import cpu_isa_probe as compat

pytestmark = pytest.mark.skipif(__import__("pcompile.compat", fromlist=["by_design"]).by_design("cpu_isa_probe"),
                                reason="this torch is older than the module's SINCE_TORCH: it stays stock here by design")


def test_check_passes_on_this_torch() -> None:
    compat.check()


def _avx2() -> object:
    import torch

    if not torch.cpu._is_avx2_supported():
        pytest.skip("needs an x86 CPU with AVX2")
    return next(isa for isa in compat.probed_isas() if str(isa) == "avx2")


def test_probe_library_is_what_check_build_builds_and_reuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isa = _avx2()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    library = compat.probe_library(isa, compat.probe_code())
    assert library.startswith(str(tmp_path)) and not os.path.exists(library)
    assert compat.original()(isa, compat.probe_code()) is True
    marker = library + compat.LOAD_OK_SUFFIX
    assert os.path.isfile(library) and os.path.isfile(marker), sorted(map(str, tmp_path.rglob("*")))
    before = os.stat(library).st_mtime_ns
    time.sleep(0.01)
    assert compat.original()(isa, compat.probe_code()) is True
    assert os.stat(library).st_mtime_ns == before, "check_build rebuilt a library that was in place"


def test_install_wraps_and_uninstall_restores() -> None:
    import torch._inductor.cpu_vec_isa as isa

    original = compat.original()
    was_installed = isa.VecISA.check_build is not original
    compat.uninstall()
    seen: list[str] = []
    compat.install(lambda orig: lambda self, code: seen.append(str(self)) or True)
    try:
        assert isa.VecAVX2().check_build("int x;") is True and seen == ["avx2"]
        assert compat.original() is original
    finally:
        compat.uninstall()
        if was_installed:
            from pcompile.inductor import isa_probe_cache

            isa_probe_cache.install()
    assert isa.VecISA.check_build is original or was_installed


def test_this_torch_keeps_the_load_marker_so_the_probe_layer_is_on():
    """2.11-2.13 keep no `.load_ok` marker: there the layer is off without a warning (every GPU
    job on 2.11 printed "these cache layers stay stock" for a CPU-only saving). CI's torch has it."""
    from pcompile.compat import cpu_isa_probe
    from pcompile.inductor import features

    assert cpu_isa_probe.supported()
    assert features._isa_probe_wanted()
