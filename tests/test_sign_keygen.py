"""`pcompile keygen` writes keys that the store accepts, with safe file modes."""
from __future__ import annotations

import argparse
import json
import os
import stat
from pathlib import Path

import pytest

from conftest_remote import make_entry, open_store  # noqa: F401
from pcompile.cli import keygen_cmd
from pcompile.errors import PcompileError
from pcompile.store.entry import Manifest

pytest.importorskip("cryptography")


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    keygen_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["keygen", *argv])
    return args.func(args)


def test_ed25519_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("--out", str(tmp_path), "--json") == 0
    files = json.loads(capsys.readouterr().out)["files"]
    priv, pub = Path(files["signing_key"]), Path(files["verify_key"])
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert stat.S_IMODE(pub.stat().st_mode) == 0o644
    assert b"PRIVATE" not in pub.read_bytes()
    with pytest.raises(PcompileError, match="--force"):
        _run("--out", str(tmp_path))
    from pcompile.trust import TrustConfig

    monkeypatch.setenv("PCOMPILE_SIGNING_KEY_FILE", str(priv))
    signed = TrustConfig.from_env().signer()(Manifest.for_entry(make_entry("kernel", 1, 10)))  # type: ignore[misc]
    monkeypatch.delenv("PCOMPILE_SIGNING_KEY_FILE")
    monkeypatch.setenv("PCOMPILE_VERIFY_KEY_FILE", str(pub))
    reader = TrustConfig.from_env()
    assert reader.signer() is None
    reader.verifier()(signed)  # type: ignore[misc]
    assert "signs with nothing" in reader.describe()


def test_hmac_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = os.umask(0)  # even with a permissive umask the secret is created 600
    try:
        assert _run("--type", "hmac", "--out", str(tmp_path)) == 0
    finally:
        os.umask(old)
    key = tmp_path / "pcompile-hmac.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert len(key.read_bytes().strip()) == 64
    store = open_store(monkeypatch, tmp_path / "c", None, PCOMPILE_HMAC_KEY_FILE=str(key))
    assert store.local.signer is not None and store.local.trust is None  # the local tier signs, is not checked
    store.close()
    assert _run("--type", "hmac", "--out", str(tmp_path), "--force") == 0
