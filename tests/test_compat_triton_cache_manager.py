"""compat/triton_cache_manager.py: Triton still builds its cache manager from TRITON_CACHE_MANAGER
and still hands it a file group through get_group/put_group (checked with pcompile's manager)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("triton")

from pcompile.compat import triton_cache_manager as compat  # noqa: E402


def test_check_passes_on_this_triton() -> None:
    compat.check()


def test_env_selects_pcompile_manager_for_every_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.runtime.cache import get_cache_manager

    from pcompile.inductor.triton_cache import MANAGER_PATH, StoreCacheManager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("TRITON_CACHE_MANAGER", MANAGER_PATH)
    monkeypatch.setenv("PCOMPILE_DISABLE", "1")  # exercise only the file-manager half here
    assert compat.configured_manager() is StoreCacheManager
    manager = get_cache_manager("ab" * 32)
    assert isinstance(manager, StoreCacheManager) and isinstance(manager, compat.file_cache_manager())
    path = manager.put(b"\x7fELF", "k.cubin", binary=True)
    group_path = manager.put_group("k.json", {"k.cubin": path})
    assert Path(group_path).exists() and manager.get_group("k.json") == {"k.cubin": path}
