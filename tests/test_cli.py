"""The CLI contract: JSON shapes other tools read, and one-line errors with exit status 2."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import run_cli
from pcompile.config import Settings
from pcompile.keys import make_key
from pcompile.store.entry import Entry
from pcompile.store.compose import open_store
from pcompile.store.tiered import Store

FP = {"torch": "t", "target_arch": "sm_90"}


def _populate(tmp_path: Path, n: int = 3, size: int = 10_000) -> tuple[Store, list[Entry]]:
    store = open_store(Settings(cache_dir=tmp_path / "c", shared_dir=None))
    entries = []
    for i in range(n):
        key, inputs = make_key("kernel", f"src{i}", FP)
        entries.append(Entry(key, {"code": os.urandom(size)}, inputs, compile_seconds=2.0))
        store.put(entries[-1])
    return store, entries


def _args(tmp_path: Path) -> list[str]:
    return ["--cache-dir", str(tmp_path / "c")]


def test_stats_json_contract(tmp_path: Path) -> None:
    store, entries = _populate(tmp_path)
    assert store.get(entries[0].key) is not None
    store.close()
    out = run_cli("stats", "--json", *_args(tmp_path))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for field in ("entries", "bytes", "compiles", "compile_seconds", "saved_seconds", "layers", "tiers"):
        assert field in data
    assert set(data["layers"]) == {"program", "graph", "autograd", "kernel", "autotune"}
    assert data["layers"]["kernel"] == {"hits": 1, "misses": 0, "untimed": 0, "inner": 0, "predicted": 0, "lookups": 1, "rate": 1.0}
    # every byte under the cache dir is accounted for, by what keeps it
    assert data["disk"]["store entries"] == data["bytes"] and data["disk_bytes"] >= data["bytes"]
    assert data["entries"] == 3 and data["bytes"] > 30_000
    assert data["compiles"] == 3 and data["compile_seconds"] == pytest.approx(6.0)
    assert data["saved_seconds"] == pytest.approx(2.0)
    assert data["tiers"]["local"]["hits"] == 1


def test_explain_names_the_differing_field(tmp_path: Path) -> None:
    store = open_store(Settings(cache_dir=tmp_path / "c"))
    ka, ia = make_key("graph", "same graph", {**FP, "target_name": "NVIDIA H100 80GB HBM3"})
    kb, ib = make_key("graph", "same graph", {**FP, "target_name": "NVIDIA H100 PCIe"})
    store.put(Entry(ka, {"g": b"a"}, ia))
    store.put(Entry(kb, {"g": b"b"}, ib))
    out = run_cli("explain", str(ka), str(kb), *_args(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "target GPU: NVIDIA H100 80GB HBM3 -> NVIDIA H100 PCIe" in out.stdout and "source_hash" not in out.stdout
    js = json.loads(run_cli("explain", "--json", str(ka), str(kb), *_args(tmp_path)).stdout)
    assert [d["field"] for d in js["differences"]] == ["fingerprint.target_name"]


def test_verify_finds_a_byte_flipped_by_hand(tmp_path: Path) -> None:
    store, entries = _populate(tmp_path)
    assert run_cli("verify", *_args(tmp_path)).returncode == 0
    blob = next(p for p in (tmp_path / "c" / "store" / "blobs").rglob("*") if p.is_file())
    data = bytearray(blob.read_bytes())
    data[100] ^= 0x40
    blob.write_bytes(bytes(data))
    out = run_cli("verify", *_args(tmp_path))
    assert out.returncode == 1 and "BAD" in out.stdout
    fixed = run_cli("verify", "--fix", *_args(tmp_path))
    assert fixed.returncode == 1 and "quarantined" in fixed.stdout
    assert run_cli("verify", *_args(tmp_path)).returncode == 0  # quarantined: gone, store sound


def test_gc_lru_and_pins(tmp_path: Path) -> None:
    store, entries = _populate(tmp_path, n=5, size=100_000)
    local = store.tiers[0]
    now = time.time()
    for age, entry in zip((50, 40, 30, 20, 10), entries):  # entries[0] least recently used
        os.utime(local.manifest_path(entry.key), (now - age * 3600, now - age * 3600))
    for path in local.blobs.rglob("*"):
        if path.is_file():
            os.utime(path, (now - 86400, now - 86400))  # past the blob grace period
    assert run_cli("pin", str(entries[0].key), *_args(tmp_path)).returncode == 0
    out = run_cli("gc", "--max-bytes", "250k", "--json", *_args(tmp_path))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)["local"]
    kept = {str(k) for k in local.keys()}
    assert str(entries[0].key) in kept  # pinned, though the oldest
    assert str(entries[1].key) not in kept and str(entries[2].key) not in kept
    assert str(entries[4].key) in kept
    assert result["entries_removed"] == 3 - (1 if str(entries[3].key) in kept else 0) or result["entries_removed"] >= 2
    assert local.usage()[1] <= 250 * 1024
    assert run_cli("verify", *_args(tmp_path)).returncode == 0


@pytest.mark.parametrize("how", ["flag", "env"])
def test_gc_budget_flag_and_variable_read_sizes_alike(tmp_path: Path, how: str) -> None:
    """`--max-bytes 0.25MiB` and PCOMPILE_MAX_BYTES=0.25MiB go through one parser (settings.parse_size)."""
    store, _ = _populate(tmp_path, n=5, size=100_000)
    old = time.time() - 86400
    for path in store.tiers[0].root.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))  # past the blob grace period
    argv = ["gc", "--json", *_args(tmp_path)] + (["--max-bytes", "0.25MiB"] if how == "flag" else [])
    out = run_cli(*argv, env={"PCOMPILE_MAX_BYTES": "0.25MiB"} if how == "env" else None)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert 0 < store.tiers[0].usage()[1] <= 256 * 1024


def test_gc_max_age(tmp_path: Path) -> None:
    store, entries = _populate(tmp_path, n=2)
    old = time.time() - 10 * 86400
    os.utime(store.tiers[0].manifest_path(entries[0].key), (old, old))
    out = run_cli("gc", "--max-age", "7", *_args(tmp_path))
    assert out.returncode == 0
    assert {str(k) for k in store.tiers[0].keys()} == {str(entries[1].key)}


def test_verify_is_not_a_use(tmp_path: Path) -> None:
    """`pcompile verify` reads every entry; under relatime a plain read would refresh atime, which
    GC takes as last use, so one verify would make an old cache look freshly used."""
    store, entries = _populate(tmp_path, n=1)
    local = store.tiers[0]
    manifest = local.manifest_path(entries[0].key)
    blob = local.blob_path(json.loads(manifest.read_bytes())["blobs"]["code"]["sha256"])
    old = time.time() - 10 * 86400
    for path in (manifest, blob):
        os.utime(path, (old, old))
    assert run_cli("verify", *_args(tmp_path)).returncode == 0
    for path in (manifest, blob):
        assert abs(path.stat().st_atime - old) < 2, f"verify refreshed the atime of {path.name}"
    assert run_cli("gc", "--max-age", "7", *_args(tmp_path)).returncode == 0
    assert list(local.keys()) == []


def test_entries_of_a_removed_layer_are_ignored_and_their_blobs_freed(tmp_path: Path) -> None:
    """A cache written by a pcompile that had a layer since removed holds that layer's manifests
    (here a stand-in name, `retired`: the one real case, `program`, is a layer again) and stats files
    counting that layer. stats, verify and gc treat them as
    any layer they do not know: not listed, not counted, not an error; gc frees the blobs only
    they named once the grace period is over; the old layer's zero counters show no row."""
    store, entries = _populate(tmp_path, n=2)
    local = store.tiers[0]
    old_manifest = local.manifest_path(entries[1].key)  # a real manifest, moved under the old layer
    body = json.loads(old_manifest.read_bytes())
    blob = local.blob_path(body["blobs"]["code"]["sha256"])
    program = local.manifests / "retired" / entries[1].key.digest[:2] / f"retired-{entries[1].key.digest}.json"
    program.parent.mkdir(parents=True)
    os.replace(old_manifest, program)
    stats_dir = tmp_path / "c" / "stats"
    stats_dir.mkdir(parents=True, exist_ok=True)
    (stats_dir / "totals.json").write_text(json.dumps({"layers": {"retired": {"hits": 0, "misses": 0},
                                                                  "kernel": {"hits": 0, "misses": 2}}}))
    store.close()

    out = run_cli("stats", "--json", *_args(tmp_path))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["entries"] == 1 and set(data["layers"]) == {"program", "graph", "autograd", "kernel", "autotune"}, data
    assert run_cli("stats", *_args(tmp_path)).returncode == 0
    out = run_cli("verify", "--json", *_args(tmp_path))
    assert out.returncode == 0 and json.loads(out.stdout)["checked"] == 1, out.stdout + out.stderr
    old = time.time() - 86400
    os.utime(blob, (old, old))  # past the blob grace period
    out = run_cli("gc", "--json", *_args(tmp_path))
    assert out.returncode == 0, out.stderr
    assert not blob.exists() and json.loads(out.stdout)["local"]["blobs_removed"] == 1, out.stdout
    assert [str(k) for k in local.keys()] == [str(entries[0].key)]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["stats", "--no-such-flag"], "unrecognized arguments"),
        (["explain", "kernel-123", "graph-" + "0" * 32], "malformed key"),
        (["explain", "../../etc/passwd", "graph-" + "0" * 32], "malformed key"),
        (["pin", "kernel-" + "0" * 31 + "\x01"], "malformed key"),
        (["gc", "--max-bytes", "lots"], "not a size"),
        (["gc", "--max-age", "-1"], "zero or more"),
        (["verify", "--cache-dir", "/nonexistent/pcompile"], "does not exist"),
        (["stats", "--cache-dir", "/proc/pcompile-cache"], "cannot create the cache"),
        (["frobnicate"], "invalid choice"),
        (["warm", "/tmp", "--target", "h100"], "/tmp is a directory; pass the training script"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv: list[str], needle: str) -> None:
    out = run_cli(*argv)
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def test_unwritable_cache_dir(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "store").write_text("a file where the store directory should be")
    out = run_cli("stats", "--cache-dir", str(ro))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
