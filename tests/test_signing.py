"""Signed manifests: with signing configured, a tampered blob, a tampered manifest, a manifest
signed with another key and an unsigned entry are all refused before anything is deserialised.

The attacker here has write access to the remote store (the threat signing exists for) and plants
a pickle whose unpickling creates a marker file: if any code path loaded it, the file would exist.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest_remote import (  # noqa: F401  (fixtures)
    MotoServer,
    RedisServer,
    load_entry,
    make_entry,
    moto_server,
    open_store,
    redis_server,
    remote_of,
)
from pcompile.errors import PcompileError
from pcompile.store.entry import Entry, Manifest, blob_hash
from pcompile.trust.signing_keys import generate_ed25519, generate_hmac

pytest.importorskip("redis")
pytest.importorskip("cryptography")


class Boom:
    """Unpickling this creates a file: the observable effect of code from the cache running."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


@dataclasses.dataclass
class Keys:
    writer: dict[str, str]  # env of a process that publishes
    reader: dict[str, str]  # env of a consumer
    other: dict[str, str]  # env of someone holding a different key of the same kind


def _write(path: Path, data: bytes, mode: int = 0o600) -> str:
    path.write_bytes(data)
    path.chmod(mode)
    return str(path)


def make_keys(kind: str, d: Path) -> Keys:
    d.mkdir(parents=True, exist_ok=True)
    if kind == "hmac":
        key, other = generate_hmac(), generate_hmac()
        k = {"PCOMPILE_HMAC_KEY_FILE": _write(d / "hmac.key", key)}
        return Keys(k, k, {"PCOMPILE_HMAC_KEY_FILE": _write(d / "other.key", other)})
    private, public = generate_ed25519()
    o_private, _ = generate_ed25519()
    return Keys(
        {"PCOMPILE_SIGNING_KEY_FILE": _write(d / "signing.key", private)},
        {"PCOMPILE_VERIFY_KEY_FILE": _write(d / "verify.pub", public, 0o644)},
        {"PCOMPILE_SIGNING_KEY_FILE": _write(d / "other.key", o_private)},
    )


def _evil_entry(good: Entry, marker: Path) -> Entry:
    payload = pickle.dumps({"index": 0, "name": "kernel_0", "boom": Boom(str(marker))})
    return Entry(good.key, {**good.blobs, "payload.pkl": payload}, good.inputs, dict(good.meta), 1.0)


def _publish(store: Any, entry: Entry) -> None:
    store.put(entry)
    assert remote_of(store).flush(20)


# -- the four attacks: each leaves a poisoned entry under the good entry's key ----------------------
def attack_tampered_blob(env: dict[str, Any], good: Entry, marker: Path) -> None:
    """Swap the payload bytes in place (the signed manifest still names the old hash)."""
    raw = env["raw"]
    manifest = Manifest.decode(raw.read_manifest(good.key), good.key)
    sha = manifest.blobs["payload.pkl"]["sha256"]
    evil = _evil_entry(good, marker).blobs["payload.pkl"]
    raw.write_blob(sha, evil)


def attack_tampered_manifest(env: dict[str, Any], good: Entry, marker: Path) -> None:
    """Point the signed manifest at the attacker's blob, fix up its digest, keep the signature."""
    raw = env["raw"]
    manifest = Manifest.decode(raw.read_manifest(good.key), good.key)
    evil = _evil_entry(good, marker).blobs["payload.pkl"]
    raw.write_blob(blob_hash(evil), evil)
    body = json.loads(json.dumps(manifest.body))
    body["blobs"]["payload.pkl"] = {"sha256": blob_hash(evil), "size": len(evil)}
    raw.write_manifest(good.key, Manifest(body, manifest.signature).encode())


def attack_other_key(env: dict[str, Any], good: Entry, marker: Path) -> None:
    """A well-formed entry, properly signed, but with a key the readers do not trust."""
    _publish(env["other_store"], _evil_entry(good, marker))


def attack_unsigned(env: dict[str, Any], good: Entry, marker: Path) -> None:
    """A well-formed entry with no signature (what any plain writer would publish)."""
    raw = env["raw"]
    evil = _evil_entry(good, marker)
    for data in evil.blobs.values():
        raw.write_blob(blob_hash(data), data)
    raw.write_manifest(good.key, Manifest.for_entry(evil).encode())


ATTACKS: dict[str, Callable[[dict[str, Any], Entry, Path], None]] = {
    "tampered_blob": attack_tampered_blob,
    "tampered_manifest": attack_tampered_manifest,
    "other_key": attack_other_key,
    "unsigned": attack_unsigned,
}


