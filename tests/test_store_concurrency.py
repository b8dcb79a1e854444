"""Real processes hammering one shared directory: no torn entries, one compile per key."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from conftest import REPO, child_env

WORKER = str(REPO / "tests" / "store_worker.py")


def test_16_processes_single_flight_and_identical_bytes(tmp_path: Path) -> None:
    names = [f"k{i}" for i in range(6)]
    log = tmp_path / "compiled.log"
    start_at = time.time() + 3.0
    procs = []
    for p in range(16):
        env = child_env({
            # each process is its own "node": a private local tier, one shared tier for all
            "PCOMPILE_CACHE_DIR": str(tmp_path / f"node{p}"),
            "PCOMPILE_SHARED_DIR": str(tmp_path / "shared"),
            "PCOMPILE_LEASE_TIMEOUT": "30",
        })
        order = names[p % len(names):] + names[: p % len(names)]  # different orders, same keys
        procs.append(subprocess.Popen(
            [sys.executable, WORKER, "hammer", ",".join(order), str(log), "0.4", str(300_000), str(start_at)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))

    compiled = Counter(line.split()[0] for line in log.read_text().splitlines())
    assert compiled == Counter({n: 1 for n in names}), f"each key must compile exactly once: {compiled}"
    for name in names:
        assert len({r["digests"][name] for r in results}) == 1, f"readers saw different bytes for {name}"
    outcomes = Counter(o for r in results for o in r["outcomes"].values())
    assert outcomes["compiled"] == len(names)
    assert outcomes["waited"] + outcomes["hit"] == 16 * len(names) - len(names)
    # and nothing half-written anywhere
    verify = subprocess.run(
        [sys.executable, "-m", "pcompile.cli.main", "verify", "--cache-dir", str(tmp_path / "node0"), "--shared-dir", str(tmp_path / "shared")],
        env=child_env(), capture_output=True, text=True, timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert list((tmp_path / "shared" / "store" / "tmp").iterdir()) == []
