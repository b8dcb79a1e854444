"""Shared fixtures: isolated cache dirs per test, and a helper to run real child processes."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """PCOMPILE_* pointing into tmp_path, set in this process and returned for children."""
    env = {
        "PCOMPILE_CACHE_DIR": str(tmp_path / "cache"),
        "PCOMPILE_SHARED_DIR": str(tmp_path / "shared"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PCOMPILE_REMOTE", raising=False)
    monkeypatch.delenv("PCOMPILE_READ_ONLY", raising=False)
    return env


@pytest.fixture(scope="session")
def vdev_dir(tmp_path_factory: pytest.TempPathFactory):
    """One build dir for the virtual device for the whole session (PCOMPILE_VDEV_DIR, unless the
    caller set one): built once, shared by its test modules, and the variable restored at the end."""
    from pcompile.settings import VDEV_DIR

    with pytest.MonkeyPatch.context() as mp:
        if not os.environ.get(VDEV_DIR.name):
            mp.setenv(VDEV_DIR.name, str(tmp_path_factory.mktemp("vdev")))
        yield Path(os.environ[VDEV_DIR.name])


@pytest.fixture
def store_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A private pcompile cache dir for in-process hook tests; leases released afterwards."""
    from pcompile.inductor import store_gateway

    for name in list(os.environ):
        if name.startswith("PCOMPILE"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PCOMPILE_CACHE_DIR", str(tmp_path / "pc"))
    monkeypatch.setenv("PCOMPILE_EVENTS", "0")
    yield tmp_path / "pc"
    store_gateway.release_all()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    # the layers below programs are what these children test (a program answers a restart first);
    # test_programs.py and the README walkthroughs (readme_commands.clean_env) run with programs on
    env.setdefault("PCOMPILE_PROGRAMS", "0")
    env.update(extra or {})
    return env


def run_py(code: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a Python snippet in a fresh interpreter; returns the completed process (text)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=child_env(env), cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )


def spawn_py(code: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=child_env(env), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pcompile.cli.main", *args],
        env=child_env(env), capture_output=True, text=True, timeout=timeout,
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`gpu` tests skip cleanly on a host without a CUDA GPU (before any of their fixtures run)."""
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU: run `python -m pytest -m gpu` on the device machine")
