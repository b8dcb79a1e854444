"""The benchmarks' main-thread stack sampler and its diff tool (issue 24's "where every second goes").

Two real processes spin in named functions for known times; the diff must put the difference on
the function that spun longer, including time spent waiting (a sleep), which a CPU profile misses.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import os, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "benchmarks"))
from _stack_sampler import StackSampler

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

def waits(seconds):
    time.sleep(seconds)

sampler = StackSampler(interval=0.01).start()
spin(0.3)
waits(float(sys.argv[3]))
sampler.write(sys.argv[2])
'''


def _profile(tmp_path: Path, name: str, wait_s: float) -> Path:
    script = tmp_path / "busy.py"
    script.write_text(SCRIPT)
    out = tmp_path / f"{name}.txt"
    subprocess.run([sys.executable, str(script), str(ROOT), str(out), str(wait_s)], check=True, timeout=60)
    return out


def test_the_diff_names_the_frame_that_waited_longer(tmp_path: Path) -> None:
    a, b = _profile(tmp_path, "a", 0.1), _profile(tmp_path, "b", 0.8)
    assert "busy.py:spin" in a.read_text() and "busy.py:waits" in a.read_text()

    out = subprocess.run([sys.executable, str(ROOT / "tools" / "stack_diff.py"), str(a), str(b), "--top", "3"],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    rows = [line.split() for line in out.splitlines()[1:]]
    waited = [r for r in rows if r[-1] == "busy.py:waits"]
    assert waited, out
    diff = float(waited[0][0])
    assert 0.4 < diff < 1.0, out  # 0.7 s more sleeping in B, seen in the main thread's stack

    spun = subprocess.run([sys.executable, str(ROOT / "tools" / "stack_diff.py"), str(a), str(b), "--under", "spin", "--self"],
                          check=True, capture_output=True, text=True, timeout=60).stdout
    assert "busy.py:waits" not in spun and "busy.py:spin" in spun, spun
