"""compat/remote_cache.py: Inductor's RemoteCache plug point still exists and still routes to us.

Fails loudly if torch moved `backend_override_cls`, renamed a Remote*Cache class, changed the
backend primitives, or dropped the flags pcompile turns on.
"""
from __future__ import annotations

import pytest

from pcompile.compat import remote_cache as compat


def test_check_passes_on_this_torch() -> None:
    compat.check()


@pytest.mark.parametrize("layer", sorted(compat.CLASS_FOR_LAYER))
def test_override_reaches_a_new_remote_cache_and_the_key_format_is_known(layer: str) -> None:
    calls: list[tuple[str, str, bytes | None]] = []
    base = compat.backend_base()

    class Recorder(base):  # type: ignore[misc, valid-type]
        def _get(self, key: str) -> bytes | None:
            calls.append(("get", key, None))
            return None

        def _put(self, key: str, data: bytes) -> None:
            calls.append(("put", key, data))

    import torch._inductor.remote_cache as rc

    previous = compat.current_backend(layer)
    compat.set_backend(layer, Recorder)
    try:
        cache = getattr(rc, compat.CLASS_FOR_LAYER[layer])("my-cache-id")
        assert isinstance(cache.backend, Recorder)
        assert cache.get("k1") is None
        cache.put("k1", {"data": "abc", "time_taken_ms": 3})
    finally:
        compat.set_backend(layer, previous)
    assert calls[0] == ("get", "pt2:my-cache-id::k1:c1", None)
    assert calls[1][:2] == ("put", "pt2:my-cache-id::k1:c1") and isinstance(calls[1][2], bytes)
    assert b'"time_taken_ms": 3' in calls[1][2]


def test_enable_flags_turns_remote_on_and_local_off_but_respects_explicit_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    with iconfig.patch(fx_graph_remote_cache=None, autotune_remote_cache=False, fx_graph_cache=True), \
            fconfig.patch(enable_remote_autograd_cache=None, enable_autograd_cache=True):
        monkeypatch.setenv("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")  # the user switched AOTAutograd caching off
        monkeypatch.setattr(compat, "_replace_local", False)  # put back after the test
        changed = compat.enable_flags(replace_local=True)
        assert changed == {"inductor.fx_graph_remote_cache": True}
        assert iconfig.fx_graph_remote_cache is True and iconfig.fx_graph_cache is True  # off only while compiling
        assert iconfig.autotune_remote_cache is False  # explicit False stays
        assert fconfig.enable_remote_autograd_cache is None and fconfig.enable_autograd_cache is True
        with compat.local_twins_off() as turned:
            assert turned == ["inductor.fx_graph_cache"] and iconfig.fx_graph_cache is False
        assert iconfig.fx_graph_cache is True
    state = compat.flags_state()
    assert set(state) >= {"inductor.fx_graph_remote_cache", "functorch.enable_remote_autograd_cache"}


def test_remote_flags_do_not_change_fx_graph_keys() -> None:
    import torch._inductor.config as iconfig

    ignored = getattr(iconfig, "_cache_config_ignore_prefix")
    for flag in ("fx_graph_cache", "fx_graph_remote_cache", "autotune_remote_cache"):
        assert flag in ignored, f"{flag} now changes FX graph keys: pcompile and stock keys would diverge"


def test_local_autograd_cache_is_off_while_compiling_whatever_order_it_was_set_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """enable_autograd_cache is hashed into AOTAutograd keys: a script setting it True before the
    hooks install (a GPU job) and after (a warm) must compile with the same value."""
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    seen = []
    monkeypatch.setattr(compat, "_replace_local", False)
    for script_first in (True, False):
        with iconfig.patch(fx_graph_remote_cache=None, fx_graph_cache=True), \
                fconfig.patch(enable_remote_autograd_cache=None, enable_autograd_cache=True):
            if script_first:
                fconfig.enable_autograd_cache = True
            compat.enable_flags(replace_local=True)
            if not script_first:
                fconfig.enable_autograd_cache = True
            with compat.local_twins_off():
                seen.append(fconfig.enable_autograd_cache)
            assert fconfig.enable_autograd_cache is True  # the script's value outside compiles
    assert seen == [False, False]
    monkeypatch.setattr(compat, "_replace_local", False)  # PCOMPILE_INDUCTOR_LOCAL_CACHES=1
    with fconfig.patch(enable_remote_autograd_cache=True, enable_autograd_cache=True), compat.local_twins_off() as turned:
        assert turned == [] and fconfig.enable_autograd_cache is True
