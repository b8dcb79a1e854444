"""The event log: one coherent file per job across processes, bounded, pruned, and never in the caller's way."""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest

from conftest import spawn_py, run_py

WRITER = """
import os, sys, time
from pcompile.events import span, emit
n = int(sys.argv[1]) if len(sys.argv) > 1 else {n}
for i in range(n):
    with span("graph_compile", key=f"g{{i}}", seq=i) as g:
        with span("kernel_compile", key=f"k{{i}}", worker=i % 3, seq=i) as k:
            k.outcome = "compiled"
        emit("cache_lookup", time.time(), 0.0001, layer="fxgraph", tier="local", outcome="miss", seq=i)
        g.outcome = "miss"
print("ok")
"""


def _lines(path: Path) -> list[dict]:
    """The events of a log, less each process's opening `process` record (checked here: one a
    process, first among its lines, naming what it runs)."""
    raw = [json.loads(line) for line in path.read_bytes().splitlines()]  # every line must be valid JSON
    seen: set[int] = set()
    for rec in raw:
        if rec["kind"] == "process":
            assert rec["pid"] not in seen and rec.get("script"), rec
        seen.add(rec["pid"])
    return [rec for rec in raw if rec["kind"] != "process"]


def test_four_concurrent_processes_one_coherent_log(cache_env: dict[str, str], tmp_path: Path) -> None:
    n = 200
    env = dict(cache_env, PCOMPILE_JOB_ID="concurrent-job")
    procs = [spawn_py(WRITER.format(n=n), env=dict(env, RANK=str(r))) for r in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    log = Path(cache_env["PCOMPILE_CACHE_DIR"]) / "events" / "concurrent-job.jsonl"
    events = _lines(log)
    assert len(events) == 4 * n * 3
    by_rank: dict[int, list[dict]] = {}
    for ev in events:
        by_rank.setdefault(ev["rank"], []).append(ev)
    assert sorted(by_rank) == [0, 1, 2, 3]
    for r, evs in by_rank.items():
        assert len({e["pid"] for e in evs}) == 1
        for kind in ("graph_compile", "kernel_compile", "cache_lookup"):
            assert sorted(e["seq"] for e in evs if e["kind"] == kind) == list(range(n)), (r, kind)
        ids = [e["id"] for e in evs if "id" in e]
        assert len(ids) == len(set(ids))
        kernels = {e["seq"]: e for e in evs if e["kind"] == "kernel_compile"}
        graphs = {e["seq"]: e for e in evs if e["kind"] == "graph_compile"}
        assert all(kernels[i]["parent"] == graphs[i]["id"] for i in range(n))
        assert all(e["host"] and e["ts"] > 1e9 and e["dur"] >= 0 for e in evs)


def test_child_processes_inherit_a_minted_job_id(cache_env: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PCOMPILE_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")}
    env.update(cache_env)
    code = """
    import os, subprocess, sys
    from pcompile.events import span, job_id
    with span("warm_step"):
        pass
    child = "from pcompile.events import span\\nwith span('kernel_compile', worker=1): pass"
    subprocess.run([sys.executable, "-c", child], check=True)
    print(job_id())
    """
    saved = {k: os.environ.pop(k) for k in ("PCOMPILE_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID") if k in os.environ}
    try:
        res = run_py(code, env=cache_env)
    finally:
        os.environ.update(saved)
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().splitlines()[-1]
    logs = list((Path(cache_env["PCOMPILE_CACHE_DIR"]) / "events").glob("*.jsonl"))
    assert [p.name for p in logs] == [f"{job}.jsonl"]
    kinds = sorted(e["kind"] for e in _lines(logs[0]))
    assert kinds == ["kernel_compile", "warm_step"]
    assert len({e["pid"] for e in _lines(logs[0])}) == 2


def test_launcher_job_ids_are_used(cache_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from pcompile import events

    monkeypatch.delenv("PCOMPILE_JOB_ID", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert events.job_id() == "4242"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "elastic/../run 1")
    assert events.job_id() == "elastic_.._run_1"  # no path separators: safe as a file name
    monkeypatch.setenv("PCOMPILE_JOB_ID", "mine")
    assert events.job_id() == "mine"


def test_log_is_bounded_with_one_warning(cache_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture) -> None:
    from pcompile.events import emit, log_path

    monkeypatch.setenv("PCOMPILE_JOB_ID", "bounded")
    monkeypatch.setenv("PCOMPILE_EVENTS_MAX_BYTES", "3000")
    with caplog.at_level(logging.WARNING, logger="pcompile.events"):
        for i in range(200):
            emit("kernel_compile", time.time(), 0.01, key=f"k{i}", outcome="compiled")
    size = log_path().stat().st_size
    assert 2000 < size <= 3000
    assert len([r for r in caplog.records if "reached" in r.getMessage()]) == 1
    assert all(json.loads(line) for line in log_path().read_bytes().splitlines())


def test_old_job_logs_are_pruned(cache_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from pcompile.events import emit

    d = Path(cache_env["PCOMPILE_CACHE_DIR"]) / "events"
    d.mkdir(parents=True)
    for i in range(5):
        p = d / f"old{i}.jsonl"
        p.write_text("{}\n")
        os.utime(p, (1000 + i, 1000 + i))
    monkeypatch.setenv("PCOMPILE_EVENTS_KEEP", "3")
    monkeypatch.setenv("PCOMPILE_JOB_ID", "fresh")
    emit("gc", time.time(), 0.1)
    assert sorted(p.name for p in d.glob("*.jsonl")) == ["fresh.jsonl", "old3.jsonl", "old4.jsonl"]


def test_disabled_records_nothing_and_is_cheap(cache_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from pcompile.events import emit, span

    monkeypatch.setenv("PCOMPILE_EVENTS", "0")
    monkeypatch.setenv("PCOMPILE_JOB_ID", "off")
    t0 = time.perf_counter()
    for i in range(20000):
        with span("kernel_compile", key=i) as ev:
            ev.outcome = "hit"
        emit("cache_lookup", 0.0, 0.0)
    per_call = (time.perf_counter() - t0) / 20000
    assert per_call < 20e-6  # ~1 us on a laptop; generous for a loaded CI box
    assert not (Path(cache_env["PCOMPILE_CACHE_DIR"]) / "events").exists()


def test_recording_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from pcompile.events import emit, span

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("PCOMPILE_CACHE_DIR", str(blocker))
    monkeypatch.setenv("PCOMPILE_JOB_ID", "unwritable")
    with caplog.at_level(logging.WARNING, logger="pcompile.events"):
        for _ in range(3):
            with span("verify", key=object()) as ev:
                ev.outcome = "hit"
            emit("gc", "not a time", None)
    assert len([r for r in caplog.records if "events disabled" in r.getMessage()]) == 1


def test_span_fields_outcomes_and_errors(cache_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from pcompile.events import emit, log_path, span

    monkeypatch.setenv("PCOMPILE_JOB_ID", "fields")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.delenv("RANK", raising=False)
    with span("cache_lookup", layer="fxgraph") as ev:
        ev.tier = "shared"
        ev.set(outcome="hit", saved_s=2.5)
        time.sleep(0.01)
    with pytest.raises(KeyError):
        with span("graph_compile", key="g"):
            raise KeyError("boom")
    t = time.perf_counter()
    emit("kernel_compile", t, 0.5, worker=2, outcome="compiled")  # perf_counter start is mapped to wall time
    a, b, c = _lines(log_path())
    assert a["kind"] == "cache_lookup" and a["tier"] == "shared" and a["outcome"] == "hit" and a["saved_s"] == 2.5
    assert a["dur"] >= 0.009 and a["rank"] == 3
    assert b["outcome"] == "error" and "boom" in b["error"]
    assert abs(c["ts"] - time.time()) < 5 and c["worker"] == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_writes_under_its_own_pid(cache_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from pcompile.events import emit, log_path

    monkeypatch.setenv("PCOMPILE_JOB_ID", "forked")
    emit("warm_step", time.time(), 0.0, who="parent")
    pid = os.fork()
    if pid == 0:
        try:
            emit("warm_step", time.time(), 0.0, who="child")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    evs = _lines(log_path())
    assert [e["who"] for e in evs] == ["parent", "child"]
    assert evs[1]["pid"] == pid


def test_field_names_cannot_break_the_record(cache_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from pcompile.events import emit, log_path, span

    monkeypatch.setenv("PCOMPILE_JOB_ID", "reserved")
    with span("kernel_compile", kind="triton", ts="x") as ev:  # caller fields named like record fields
        ev.outcome = "compiled"
    emit("cache_lookup", time.time(), 0.1, dur=99, rank=5)
    a, b = _lines(log_path())
    assert a["kind"] == "kernel_compile" and a["field_kind"] == "triton" and isinstance(a["ts"], float)
    assert b["dur"] == 0.1 and b["field_dur"] == 99 and b["rank"] == 5


def test_shared_worker_records_into_the_requesting_jobs_log(cache_env: dict[str, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from pcompile.events import emit, log_path, span

    monkeypatch.setenv("PCOMPILE_JOB_ID", "pool-daemon")
    emit("gc", time.time(), 0.1)
    for job in ("job-a", "job-b", "job-a"):
        with span("kernel_compile", job=job, rank=1, worker=3) as ev:
            ev.outcome = "compiled"
    d = log_path().parent
    assert len(_lines(d / "job-a.jsonl")) == 2 and len(_lines(d / "job-b.jsonl")) == 1
    assert _lines(d / "job-a.jsonl")[0]["worker"] == 3 and "job" not in _lines(d / "job-a.jsonl")[0]
    assert [e["kind"] for e in _lines(log_path())] == ["gc"]
