"""Real processes hammering one shared directory: no torn entries, one compile per key."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from conftest import REPO, child_env
from store_worker import payload

from pcompile.store.entry import Entry

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


def _waiter_against_holder(tmp_path: Path, publish: bool, monkeypatch) -> tuple[object, float, float]:
    """A holder process on this node's disk; this process waits on its lease with a first
    back-off of 30 s. Returns (what the wait gave, seconds from the holder's release to it, and
    the waiter's CPU seconds while it waited)."""
    import resource

    from pcompile.config import Settings
    from pcompile.store.compose import open_store

    env = {"PCOMPILE_CACHE_DIR": str(tmp_path / "node"), "PCOMPILE_EVENTS": "0"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PCOMPILE_SHARED_DIR", raising=False)
    monkeypatch.delenv("PCOMPILE_REMOTE", raising=False)
    holder = subprocess.Popen([sys.executable, WORKER, "hold_then_publish", "k", "2.0", "publish" if publish else "fail"],
                              env=child_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "HOLDING", holder.stderr.read()
        sys.path.insert(0, str(REPO / "tests"))
        from store_worker import key_of

        store = open_store(Settings.from_env())
        cpu0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        got = store.acquire_or_wait(key_of("k")[0], poll=30.0)
        woke, cpu = time.time(), sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu0
        released = json.loads(holder.stdout.readline())["released"]
        if got is not None and not isinstance(got, Entry):
            got.release()
        store.close()
    finally:
        holder.kill()
        holder.wait()
    return got, woke - released, cpu


def test_a_waiter_on_this_node_wakes_at_the_release_not_at_its_backed_off_look(tmp_path: Path, monkeypatch) -> None:
    """The waiter's next full look is 30 s away; the holder publishes and releases after 2 s.
    It must return the entry right after the release (a stat of the lease file between looks),
    and spend little CPU while it waits."""
    got, late, cpu = _waiter_against_holder(tmp_path, publish=True, monkeypatch=monkeypatch)
    assert isinstance(got, Entry) and got.blobs["code"] == payload("k", 1000)
    assert late < 5.0, f"woke {late:.1f} s after the release: it waited for its backed-off look"
    assert cpu < 1.0, f"{cpu:.2f} CPU-s spent waiting 2 s"


def test_a_holder_that_fails_hands_the_lease_to_the_waiter_at_once(tmp_path: Path, monkeypatch) -> None:
    got, late, _ = _waiter_against_holder(tmp_path, publish=False, monkeypatch=monkeypatch)
    assert got is not None and not isinstance(got, Entry), "the waiter must get the lease, to compile itself"
    assert late < 5.0, f"took the lease {late:.1f} s after the release"
