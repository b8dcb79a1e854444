"""What a ccache/sccache user reaches for (issue 32, items 5 and 8): `--version`, `stats --zero`,
`clear`, `config`, a description for every command, `--json` everywhere, and reports that land in
the cache dir, never in the working directory unasked. Real CLI processes on a real CPU compile."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, child_env, run_cli, spawn_py


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache dir after one real run of the CPU walk-through (entries, stats, an event log)."""
    cache = tmp_path_factory.mktemp("clicache") / "cache"
    res = subprocess.run([sys.executable, str(REPO / "examples" / "cpu_demo.py")], env=child_env({"PCOMPILE_CACHE_DIR": str(cache)}),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return cache


def _cli_in(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pcompile.cli.main", *args], cwd=cwd, env=child_env(),
                          capture_output=True, text=True, timeout=120)


def test_version_prints_pcompile_torch_and_triton() -> None:
    import pcompile

    out = run_cli("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"pcompile {pcompile.__version__} (torch ") and "triton" in out.stdout


def _commands() -> dict[str, object]:
    from pcompile.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return dict(sub.choices)


def test_every_command_has_a_description_and_json() -> None:
    commands = _commands()
    assert {"clear", "config", "stats", "verify", "gc", "pin", "unpin", "profile", "keygen"} <= set(commands)
    for name, parser in commands.items():
        assert parser.description, f"`pcompile {name} --help` has no description"
        flags = {s for a in parser._actions for s in a.option_strings}
        assert "--json" in flags, f"`pcompile {name}` takes no --json"
        if name not in ("profile", "keygen"):  # the README says these two touch no cache dir
            assert "--cache-dir" in flags, f"`pcompile {name}` takes no --cache-dir"


def test_readme_says_which_commands_take_cache_dir() -> None:
    text = (REPO / "README.md").read_text()
    assert "Every command takes `--cache-dir`" not in text


def test_stats_zero_starts_the_counters_again(compiled: Path, tmp_path: Path) -> None:
    import shutil

    cache = tmp_path / "cache"
    shutil.copytree(compiled, cache, ignore=shutil.ignore_patterns("pool"))
    before = json.loads(run_cli("stats", "--json", "--cache-dir", str(cache)).stdout)
    assert before["compiles"] > 0 and any(r["lookups"] for r in before["layers"].values())
    out = run_cli("stats", "--zero", "--cache-dir", str(cache))
    assert out.returncode == 0 and "zeroed" in out.stdout, out
    after = json.loads(run_cli("stats", "--json", "--cache-dir", str(cache)).stdout)
    assert after["compiles"] == 0 and not any(r["lookups"] for r in after["layers"].values())
    assert after["entries"] == before["entries"]  # the entries stay
    assert "since `pcompile stats --zero` at" in run_cli("stats", "--cache-dir", str(cache)).stdout


def test_clear_empties_the_local_tier_and_says_how_much(compiled: Path, tmp_path: Path) -> None:
    import shutil

    cache = tmp_path / "cache"
    shutil.copytree(compiled, cache, ignore=shutil.ignore_patterns("pool"))
    out = run_cli("clear", "--cache-dir", str(cache))
    assert out.returncode == 0, out.stderr
    assert "cleared" in out.stdout and ("KiB" in out.stdout or "MiB" in out.stdout), out.stdout
    assert not (cache / "store").exists() and not (cache / "inductor").exists()
    assert (cache / "events").is_dir()  # job history stays
    data = json.loads(run_cli("stats", "--json", "--cache-dir", str(cache)).stdout)
    assert data["entries"] == 0


def test_clear_refuses_while_a_job_uses_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "store").mkdir(parents=True)
    (cache / "store" / "marker").write_text("x")
    job = spawn_py(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from pcompile.store.stats import Stats\n"
        f"s = Stats(Path({str(cache / 'stats')!r})); s.lookup('graph', 'miss'); s.flush()\n"
        "print('ready', flush=True); time.sleep(120)\n")
    try:
        assert job.stdout.readline().strip() == "ready"
        out = run_cli("clear", "--cache-dir", str(cache))
        assert out.returncode == 2 and f"pid {job.pid}" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out
        assert (cache / "store" / "marker").exists()
    finally:
        job.kill()
        job.wait()
    assert run_cli("clear", "--cache-dir", str(cache)).returncode == 0
    assert not (cache / "store").exists()


def test_config_lists_every_setting_with_its_source(tmp_path: Path) -> None:
    from pcompile import settings

    env = {"PCOMPILE_MAX_BYTES": "20G", "PCOMPILE_MIN_FREE_BYTES": "lots", "PCOMPILE_REMOTE": "redis://u:hunter2@h:6379/0",
           "PCOMPILE_CAHCE_DIR": "/typo"}
    out = run_cli("config", "--json", "--cache-dir", str(tmp_path / "c"), env=env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rows = {r["name"]: r for r in data["settings"]}
    assert set(rows) == {v.name for v in settings.public()}
    assert rows["PCOMPILE_CACHE_DIR"]["source"] == "flag --cache-dir"
    assert rows["PCOMPILE_MAX_BYTES"] == dict(rows["PCOMPILE_MAX_BYTES"], value="20G", source="environment")
    assert rows["PCOMPILE_MIN_FREE_BYTES"]["source"].startswith("default (PCOMPILE_MIN_FREE_BYTES='lots'")
    assert rows["PCOMPILE_MAX_ENTRIES"]["source"] == "default"
    assert "hunter2" not in out.stdout
    assert data["unknown"] == ["PCOMPILE_CAHCE_DIR"]
    text = run_cli("config", env=env).stdout
    assert "PCOMPILE_CAHCE_DIR: set but not a pcompile setting" in text


def test_report_lands_in_the_cache_dir_not_the_working_directory(compiled: Path, tmp_path: Path) -> None:
    work = tmp_path / "project"
    work.mkdir()
    for extra in ([], ["--json"]):
        out = _cli_in(work, "report", "--cache-dir", str(compiled), *extra)
        assert out.returncode == 0, out.stderr
        assert list(work.iterdir()) == [], f"report wrote into the working directory: {list(work.iterdir())}"
    written = list((compiled / "reports").glob("pcompile-report-*.html"))
    assert written and str(written[0]) in out.stdout
    out = _cli_in(work, "report", "--cache-dir", str(compiled), "--out", "mine.html")
    assert out.returncode == 0 and (work / "mine.html").is_file()  # asked for: there


def test_clear_stops_an_idle_compile_daemon_first(tmp_path: Path) -> None:
    import time

    from pcompile.pool.paths import environment_identity

    cache = tmp_path / "cache"
    (cache / "store").mkdir(parents=True)
    (cache / "store" / "marker").write_text("x")
    daemon = subprocess.Popen([sys.executable, "-m", "pcompile.pool.daemon", "--cache-dir", str(cache), "--identity",
                               environment_identity(), "--workers", "1", "--idle-exit", "120"],
                              env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list(cache.glob("pool/*/daemon.pid")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(cache.glob("pool/*/daemon.pid")), "the daemon did not start"
        out = run_cli("clear", "--cache-dir", str(cache))
        assert out.returncode == 0 and "stopped 1 idle compile daemon" in out.stdout, out
        assert daemon.wait(timeout=30) == 0
        assert not (cache / "store").exists()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
