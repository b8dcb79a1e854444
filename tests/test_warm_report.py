"""Issue 31 item 7: the warm summary's messages. torch's multi-line reasons on one line each; a
failed warm says what it looked up, as a good one does; a count of saves and the list shown agree."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from pcompile.store import hits
from pcompile.warm import report
from pcompile.warm.runner import WarmResult


def _result(rep: dict, exit_code: int = 0) -> WarmResult:
    looked = hits.from_events([{"kind": "cache_lookup", "layer": "fx_graph", "outcome": "miss"},
                               {"kind": "cache_lookup", "layer": "fx_graph", "outcome": "hit"}])
    return WarmResult(exit_code, rep, {}, 1.0, SimpleNamespace(name="H100", arch="sm_90"), [], [], Path("c"), lookups=looked)


def test_a_failed_warm_lists_its_lookups():
    lines = report.report_lines(_result({"status": "error", "error": "the script failed under warm:\n  boom\n  here"}, exit_code=3))
    assert lines[0].endswith("the script failed under warm: boom here"), lines  # folded to one line
    assert any(ln.startswith("cache look-ups: ") for ln in lines), lines


def test_multi_line_reasons_are_folded_and_save_counts_match_their_list():
    saves = [f"train.py:{i} torch.save(last.pt)" for i in range(5)]
    rep = {"status": "completed", "fx_cache_bypassed": {"Can't cache\n  this graph:\n    a HOP": 2},
           "writes": {"skipped_saves": saves, "n_skipped_saves": 5}}
    lines = report.report_lines(_result(rep))
    assert any("(Can't cache this graph: a HOP x2)" in ln for ln in lines), lines
    assert all("\n" not in ln for ln in lines)
    skipped = [ln for ln in lines if ln.startswith("skipped 5 saves")]
    assert skipped and skipped[0].endswith("train.py:2 torch.save(last.pt); and 2 more"), skipped
