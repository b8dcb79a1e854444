"""compat/programs_aot_entries.py against the installed torch: fails loudly when a version moves
what it wraps (the key function, the bundling switch, make_entry's first two parameters)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pcompile.compat import programs_aot_entries as compat  # noqa: E402


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_install_and_uninstall_put_torch_back() -> None:
    from torch._functorch._aot_autograd import autograd_cache as ac

    before = (ac.autograd_cache_key, ac.should_bundle_autograd_cache, ac.AOTAutogradCache.__dict__["make_entry"])
    compat.install()
    try:
        assert ac.autograd_cache_key is not before[0] and ac.should_bundle_autograd_cache is not before[1]
        compat.install()  # idempotent: one layer only
        assert getattr(ac.autograd_cache_key, "_pcompile_programs", False)
    finally:
        compat.uninstall()
    after = (ac.autograd_cache_key, ac.should_bundle_autograd_cache, ac.AOTAutogradCache.__dict__["make_entry"])
    assert after == before


def test_bundling_is_off_only_while_an_entry_with_fx_keys_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """make_entry (here a probe in its place) sees "bundle" off for graphs that have FX entries."""
    import torch._dynamo.config as dconfig
    from torch._functorch._aot_autograd import autograd_cache as ac

    seen: list[bool] = []

    def probe(compiled_fw_func, compiled_bw_func, *args, **kwargs):
        seen.append(ac.should_bundle_autograd_cache())

    class Keyed:
        _fx_graph_cache_key = "fx-key"

    monkeypatch.setattr(ac.AOTAutogradCache, "make_entry", staticmethod(probe))
    compat.install()
    try:
        with dconfig.patch(caching_precompile=True):
            assert ac.should_bundle_autograd_cache()  # torch's answer outside make_entry
            ac.AOTAutogradCache.make_entry(Keyed(), Keyed())
            ac.AOTAutogradCache.make_entry(Keyed(), None)
            ac.AOTAutogradCache.make_entry(object(), None)  # no FX entry: torch's bundled entry
    finally:
        compat.uninstall()
    assert seen == [False, False, True]
