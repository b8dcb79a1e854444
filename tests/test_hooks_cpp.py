"""C++ kernel builds through the store (pcompile.inductor.cpp_cache), driven by real g++ builds.

A library Inductor builds is published (layer kernel) and a later build of the same key is a
store hit written into place without running the compiler; a library only Inductor's local
cache has is backfilled without counting as a compile; precompiled headers never enter the store.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from pcompile.inductor import cpp_cache, store_gateway


class Builder:
    """Stands in for Inductor's CppBuilder: a target path and a build step (a real compile)."""

    def __init__(self, target: Path, source: Path) -> None:
        self.target, self.source, self.builds = target, source, 0

    def get_target_file_path(self) -> str:
        return str(self.target)

    def build(self) -> None:
        self.builds += 1
        os.system(f"g++ -shared -fPIC -o {self.target} {self.source}")


def _stock(lock_path: str, builders: list[Builder]) -> None:
    for b in builders:
        if not os.path.exists(b.get_target_file_path()):
            b.build()


def _kernel_manifests(cache: Path) -> list[Path]:
    return sorted((cache / "store" / "manifests").rglob("kernel-*.json"))


def test_build_publishes_then_other_dir_hits_without_compiling(store_env: Path, tmp_path: Path) -> None:
    source = tmp_path / "k.cpp"
    source.write_text('extern "C" int kernel(int x) { return x * 3; }\n')
    wrapped = cpp_cache.make_wrapper(_stock)
    first = Builder(tmp_path / "a" / "ckey123.main.so", source)
    first.target.parent.mkdir()
    wrapped(str(tmp_path / "lock"), [first])
    assert first.builds == 1 and len(_kernel_manifests(store_env)) == 1 and store_gateway.held_keys() == []
    second = Builder(tmp_path / "b" / "ckey123.main.so", source)  # another Inductor cache dir, same key
    wrapped(str(tmp_path / "lock"), [second])
    assert second.builds == 0 and second.target.read_bytes() == first.target.read_bytes()
    assert os.access(second.target, os.X_OK)
    from pcompile.store.compose import default_store

    stats = default_store().stats.data
    assert stats["compiles"] == 1 and stats["layers"]["kernel"] == {"hits": 1, "misses": 1}


def test_local_only_library_is_backfilled_not_counted(store_env: Path, tmp_path: Path) -> None:
    lib = tmp_path / "cold.main.so"
    lib.write_bytes(b"\x7fELF pretend")
    cpp_cache.make_wrapper(_stock)(str(tmp_path / "lock"), [Builder(lib, tmp_path / "none.cpp")])
    manifests = _kernel_manifests(store_env)
    assert len(manifests) == 1 and '"backfill": true' in manifests[0].read_text()
    from pcompile.store.compose import default_store

    assert default_store().stats.data["compiles"] == 0


def test_precompiled_headers_stay_out_of_the_store(store_env: Path, tmp_path: Path) -> None:
    header = tmp_path / "prefix.h"
    header.write_text("int x;\n")
    gch = Builder(tmp_path / "prefix.h.gch", header)
    calls = []
    cpp_cache.make_wrapper(lambda lock, builders: calls.append(builders))(str(tmp_path / "lock"), [gch])
    assert calls and not _kernel_manifests(store_env)
