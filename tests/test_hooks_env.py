"""Cache-directory environment (pcompile.inductor.env): pcompile's dirs unless the user chose."""
from __future__ import annotations

from pathlib import Path

import pytest

from pcompile.inductor import env
from pcompile.compat import cache_dir


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in (env.ENV_INDUCTOR_DIR, env.ENV_TRITON_DIR, env.ENV_TRITON_MANAGER):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PCOMPILE_CACHE_DIR", str(tmp_path / "pc"))
    return tmp_path / "pc"


def test_unset_dirs_go_under_the_pcompile_cache(clean: Path) -> None:
    import os

    env.set_cache_dirs()
    assert os.environ[env.ENV_INDUCTOR_DIR] == str(clean / "inductor")
    assert os.environ[env.ENV_TRITON_DIR] == str(clean / "inductor" / "triton")


def test_user_choices_win(clean: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(env.ENV_INDUCTOR_DIR, str(tmp_path / "mine"))
    monkeypatch.setenv(env.ENV_TRITON_DIR, str(tmp_path / "my_triton"))
    assert env.set_cache_dirs() == {}
    import os

    assert os.environ[env.ENV_INDUCTOR_DIR] == str(tmp_path / "mine")
    assert os.environ[env.ENV_TRITON_DIR] == str(tmp_path / "my_triton")


def test_torch_default_is_replaced_and_triton_moves_with_it(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = cache_dir.torch_default_dir()
    assert default
    monkeypatch.setenv(env.ENV_INDUCTOR_DIR, default)
    monkeypatch.setenv(env.ENV_TRITON_DIR, default + "/triton/0")
    changed = env.set_cache_dirs()
    assert changed == {env.ENV_INDUCTOR_DIR: str(clean / "inductor"), env.ENV_TRITON_DIR: str(clean / "inductor" / "triton")}


def test_a_foreign_triton_manager_is_respected(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    monkeypatch.setenv(env.ENV_TRITON_MANAGER, "some.module:Manager")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert env.set_triton_manager("pcompile.inductor.triton_cache:StoreCacheManager") is False
    import os

    assert os.environ[env.ENV_TRITON_MANAGER] == "some.module:Manager"
