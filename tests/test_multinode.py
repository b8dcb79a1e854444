"""M nodes x N ranks as real processes: each node has its own local tier, all share one shared tier.

What a cluster start needs from the store (issue 14): every key compiled once in total (one
single-flight lease on the shared tier), each node reads each entry from the shared tier once
(its other ranks wait for that fetch's backfill into the node's local tier), and a holder that
died mid-compile delays nobody past its lease timeout.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RANK = textwrap.dedent("""\
    import hashlib, json, os, sys, time
    from pcompile.config import Settings
    from pcompile.keys import make_key
    from pcompile.store.entry import Entry
    from pcompile.store.compose import open_store
    from pcompile.store.tiered import Store

    names, log, compile_s, start_at = sys.argv[1].split(","), sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    store = open_store(Settings.from_env())
    shared = store.tiers[1]
    shared_reads = {}
    original_get = shared.get

    def counting_get(key):                      # instrumentation only: the tier itself is real
        entry = original_get(key)
        if entry is not None:
            shared_reads[str(key)] = shared_reads.get(str(key), 0) + 1
        return entry

    shared.get = counting_get
    while time.time() < start_at:
        time.sleep(0.005)
    out = {"digests": {}, "outcomes": {}, "seconds": {}, "keys": {}}
    for name in names:
        key, inputs = make_key("kernel", name, {"torch": "sim", "target_arch": "sm_90"})

        def compute(name=name, key=key, inputs=inputs):
            with open(log, "a") as fh:
                fh.write(f"{name} {os.environ['SIM_NODE']} {os.getpid()}\\n")
            time.sleep(compile_s)
            return Entry(key, {"code": hashlib.sha256(name.encode()).digest() * 64}, inputs)

        t0 = time.monotonic()
        entry, outcome = store.get_or_compute(key, compute)
        out["seconds"][name] = time.monotonic() - t0
        out["digests"][name] = hashlib.sha256(entry.blobs["code"]).hexdigest()
        out["outcomes"][name] = outcome
        out["keys"][name] = str(key)
    out["shared_reads"] = shared_reads
    store.close()
    print(json.dumps(out))
    """)

HOLDER = textwrap.dedent("""\
    import os, signal, sys
    from pcompile.config import Settings
    from pcompile.keys import make_key
    from pcompile.store.compose import open_store
    from pcompile.store.tiered import Store

    store = open_store(Settings.from_env())
    key, _ = make_key("kernel", sys.argv[1], {"torch": "sim", "target_arch": "sm_90"})
    lease = store.acquire_or_wait(key)
    assert lease is not None and not hasattr(lease, "blobs"), lease
    print("holding", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)        # dies mid-compile, lease file left behind
    """)


def _env(node_dir: Path, shared: Path, node: int, lease_timeout: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PCOMPILE")}
    env.update(PCOMPILE_CACHE_DIR=str(node_dir), PCOMPILE_SHARED_DIR=str(shared), PCOMPILE_LEASE_TIMEOUT=str(lease_timeout),
               SIM_NODE=str(node), PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return env


def test_m_nodes_by_n_ranks_compile_each_key_once_and_fetch_it_once_per_node(tmp_path):
    nodes, ranks, compile_s, lease_timeout = 2, 3, 0.4, 3
    names = [f"graph{i}" for i in range(6)]
    shared, log = tmp_path / "shared", tmp_path / "compiles.log"
    rank_py, holder_py = tmp_path / "rank.py", tmp_path / "holder.py"
    rank_py.write_text(RANK)
    holder_py.write_text(HOLDER)
    # a holder on node 0 takes graph0's cluster-wide lease and is SIGKILLed before publishing
    dead = subprocess.run([sys.executable, str(holder_py), "graph0"], env=_env(tmp_path / "node0", shared, 0, lease_timeout),
                          capture_output=True, text=True, timeout=120)
    assert dead.returncode == -signal.SIGKILL and "holding" in dead.stdout, dead.stderr[-2000:]
    start_at = time.time() + 3.0
    procs = []
    for node in range(nodes):
        for rank in range(ranks):
            order = names[rank:] + names[:rank]  # ranks reach the graphs in different orders
            procs.append(subprocess.Popen(
                [sys.executable, str(rank_py), ",".join(order), str(log), str(compile_s), str(start_at)],
                env=_env(tmp_path / f"node{node}", shared, node, lease_timeout), stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))

    compiled = collections.Counter(line.split()[0] for line in log.read_text().splitlines())
    assert compiled == {name: 1 for name in names}, compiled                     # once in the whole cluster
    for name in names:
        assert len({r["digests"][name] for r in results}) == 1                   # every rank got the same entry
    reads = collections.Counter()
    for r in results:
        reads.update(r["shared_reads"])
    assert all(reads[r["keys"][n]] <= nodes for n in names for r in results[:1]), reads  # one fetch per node at most
    # the dead holder's lease held graph0 up for at most its timeout, never until the wait limit
    longest = max(r["seconds"]["graph0"] for r in results)
    assert longest < lease_timeout + 2 * compile_s * len(names) + 5, longest
    outcomes = collections.Counter(o for r in results for o in r["outcomes"].values())
    assert outcomes["compiled"] == len(names) and outcomes["compiled"] + outcomes["waited"] + outcomes["hit"] == nodes * ranks * len(names)

    # a node that joins later (a restarted or scaled-out job): its ranks start at the same instant
    # on a cold local tier, all wanting every entry at once; one of them fetches each from the
    # shared tier, the others take it from the node's local tier
    start_at = time.time() + 3.0
    late = [subprocess.Popen([sys.executable, str(rank_py), ",".join(names), str(log), str(compile_s), str(start_at)],
                             env=_env(tmp_path / "node-late", shared, nodes, lease_timeout), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(4)]
    late_results = []
    for p in late:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        late_results.append(json.loads(out.strip().splitlines()[-1]))
    assert collections.Counter(line.split()[0] for line in log.read_text().splitlines()) == compiled  # nothing recompiled
    late_reads = collections.Counter()
    for r in late_results:
        late_reads.update(r["shared_reads"])
    assert sorted(late_reads.values()) == [1] * len(names), late_reads
