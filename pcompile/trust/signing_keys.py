"""Key material for signed manifests: loading, key ids, and generating new keys.

Two schemes:
* HMAC-SHA256 with one shared secret: every holder can sign *and* verify, so it fits a single
  trust domain (one team's cluster). PCOMPILE_HMAC_KEY or PCOMPILE_HMAC_KEY_FILE, >= 16 bytes.
* ed25519 (the `cryptography` package): writers hold the private key
  (PCOMPILE_SIGNING_KEY_FILE, PEM PKCS#8 or OpenSSH), readers only public keys
  (PCOMPILE_VERIFY_KEY_FILE: PEM or OpenSSH, several files separated by os.pathsep, several keys
  per file allowed) so a consumer that is compromised cannot forge entries. Several verify keys
  make rotation possible: trust old and new, then drop the old.

A key id (16 hex digits of a SHA-256) travels with each signature so a reader can name the key
it lacks; for HMAC it is a hash of a domain-separated key, so it reveals nothing usable.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import stat
from pathlib import Path
from typing import Any

from pcompile.errors import PcompileError
from pcompile.settings import HMAC_KEY, HMAC_KEY_FILE, SIGNING_KEY_FILE, VERIFY_KEY_FILE

log = logging.getLogger("pcompile.trust")

MIN_HMAC_BYTES = 16


def key_id(material: bytes, domain: bytes) -> str:
    return hashlib.sha256(domain + b"\0" + material).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class HmacKey:
    secret: bytes = dataclasses.field(repr=False)

    @property
    def id(self) -> str:
        return key_id(self.secret, b"pcompile-hmac-key-id")


@dataclasses.dataclass(frozen=True)
class Ed25519Public:
    key: Any  # cryptography Ed25519PublicKey

    @property
    def raw(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def id(self) -> str:
        return key_id(self.raw, b"pcompile-ed25519")


@dataclasses.dataclass(frozen=True)
class Ed25519Private:
    key: Any = dataclasses.field(repr=False)  # cryptography Ed25519PrivateKey

    @property
    def public(self) -> Ed25519Public:
        return Ed25519Public(self.key.public_key())


def _crypto() -> None:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        # Fail closed, with the fix: a missing package must never mean "run unsigned".
        raise PcompileError("ed25519 signing needs the `cryptography` package: pip install 'pcompile[sign]'") from None


def _read_secret_file(path: str, what: str) -> bytes:
    try:
        st = os.stat(path)
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise PcompileError(f"{what}={path}: cannot read it ({exc.strerror}); fix the path or its permissions") from None
    if stat.S_IMODE(st.st_mode) & 0o077:
        log.warning("%s %s is readable by group/others (mode %o); chmod 600 it", what, path, stat.S_IMODE(st.st_mode))
    return data


def load_hmac() -> HmacKey | None:
    raw: bytes | None = None
    if HMAC_KEY.get():
        raw = HMAC_KEY.get().encode()
        where = HMAC_KEY.name
    elif HMAC_KEY_FILE.get():
        where = f"{HMAC_KEY_FILE.name}={HMAC_KEY_FILE.get()}"
        raw = _read_secret_file(HMAC_KEY_FILE.get(), HMAC_KEY_FILE.name).strip()
    if raw is None:
        return None
    if len(raw) < MIN_HMAC_BYTES:
        raise PcompileError(f"{where}: the HMAC key is {len(raw)} bytes, at least {MIN_HMAC_BYTES} are needed; create one with `pcompile keygen --type hmac`")
    return HmacKey(raw)


def load_signing_key() -> Ed25519Private | None:
    path = SIGNING_KEY_FILE.get()
    if not path:
        return None
    _crypto()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read_secret_file(path, SIGNING_KEY_FILE.name)
    try:
        if data.lstrip().startswith(b"-----BEGIN OPENSSH PRIVATE KEY"):
            key = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise PcompileError(f"{SIGNING_KEY_FILE.name}={path}: not an unencrypted PEM/OpenSSH private key ({exc}); create one with `pcompile keygen`") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise PcompileError(f"{SIGNING_KEY_FILE.name}={path}: a {type(key).__name__}, pcompile signs with ed25519 keys; create one with `pcompile keygen`")
    return Ed25519Private(key)


def load_verify_keys() -> list[Ed25519Public]:
    spec = VERIFY_KEY_FILE.get()
    if not spec:
        return []
    _crypto()
    keys: list[Ed25519Public] = []
    for path in [p for p in spec.split(os.pathsep) if p.strip()]:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise PcompileError(f"{VERIFY_KEY_FILE.name}: cannot read {path} ({exc.strerror}); fix the path") from None
        found = parse_public_keys(data, path)
        if not found:
            raise PcompileError(f"{VERIFY_KEY_FILE.name}: {path} holds no ed25519 public key (PEM or OpenSSH); create one with `pcompile keygen`")
        keys.extend(found)
    return keys


def parse_public_keys(data: bytes, where: str) -> list[Ed25519Public]:
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    blocks: list[bytes] = []
    text = data.decode("ascii", errors="replace")
    marker = "-----BEGIN PUBLIC KEY-----"
    for chunk in text.split(marker)[1:]:
        blocks.append((marker + chunk.split("-----END PUBLIC KEY-----")[0] + "-----END PUBLIC KEY-----\n").encode())
    for line in text.splitlines():
        if line.strip().startswith("ssh-ed25519 "):
            blocks.append(line.strip().encode())
    out: list[Ed25519Public] = []
    for block in blocks:
        try:
            if block.startswith(b"ssh-"):
                key = serialization.load_ssh_public_key(block)
            else:
                key = serialization.load_pem_public_key(block)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise PcompileError(f"{VERIFY_KEY_FILE.name}: {where} has an unreadable public key ({exc})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise PcompileError(f"{VERIFY_KEY_FILE.name}: {where} holds a {type(key).__name__}; pcompile verifies ed25519 keys")
        out.append(Ed25519Public(key))
    return out


# -- generation (pcompile keygen) ---------------------------------------------------------------
def generate_ed25519() -> tuple[bytes, bytes]:
    """(private PEM PKCS#8, public PEM SubjectPublicKeyInfo)."""
    _crypto()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


def generate_hmac() -> bytes:
    """32 random bytes as 64 hex characters: printable, so it survives env vars and secrets."""
    return os.urandom(32).hex().encode() + b"\n"
