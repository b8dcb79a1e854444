"""compat/program_growth.py against the installed torch: fails loudly when a version moves the
fields it reads (a code entry's guarded entries and backend ids, a guarded entry's bytecode names)."""
from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from pcompile.compat import program_growth as compat  # noqa: E402


def test_check_passes_on_this_torch() -> None:
    compat.check()


def _guarded(name: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(dynamo_code=types.SimpleNamespace(co_names=("torch", name)))


def test_the_newest_entries_are_kept_with_their_graphs_only() -> None:
    code = types.SimpleNamespace(guarded_codes=[_guarded(f"__compiled_fn_{i}") for i in range(4)],
                                 backend_ids=[f"__compiled_fn_{i}" for i in range(4)])
    with torch._dynamo.config.patch(recompile_limit=2):
        compat.newest(code)
    assert [g.dynamo_code.co_names[1] for g in code.guarded_codes] == ["__compiled_fn_2", "__compiled_fn_3"]
    assert code.backend_ids == ["__compiled_fn_2", "__compiled_fn_3"]


def test_graphs_no_entry_names_are_all_kept() -> None:
    """Where the bytecode does not name every graph, which graph an entry uses is unknown: keep all."""
    code = types.SimpleNamespace(guarded_codes=[_guarded("__compiled_fn_0"), _guarded("__compiled_fn_1")],
                                 backend_ids=["__compiled_fn_0", "__compiled_fn_1", "__compiled_fn_x"])
    with torch._dynamo.config.patch(recompile_limit=1):
        compat.newest(code)
    assert len(code.guarded_codes) == 1 and len(code.backend_ids) == 3
