"""Triton's build identity is remembered across processes (pcompile/keys/triton_memo.py), and only
while Triton's files are unchanged: a restart's first fingerprint must not re-hash libtriton, and a
changed Triton must never reuse the old key."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env

from pcompile.keys import triton_memo

triton = pytest.importorskip("triton")

#: a process that prints triton_build(), optionally with Triton's own key made to fail
_PROBE = """
import sys
if sys.argv[1] == "no-hash":
    import pcompile.compat.triton_build as tb
    def refuse():
        raise RuntimeError("triton_key() was called")
    tb.triton_key = refuse
from pcompile.keys import versions
print(versions.triton_build())
"""


def _probe(cache: Path, mode: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                         env=child_env({"PCOMPILE_CACHE_DIR": str(cache), **env}), timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _memos(cache: Path) -> list[Path]:
    return sorted((cache / triton_memo.FOLDER).glob("triton-*"))


def test_a_second_process_reads_the_memo_instead_of_hashing(tmp_path: Path) -> None:
    first = _probe(tmp_path, "hash")
    assert first.startswith(f"{triton.__version__}+") and "unknown" not in first
    [memo] = _memos(tmp_path)
    assert memo.read_text().strip() == first
    # Triton's key now raises: the value can only come from the memo
    assert _probe(tmp_path, "no-hash") == first


def test_the_memo_holds_what_hashing_gives(cache_env: dict[str, str]) -> None:
    import xxhash

    from pcompile.compat.triton_build import triton_key

    hashed = f"{triton.__version__}+{xxhash.xxh3_64_hexdigest(triton_key().encode())}"
    assert _probe_value_in_process() == hashed  # computed and written
    assert _probe_value_in_process() == hashed  # read back
    assert len(_memos(Path(cache_env["PCOMPILE_CACHE_DIR"]))) == 1


def _probe_value_in_process() -> str:
    from pcompile.keys import versions

    versions.triton_build.cache_clear()
    try:
        return versions.triton_build()
    finally:
        versions.triton_build.cache_clear()


def test_a_read_only_cache_reads_but_never_writes(tmp_path: Path) -> None:
    value = _probe(tmp_path, "hash", PCOMPILE_READ_ONLY="1")
    assert value.startswith(f"{triton.__version__}+")
    assert _memos(tmp_path) == []


def _fake_triton(root: Path) -> None:
    for rel, data in (("compiler/compiler.py", b"a = 1\n"), ("backends/nvidia/driver.py", b"b = 2\n"),
                      ("language/core.py", b"c = 3\n"), ("runtime/cache.py", b"d = 4\n"), ("_C/libtriton.so", b"\0" * 64),
                      ("README.md", b"not hashed\n")):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_any_change_to_a_hashed_file_changes_the_signature(tmp_path: Path) -> None:
    root = tmp_path / "triton"
    _fake_triton(root)
    base = triton_memo.signature(str(root), "3.6.0")
    assert triton_memo.signature(str(root), "3.6.0") == base
    assert triton_memo.signature(str(root), "3.7.0") != base

    (root / "README.md").write_bytes(b"edited, and not part of triton_key\n")
    assert triton_memo.signature(str(root), "3.6.0") == base

    lib = root / "_C" / "libtriton.so"
    st = lib.stat()
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # same size, touched
    touched = triton_memo.signature(str(root), "3.6.0")
    assert touched != base

    (root / "language" / "core.py").write_bytes(b"c = 33\n")  # other size
    resized = triton_memo.signature(str(root), "3.6.0")
    assert resized not in (base, touched)

    (root / "compiler" / "new.py").write_bytes(b"")  # a file added
    added = triton_memo.signature(str(root), "3.6.0")
    assert added not in (base, touched, resized)
    (root / "compiler" / "new.py").unlink()
    assert triton_memo.signature(str(root), "3.6.0") == resized


def test_a_malformed_memo_is_ignored_and_rewritten(tmp_path: Path) -> None:
    root = tmp_path / "triton"
    _fake_triton(root)
    cache = tmp_path / "cache"
    calls: list[int] = []

    def compute() -> str:
        calls.append(1)
        return "3.6.0+0123456789abcdef"

    assert triton_memo.remembered(cache, str(root), "3.6.0", compute) == "3.6.0+0123456789abcdef"
    [memo] = sorted((cache / triton_memo.FOLDER).iterdir())
    for bad in (b"", b"3.6.0+01234", b"\xff\xfe garbage", b"3.6.0+0123456789abcdef; rm -rf /"):
        memo.write_bytes(bad)
        assert triton_memo.remembered(cache, str(root), "3.6.0", compute) == "3.6.0+0123456789abcdef"
        assert memo.read_text().strip() == "3.6.0+0123456789abcdef"
    assert len(calls) == 5
    assert triton_memo.remembered(cache, str(root), "3.6.0", compute) == "3.6.0+0123456789abcdef"
    assert len(calls) == 5  # read, not computed
    assert [p.name for p in (cache / triton_memo.FOLDER).iterdir()] == [memo.name]  # no temp files left


def test_a_cache_dir_that_cannot_be_written_still_answers(tmp_path: Path) -> None:
    root = tmp_path / "triton"
    _fake_triton(root)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    assert triton_memo.remembered(blocker, str(root), "3.6.0", lambda: "3.6.0+0123456789abcdef") == "3.6.0+0123456789abcdef"
    assert triton_memo.remembered(None, str(root), "3.6.0", lambda: "3.6.0+fedcba9876543210") == "3.6.0+fedcba9876543210"
