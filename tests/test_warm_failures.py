"""A warm never hangs or fails silently (issue 25 part 4, issue 23 item 4), end to end.

Each test writes a small script, warms it unchanged with the real `pcompile warm` CLI, and checks
what a user sees: the script's own exit status passed through, a crash named by its signal and
script line, a stall stopped with every thread's Python stack, the error printed once, and no
"done" on the progress line of a failed warm.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")

PRELUDE = """\
import torch
x = torch.ones(4, device="cuda")  # the virtual device is up
"""


def warm(tmp_path: Path, body: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    job = tmp_path / "job"
    job.mkdir(exist_ok=True)
    script = job / "train.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", str(script), "--target", "h100",
           "--cache-dir", str(tmp_path / "cache")]
    full = dict(os.environ, PCOMPILE_PROGRESS="plain", PCOMPILE_DISABLE="1", **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full, cwd=str(job))


def test_the_scripts_exit_status_is_passed_through_and_the_error_said_once(tmp_path):
    res = warm(tmp_path, """\
        import sys
        print("about to exit")
        sys.exit(3)
        """)
    out = res.stdout + res.stderr
    assert res.returncode == 3, out[-3000:]
    assert out.count("exited with status 3") == 1, out[-3000:]
    assert res.stdout.splitlines()[-1].startswith("warm failed after 0 steps") or "warm failed after 0 steps" in res.stdout
    warming = [ln for ln in res.stderr.splitlines() if ln.startswith("warming")]
    assert warming and warming[-1].endswith("- failed") and not any(ln.endswith("- done") for ln in warming), res.stderr
    # only what happened: no device statistics, backend or coverage lines after a failure
    assert "virtual device:" not in res.stdout and "pcompile backend" not in res.stdout and "warning:" not in res.stdout


def test_an_uncaught_exception_exits_1_like_python(tmp_path):
    res = warm(tmp_path, """\
        raise ValueError("boom in the script")
        """)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-3000:]
    assert "Traceback" in res.stderr and res.stdout.count("ValueError: boom in the script") == 1
    assert "pcompile: error" not in out


def test_a_crash_is_named_with_its_signal_and_script_line(tmp_path):
    res = warm(tmp_path, """\
        import os, signal
        def crash():
            os.kill(os.getpid(), signal.SIGSEGV)
        crash()
        """)
    out = res.stdout + res.stderr
    assert res.returncode == 128 + 11, out[-3000:]
    assert "SIGSEGV" in res.stderr and "train.py:5" in res.stderr, res.stderr[-3000:]  # line of os.kill
    assert "crashed" in res.stderr and "PCOMPILE_VDEV_TRACE" in res.stderr


def test_a_stalled_script_is_stopped_with_every_threads_stack(tmp_path):
    res = warm(tmp_path, """\
        import threading, time
        def helper():
            while True:
                time.sleep(0.1)
        threading.Thread(target=helper, daemon=True).start()
        while True:  # waits on something that never comes
            time.sleep(0.2)
        """, env={"PCOMPILE_WARM_STALL_SECONDS": "4"}, timeout=240)
    out = res.stdout + res.stderr
    assert res.returncode == 124, out[-3000:]
    assert "no progress for" in res.stderr and "PCOMPILE_WARM_STALL_SECONDS" in res.stderr, res.stderr[-3000:]
    assert "train.py:9" in res.stderr  # the main thread's wait: the script's line, named in the message
    assert "train.py\", line 6" in res.stderr  # the helper thread's stack is printed too
    assert res.stderr.count("Thread 0x") + res.stderr.count("Current thread 0x") >= 2


def test_a_bad_stall_setting_is_one_line_and_the_default(tmp_path):
    res = warm(tmp_path, "print('fine')\n", env={"PCOMPILE_WARM_STALL_SECONDS": "soon"})
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert sum("PCOMPILE_WARM_STALL_SECONDS='soon' is not a duration" in ln and "using the default 300 s" in ln
               for ln in res.stderr.splitlines()) == 1, res.stderr[-2000:]
