"""The fault matrix's rows this machine can stage (tools/faults.py), each a real compile in a fresh
process: the job completes, equals stock Inductor bit for bit, pcompile says one line naming the
problem, and `pcompile verify` finds nothing bad after. Rows needing what the machine lacks
(root for mounts, quotas, redis-server) skip with the reason. Rows no machine stages yet
(faults.NOT_STAGED: stale NFS handles, a slow disk) are not CI rows at all.
The other rows (read-only at start, torn shared file, Redis hung, lease skew, shared tier full, S3
503, worker killed, socket deleted, another user's pool, another torch) run in tools/faults.py:
each costs one or two more compiles, and CI's budget is the whole suite's.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import faults  # noqa: E402

CI_ROWS = ["full-at-start", "full-in-link", "full-mid-job", "read-only-mid-job", "unwritable", "vanished-mid-job",
           "quota", "shared-read-only", "redis-restarted", "daemon-killed"]


def test_ci_rows_are_real_rows_that_can_be_staged() -> None:
    """A row whose fault function always raises Skip would count as covered while never running."""
    names = {f.name for f in faults.FAULTS}
    assert set(CI_ROWS) <= names, set(CI_ROWS) - names
    assert not set(CI_ROWS) & set(faults.NOT_STAGED), set(CI_ROWS) & set(faults.NOT_STAGED)
    assert set(faults.NOT_STAGED) <= names


@pytest.fixture(scope="module")
def stock(tmp_path_factory: pytest.TempPathFactory) -> str:
    return faults.stock_digest(tmp_path_factory.mktemp("stock"))  # pytest removes its tmp dirs


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", CI_ROWS)
def test_fault_row(name: str, stock: str) -> None:
    fault = next(f for f in faults.FAULTS if f.name == name)
    row = faults.run_fault(fault, stock)
    if row.ok is None:
        pytest.skip(row.note)
    assert row.result == "completed", f"{name}: job failed: {row.note}"
    assert row.equal, f"{name}: outputs differ from stock Inductor's"
    assert row.ok, f"{name}: {row.note}; printed {row.printed!r}; verify {row.verify!r}"
