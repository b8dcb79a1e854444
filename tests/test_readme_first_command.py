"""The README's first command, run twice in a fresh cache: "the second time every layer hits".

The set-up line is read from the README (tests/readme_commands.py); its `pip install` step is
what CI has done before the suite. The second run's warm summary, `pcompile stats` and
`pcompile report` must count the same look-ups (one definition: pcompile/store/hits.py), every
layer they name must hit, and a correct set-up prints no warning.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import readme_commands as rc

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def _setup_commands() -> list[str]:
    first = rc.bash_blocks("Set-up")[0]
    assert first[0].startswith("pip install -e"), first
    cmds = first[1:]
    assert any(c.startswith("pcompile warm ") for c in cmds) and cmds[-1] == "pcompile stats", cmds
    return cmds


def _run_all(cmds: list[str], env: dict[str, str]) -> dict[str, str]:
    out = {}
    for cmd in cmds:
        proc = rc.run(cmd, env)
        out[cmd] = proc.stdout + proc.stderr
    return out


def _warm_lookups_line(output: str) -> str:
    line = next(ln for ln in output.splitlines() if ln.startswith("cache look-ups: "))
    return line[len("cache look-ups: "):].removesuffix("; nothing compiled")


def test_second_run_of_the_setup_line_hits_every_layer_and_all_views_agree(tmp_path: Path) -> None:
    from pcompile.store import hits

    cmds = _setup_commands()
    env = rc.clean_env(PCOMPILE_CACHE_DIR=str(tmp_path / "cache"), PCOMPILE_POOL_IDLE_EXIT="10")
    first = _run_all(cmds, env)
    second = _run_all(cmds, env)
    for run in (first, second):
        for cmd, text in run.items():
            assert "warning" not in text.lower(), f"a correct set-up printed a warning in `{cmd}`:\n{text[-2000:]}"

    warm_cmd = next(c for c in cmds if c.startswith("pcompile warm "))
    warm_said = _warm_lookups_line(second[warm_cmd])
    assert "nothing compiled" in second[warm_cmd]

    stats = json.loads(rc.run("pcompile stats --json", env).stdout)
    newest = stats["recent_jobs"]
    assert newest[0]["script"] == warm_cmd and "cpu_demo.py" in newest[1]["script"], newest
    for job in newest[:2]:  # the second run: the demo, then the warm
        assert job["all_hit"], (job["script"], job["layers"])
    assert (newest[1]["layers"].get("program") or {}).get("hits", 0) >= 1, newest[1]["layers"]  # the demo's restart
    assert hits.summary(newest[0]["layers"]) == warm_said
    assert warm_said in second[cmds[-1]]  # the README's own `pcompile stats` printed the same line

    for job in newest[:2]:
        report = json.loads(rc.run(f"pcompile report --json --job {job['job']} --out {tmp_path / 'r.html'}", env).stdout)
        assert report["layers"] == job["layers"] and report["all_hit"]
        program = job["layers"].get("program") or {}
        if program.get("lookups") and program.get("hits") == program["lookups"]:
            # the demo ran from its program (programs are on by default): Dynamo made no graph to look up
            assert set(report["graph_outcomes"]) <= {"hit"}, report["graph_outcomes"]
        else:
            assert report["graph_outcomes"] and set(report["graph_outcomes"]) == {"hit"}, report["graph_outcomes"]
        assert "compiled" not in report["kernel_outcomes"]
    # the cold run was honest too: its warm compiled, and said so in every view
    cold = stats["recent_jobs"][2]
    assert not cold["all_hit"] and cold["script"] == warm_cmd
