"""compat/pool_hook.py: Inductor's process-pool plug point and, on 2.15+, its thread mode that
bypasses it (end to end through a real pool in tests/test_pool_triton.py)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pcompile.compat import pool_hook  # noqa: E402


def test_check_passes_on_this_torch() -> None:
    pool_hook.check()


def test_thread_mode_is_recognised_where_torch_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.async_compile as ac
    import torch._inductor.config as iconfig

    has_threads = hasattr(ac.AsyncCompile, "should_use_thread_workers")
    assert has_threads == (tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 15))
    if not has_threads:
        assert pool_hook.thread_workers() is False
        return
    monkeypatch.setattr(iconfig, "compile_worker_mode", "thread")
    assert pool_hook.thread_workers() is True
    monkeypatch.setattr(iconfig, "compile_worker_mode", "process")
    assert pool_hook.thread_workers() is False
