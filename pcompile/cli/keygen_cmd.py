"""`pcompile keygen`: create the keys that sign cache entries.

ed25519 (default): a private key for writers (CI, `pcompile warm` hosts) and a public key for
every consumer; a consumer holding only the public key cannot forge entries. hmac: one shared
secret for a single trust domain (everyone who holds it can sign).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from pcompile.cli.common import emit
from pcompile.errors import PcompileError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keygen", help="create a signing key pair (ed25519) or a shared HMAC key for signed cache entries",
                       description="Create the keys that sign cache entries: an ed25519 pair (a private key for "
                                   "writers, a public key for every reader: a reader cannot forge entries) or one "
                                   "shared HMAC secret for a single trust domain. Touches no cache dir.")
    p.add_argument("--type", choices=("ed25519", "hmac"), default="ed25519", help="key kind (default ed25519)")
    p.add_argument("--out", default=".", help="directory for the key files (default: current directory)")
    p.add_argument("--name", default="pcompile", help="file name stem (default pcompile)")
    p.add_argument("--force", action="store_true", help="overwrite existing key files")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _write(path: Path, data: bytes, mode: int, force: bool) -> None:
    """Create with the final mode from the start: a secret is never readable by others, even briefly."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError:
        raise PcompileError(f"{path} exists: pass --force to replace it (readers of the old key will refuse new entries)") from None
    except OSError as exc:
        raise PcompileError(f"cannot write {path} ({exc.strerror}): choose another --out") from None
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def run(args: argparse.Namespace) -> int:
    from pcompile.settings import HMAC_KEY_FILE, SIGNING_KEY_FILE, VERIFY_KEY_FILE
    from pcompile.trust.signing_keys import generate_ed25519, generate_hmac

    out = Path(args.out).expanduser().absolute()
    out.mkdir(parents=True, exist_ok=True)
    if args.type == "hmac":
        path = out / f"{args.name}-hmac.key"
        _write(path, generate_hmac(), 0o600, args.force)
        files = {"hmac_key": str(path)}
        text = f"wrote {path} (mode 600)\nevery writer and reader: export {HMAC_KEY_FILE.name}={path}"
    else:
        private, public = generate_ed25519()
        priv_path, pub_path = out / f"{args.name}-signing.key", out / f"{args.name}-verify.pub"
        if not args.force:
            for p in (priv_path, pub_path):
                if p.exists():
                    raise PcompileError(f"{p} exists: pass --force to replace it (readers of the old key will refuse new entries)")
        _write(priv_path, private, 0o600, args.force)
        _write(pub_path, public, 0o644, args.force)
        files = {"signing_key": str(priv_path), "verify_key": str(pub_path)}
        text = (
            f"wrote {priv_path} (private, mode 600) and {pub_path} (public)\n"
            f"writers:   export {SIGNING_KEY_FILE.name}={priv_path}\n"
            f"consumers: export {VERIFY_KEY_FILE.name}={pub_path}"
        )
    emit(args, {"type": args.type, "files": files}, text)
    return 0
