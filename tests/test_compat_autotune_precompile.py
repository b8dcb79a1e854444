"""compat/autotune_precompile.py against the installed torch: the wrapped precompile step marks
the jobs its thread submits, and only those (issue 34)."""
from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from pcompile.compat import autotune_precompile  # noqa: E402


def test_check_passes_on_this_torch() -> None:
    autotune_precompile.check()


def test_install_wraps_make_precompile_fn_once_and_keeps_its_result() -> None:
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    assert autotune_precompile.install() and autotune_precompile.install()
    assert autotune_precompile.installed()
    fn = AlgorithmSelectorCache.make_precompile_fn
    assert getattr(fn.__wrapped__, "_pcompile_marks_candidates", False) is False  # wrapped once, not twice
    # stock's own early exit (no timeout) still answers through the wrapper, and the mark ends with it
    no_op = AlgorithmSelectorCache().make_precompile_fn([], "mm", "key", precompilation_timeout_seconds=0)
    assert no_op() == {} and not autotune_precompile.is_candidate()


def test_the_mark_is_per_thread_and_nests() -> None:
    seen: list[bool] = []
    with autotune_precompile.submitting_candidates():
        with autotune_precompile.submitting_candidates():
            assert autotune_precompile.is_candidate()
        assert autotune_precompile.is_candidate()
        other = threading.Thread(target=lambda: seen.append(autotune_precompile.is_candidate()))
        other.start()
        other.join()
    assert seen == [False] and not autotune_precompile.is_candidate()
