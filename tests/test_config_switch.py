"""config.switch: the on/off variables whose default depends on the machine (backward ahead, eager pool)."""
from __future__ import annotations

import pytest

from pcompile.config import switch


@pytest.mark.parametrize("raw, expected", [("1", True), ("on", True), (" Yes ", True), ("0", False), ("off", False),
                                           ("FALSE", False), ("", None), ("maybe", None)])
def test_switch_reads_on_off_and_leaves_the_rest_to_the_default(monkeypatch: pytest.MonkeyPatch, raw: str,
                                                                 expected: bool | None) -> None:
    monkeypatch.setenv("PCOMPILE_TEST_SWITCH", raw)
    assert switch("PCOMPILE_TEST_SWITCH") is expected


def test_unset_switch_is_undecided(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PCOMPILE_TEST_SWITCH", raising=False)
    assert switch("PCOMPILE_TEST_SWITCH") is None
