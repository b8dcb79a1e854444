"""The README's walk-throughs, run from its text on one machine (tests/readme_commands.py).

Substitutions, as the README says: HEAD is this host, /mnt/pcompile a temporary directory, the
node-local dirs temporary ones, and train.py one of the examples. Two cache dirs stand for two
nodes; a local Ray head stands for the cluster (the "other node" line is checked for its form:
one machine cannot run a second raylet of the same cluster here). The GPU job step runs only
where a GPU is.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import readme_commands as rc

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _subst(cmd: str, mapping: dict[str, str]) -> str:
    for old, new in mapping.items():
        cmd = cmd.replace(old, new)
    return cmd


def _env_of(cmd: str) -> tuple[dict[str, str], str]:
    """Leading NAME=value assignments of a command line, and the rest."""
    env: dict[str, str] = {}
    parts = cmd.split(" ")
    while parts and "=" in parts[0] and parts[0].split("=", 1)[0].isupper():
        name, value = parts.pop(0).split("=", 1)
        env[name] = value
    return env, " ".join(parts)


def _run(cmd: str, base: dict[str, str]) -> str:
    extra, rest = _env_of(cmd)
    proc = rc.run(rest, dict(base, **extra))
    return proc.stdout + proc.stderr


def _exported(cmd: str, env: dict[str, str]) -> dict[str, str]:
    """`export A=x B=$(...)` as bash evaluates it (command substitution included)."""
    assert cmd.startswith("export ") and "=" in cmd, cmd
    names = re.findall(r"(?:^export |\s)([A-Z_][A-Z0-9_]*)=", cmd)
    shown = " ".join(f'"${n}"' for n in names)
    out = subprocess.run(["bash", "-c", f"{cmd}; printf '%s\\0' {shown}"], env=env, capture_output=True, text=True, check=True).stdout
    values = out.split("\0")[: len(names)]
    assert len(values) == len(names) and all(values), f"`{cmd}` left {names} without values"
    return dict(zip(names, values))


def _newest_job(cache_dir: Path, shared: Path | None = None) -> dict:
    where = f"--cache-dir {cache_dir}" + (f" --shared-dir {shared}" if shared else "")
    stats = json.loads(rc.run(f"pcompile stats --json {where}", rc.clean_env()).stdout)
    return stats["recent_jobs"][0] | {"tiers": stats["tiers"]}


def test_shared_cache_two_nodes_second_hits_every_layer(tmp_path: Path) -> None:
    (block,) = rc.bash_blocks("A shared cache on every node")
    mapping = {"/mnt/pcompile": str(tmp_path / "shared"), "/tmp/pcompile-node1": str(tmp_path / "node1"),
               "/tmp/pcompile-node2": str(tmp_path / "node2"), "train.py": "examples/cpu_demo.py"}
    cmds = [_subst(c, mapping) for c in block]
    assert len(cmds) == 3 and cmds[2].startswith("pcompile stats")
    base = rc.clean_env()
    for cmd in cmds:
        _run(cmd, base)
    node1, node2 = (_newest_job(tmp_path / n, tmp_path / "shared") for n in ("node1", "node2"))
    assert not node1["all_hit"] and node2["all_hit"], (node1["layers"], node2["layers"])
    assert node2["tiers"]["shared"]["hits"] > 0  # node 2 read node 1's entries from the shared tier


def _warm_then_check(tmp_path: Path, target: str | None = None) -> tuple[str, dict[str, str]]:
    """The walkthrough's first two commands, run for real: the warm, then its coverage check
    (every lookup of a second warm hits). Returns the job's command and the environment.
    `target`: a board to warm for instead of the README's h100 (the GPU the job will run on)."""
    (block,) = rc.bash_blocks("Warm on a CPU host, then the GPU job")
    mapping = {"/mnt/pcompile": str(tmp_path / "shared"), "train.py": "examples/warm_small_gpt.py"}
    if target is not None:
        mapping["--target h100"] = f"--target {target}"
    warm, check, job = (_subst(c, mapping) for c in block)
    base = rc.clean_env(PCOMPILE_POOL_IDLE_EXIT="10")
    first = _run(warm, base)
    assert "written to" in first and "warning" not in first.lower(), first[-2000:]
    checked = _run(check, base)
    line = next(ln for ln in checked.splitlines() if ln.startswith("coverage before this run: "))
    hit, total = line.split(": ", 1)[1].split(" ", 1)[0].split("/")
    assert int(total) > 0 and hit == total, line
    return job, base