@pytest.mark.parametrize("kind", ["hmac", "ed25519"])
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_poisoned_entry_is_refused_before_deserialisation(
    attack: str, kind: str, redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pcompile.store.redis_backend import RedisBackend

    keys = make_keys(kind, tmp_path / "keys")
    good = make_entry("graph", 0, 2000)
    writer = open_store(monkeypatch, tmp_path / "writer", redis_server.url, **keys.writer)
    _publish(writer, good)
    env = {
        "raw": RedisBackend.from_url(redis_server.url, timeout=5),  # the attacker: write access, no keys
        "other_store": open_store(monkeypatch, tmp_path / "other", redis_server.url, **keys.other),
    }
    marker = tmp_path / "PWNED"
    pickle.loads(_evil_entry(good, marker).blobs["payload.pkl"])  # control: loading the planted payload leaves the marker
    assert marker.exists()
    marker.unlink()
    ATTACKS[attack](env, good, marker)

    reader = open_store(monkeypatch, tmp_path / "reader", redis_server.url, **keys.reader)
    remote = remote_of(reader)
    blob_reads: list[str] = []
    real_read_blob = remote.backend.read_blob
    monkeypatch.setattr(remote.backend, "read_blob", lambda sha: blob_reads.append(sha) or real_read_blob(sha))
    loader_calls: list[Entry] = []

    def loader(entry: Entry) -> Any:
        loader_calls.append(entry)
        return load_entry(entry)

    assert reader.get(good.key) is None  # refused: a miss
    assert not marker.exists()  # nothing loaded the planted payload (the control above shows a load would show)
    if attack == "tampered_blob":
        assert blob_reads, "hashes are checked on the bytes read"
        assert reader.stats.data.get("untrusted", 0) == 0  # a signed manifest, a bad blob
    else:
        assert blob_reads == [], "a manifest that fails its signature check must not lead to any blob read"
        assert reader.stats.data["untrusted"] == 1
        assert reader.stats.data["tiers"]["redis"]["untrusted"] == 1
    # a bad hash is quarantined; a signature refusal is left in place (a reader with the wrong key
    # must not be able to wipe a shared cache), but it is never loaded either
    assert reader.stats.data["quarantined"] == (1 if attack == "tampered_blob" else 0)

    entry, outcome = reader.get_or_compute(good.key, lambda: good)  # recompiled, then loaded
    assert outcome == "compiled"
    assert loader(entry)(2) == 2 * 0 + 3
    assert loader_calls == [entry] and entry.blobs == good.blobs and not marker.exists()
    for s in (writer, env["other_store"], reader):
        s.close()


@pytest.mark.parametrize("kind", ["hmac", "ed25519"])
def test_signed_entries_flow_from_writer_to_reader(kind: str, redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = make_keys(kind, tmp_path / "keys")
    entries = [make_entry("kernel", i, 3000) for i in range(3)]
    writer = open_store(monkeypatch, tmp_path / "w", redis_server.url, **keys.writer)
    for e in entries:
        _publish(writer, e)
    raw_manifest = json.loads(redis_server.client().get(f"pcompile:v1:m:{entries[0].key}"))
    scheme = "hmac-sha256" if kind == "hmac" else "ed25519"
    assert raw_manifest["signature"].startswith(scheme + ":")

    reader = open_store(monkeypatch, tmp_path / "r", redis_server.url, **keys.reader)
    for e in entries:
        got = reader.get(e.key)
        assert got is not None and got.blobs == e.blobs
    remote = remote_of(reader)
    assert remote.verify(entries[0].key) is None
    if kind == "ed25519":
        # a consumer with only the public key can check but not sign: it never writes remotely
        assert remote.may_write() is False
        fresh = make_entry("kernel", 99, 10)
        reader.put(fresh)
        assert remote not in reader.writable_tiers()  # the store never even offers it the write
        assert redis_server.client().exists(f"pcompile:v1:m:{fresh.key}") == 0
    for s in (writer, reader):
        s.close()


def test_reader_with_wrong_key_does_not_wipe_the_remote(redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A misconfigured consumer refuses entries but must not delete them for everyone."""
    keys = make_keys("ed25519", tmp_path / "keys")
    stranger = make_keys("ed25519", tmp_path / "stranger")
    writer = open_store(monkeypatch, tmp_path / "w", redis_server.url, **keys.writer)
    entry = make_entry("kernel", 1, 100)
    _publish(writer, entry)
    confused = open_store(monkeypatch, tmp_path / "c", redis_server.url, **stranger.writer)  # a writer, wrong key
    assert confused.get(entry.key) is None
    assert redis_server.client().exists(f"pcompile:v1:m:{entry.key}") == 1
    for s in (writer, confused):
        s.close()


def test_signing_on_the_shared_filesystem_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = make_keys("ed25519", tmp_path / "keys")
    shared = tmp_path / "shared"
    entry = make_entry("graph", 3, 500)
    plain = open_store(monkeypatch, tmp_path / "plain", None, PCOMPILE_SHARED_DIR=str(shared))
    plain.put(entry)  # unsigned, into the shared tier
    reader = open_store(monkeypatch, tmp_path / "r", None, PCOMPILE_SHARED_DIR=str(shared), **keys.reader)
    assert reader.get(entry.key) is None
    assert reader.stats.data["untrusted"] == 1
    signed_writer = open_store(monkeypatch, tmp_path / "w", None, PCOMPILE_SHARED_DIR=str(shared), **keys.writer)
    signed_writer.put(entry)
    reader2 = open_store(monkeypatch, tmp_path / "r2", None, PCOMPILE_SHARED_DIR=str(shared), **keys.reader)
    got = reader2.get(entry.key)
    assert got is not None and got.blobs == entry.blobs


def test_consumer_that_can_only_verify_never_publishes_to_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Its entries would be refused by every reader: it keeps them local (one warning saying why)."""
    keys = make_keys("ed25519", tmp_path / "keys")
    shared = tmp_path / "shared"
    consumer = open_store(monkeypatch, tmp_path / "c", None, PCOMPILE_SHARED_DIR=str(shared), **keys.reader)
    entry = make_entry("kernel", 5, 100)
    with caplog.at_level("WARNING", logger="pcompile"):
        got, outcome = consumer.get_or_compute(entry.key, lambda: entry)
        consumer.put(make_entry("kernel", 6, 100))
    assert outcome == "compiled"
    assert consumer.local.get(entry.key) is not None
    from pcompile.store.fs_tier import DirectoryTier

    assert list(DirectoryTier(shared / "store", "shared", create=False).keys()) == []
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "PCOMPILE_READ_ONLY" in warned[0], warned
    consumer.close()


def test_signing_on_s3(moto_server: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pcompile.store.s3_backend import S3Backend

    bucket = moto_server.make_bucket()
    url = f"s3://{bucket}/signed"
    extra = {"PCOMPILE_S3_ENDPOINT_URL": moto_server.endpoint}
    keys = make_keys("ed25519", tmp_path / "keys")
    good, planted = make_entry("kernel", 1, 1000), make_entry("kernel", 2, 1000)
    writer = open_store(monkeypatch, tmp_path / "w", url, **keys.writer, **extra)
    _publish(writer, good)
    raw = S3Backend("pcompile-cache", "signed", timeout=5, endpoint_url=moto_server.endpoint)
    for data in planted.blobs.values():
        raw.write_blob(blob_hash(data), data)
    raw.write_manifest(planted.key, Manifest.for_entry(planted).encode())  # unsigned
    reader = open_store(monkeypatch, tmp_path / "r", url, **keys.reader, **extra)
    assert reader.get(good.key) is not None
    assert reader.get(planted.key) is None and reader.stats.data["untrusted"] == 1
    for s in (writer, reader):
        s.close()


def test_bad_key_configuration_fails_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Signing that cannot be set up is an error, never a silent fall back to unsigned."""
    with pytest.raises(PcompileError, match="PCOMPILE_VERIFY_KEY_FILE"):
        open_store(monkeypatch, tmp_path / "a", None, PCOMPILE_VERIFY_KEY_FILE=str(tmp_path / "missing.pub"))
    with pytest.raises(PcompileError, match="at least 16"):
        open_store(monkeypatch, tmp_path / "a", None, PCOMPILE_HMAC_KEY="short")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    rsa_pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(PcompileError, match="ed25519"):
        open_store(monkeypatch, tmp_path / "a", None, PCOMPILE_SIGNING_KEY_FILE=_write(tmp_path / "rsa.key", rsa_pem))
    private, _ = generate_ed25519()
    loose = _write(tmp_path / "loose.key", private, 0o644)
    with caplog.at_level("WARNING", logger="pcompile"):
        store = open_store(monkeypatch, tmp_path / "a", None, PCOMPILE_SIGNING_KEY_FILE=loose)
    assert any("chmod 600" in r.getMessage() for r in caplog.records)
    store.close()


def test_openssh_keys_and_several_verify_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rotation: readers trust old and new keys at once; OpenSSH-format keys work too."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from pcompile.trust import TrustConfig

    old, new = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    old_file = _write(tmp_path / "old", old.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()))
    pubs = tmp_path / "trusted.pub"
    pubs.write_bytes(
        old.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b" old\n"
        + new.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    monkeypatch.setenv("PCOMPILE_SIGNING_KEY_FILE", old_file)
    signed = TrustConfig.from_env().signer()(Manifest.for_entry(make_entry("kernel", 1, 10)))  # type: ignore[misc]
    monkeypatch.delenv("PCOMPILE_SIGNING_KEY_FILE")
    monkeypatch.setenv("PCOMPILE_VERIFY_KEY_FILE", str(pubs))
    config = TrustConfig.from_env()
    assert len(config.verify) == 2
    config.verifier()(signed)  # type: ignore[misc]  (does not raise)
    monkeypatch.setenv("PCOMPILE_VERIFY_KEY_FILE", os.pathsep.join([str(pubs), str(pubs)]))
    assert len(TrustConfig.from_env().verify) == 4
