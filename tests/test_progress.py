"""Progress: plain periodic lines when not on a TTY (CI logs, Slurm), a bar on a TTY, nothing when quiet."""
from __future__ import annotations

import io

from conftest import run_py

LOOP = """
import time
from pcompile.progress import progress
with progress({total}, "warming graphs", interval={interval}{extra}) as p:
    for i in range(20):
        time.sleep(0.01)
        p.advance()
        if i == 10:
            p.set_description("warming kernels")
"""


def test_non_tty_prints_plain_lines() -> None:
    res = run_py(LOOP.format(total=20, interval=60, extra=""))  # stderr is a pipe: not a TTY
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("warming")]
    assert 9 <= len(lines) <= 11  # one line per 10%, then the closing line
    assert lines[0].startswith("warming graphs: 2/20 (10%)")
    assert lines[-1].startswith("warming kernels: 20/20 (100%)") and lines[-1].endswith("done")
    assert "\r" not in res.stderr and "\x1b[" not in res.stderr


def test_unknown_total_prints_by_time() -> None:
    res = run_py(LOOP.format(total=None, interval=0.05, extra=""))
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("warming")]
    assert len(lines) >= 3 and lines[-1].startswith("warming kernels: 20 done")


def test_quiet_prints_nothing() -> None:
    assert "warming" not in run_py(LOOP.format(total=20, interval=0, extra=", quiet=True")).stderr
    assert "warming" not in run_py(LOOP.format(total=20, interval=0, extra=""), env={"PCOMPILE_PROGRESS": "0"}).stderr


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_tty_gets_a_bar() -> None:
    from pcompile.progress import progress

    out = _Tty()
    with progress(4, "verifying", stream=out) as p:
        for _ in range(4):
            p.advance()
    text = out.getvalue()
    assert "verifying" in text and "4/4" in text and "━" in text


def test_failed_work_does_not_say_done() -> None:
    res = run_py("""
from pcompile.progress import progress
try:
    with progress(4, "warming", interval=60) as p:
        p.advance()
        raise RuntimeError("the script failed")
except RuntimeError:
    pass
with progress(4, "checking", interval=60) as p:
    p.advance()
    p.fail("stopped")
""")
    finals = [ln for ln in res.stderr.splitlines() if ln.startswith(("warming", "checking")) and " - " in ln]
    assert [(ln.split(" (")[0], ln.rsplit(" - ", 1)[1]) for ln in finals] == [("warming: 1/4", "failed"), ("checking: 1/4", "stopped")], res.stderr