def test_warm_on_a_cpu_host(tmp_path: Path) -> None:
    """The CPU half: warm, then check coverage; the job's line is the script, unchanged, with the
    warm's cache dir (the GPU half runs in test_then_the_gpu_job_hits_what_the_warm_wrote)."""
    job, _ = _warm_then_check(tmp_path)
    extra, rest = _env_of(job)
    assert extra == {"PCOMPILE": "1", "PCOMPILE_CACHE_DIR": str(tmp_path / "shared" / "cache")} and rest.startswith("python ")


@pytest.mark.gpu
def test_then_the_gpu_job_hits_what_the_warm_wrote(tmp_path: Path) -> None:
    """The GPU half (`pytest -m gpu` on a GPU host): the job, as the README runs it, hits every
    entry the warm wrote, warmed for this very board (the README's h100 would be another
    board's entries on an H200, which the job rightly does not load)."""
    board = tmp_path / "board.json"
    rc.run(f"pcompile profile --out {board}", rc.clean_env())
    job, base = _warm_then_check(tmp_path, target=str(board))
    out = _run(job, base)
    newest = _newest_job(tmp_path / "shared" / "cache")
    assert newest["all_hit"], (newest, out[-3000:])


def test_ray_pool_compiles_the_warms_kernels_on_actors(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    (block,) = rc.bash_blocks("Ray pool across nodes")
    port = str(_free_port())
    mapping = {"HEAD": "127.0.0.1", "6379": port, "train.py": "examples/warm_small_gpt.py"}
    token, head, other, job = (_subst(c, mapping) for c in block)
    assert head.startswith("ray start --head") and other.startswith(f"ray start --address=127.0.0.1:{port}")
    cache = tmp_path / "cache"
    base = rc.clean_env(PCOMPILE_CACHE_DIR=str(cache), PCOMPILE_POOL_IDLE_EXIT="10", RAY_USAGE_STATS_ENABLED="0",
                        **({"PCOMPILE_WARM_SANDBOX": os.environ["PCOMPILE_WARM_SANDBOX"]} if "PCOMPILE_WARM_SANDBOX" in os.environ else {}))
    base.update(_exported(token, base))
    # --block (the README's) keeps the head in a process group of ours, ended below (never `ray
    # stop`: it ends every Ray of this machine, other tests' included)
    temp = tempfile.mkdtemp(prefix="pcray-")  # short: Ray's socket paths must fit 107 bytes
    assert "--block" in head.split(), head  # the README's head is ended by its own signal, not `ray stop`
    ray = subprocess.Popen(rc.argv(head) + ["--temp-dir", temp], env=base, cwd=rc.REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        # up as `ray start` (without --block) returns: the GCS port open and the raylet's socket made
        # (the warm's file sandbox binds through the sockets that exist when it starts)
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
                if list(Path(temp).glob("session_*/sockets/raylet")):
                    break
            except OSError:
                pass
            assert ray.poll() is None, ray.stdout.read().decode(errors="replace")[-3000:]
            time.sleep(1)
        out = _run(job, base)
        ours = [ln for ln in out.splitlines() if "pcompile" in ln.lower() and "warning" in ln.lower()]
        assert not ours, out[-2000:]  # (Ray logs its own, e.g. about signal handlers in threads)
        log = cache / "events"
        events = [json.loads(line) for p in log.glob("warm-*.jsonl") for line in p.read_text().splitlines()]
        pools = {e.get("pool") for e in events if e["kind"] == "kernel_compile" and e.get("kernel")}
        assert pools == {"ray"}, pools
    finally:
        try:
            os.killpg(ray.pid, signal.SIGTERM)
            ray.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(ray.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(temp, ignore_errors=True)
