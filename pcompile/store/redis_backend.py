"""Redis as a remote backend (remote.RemoteTier wraps it): string keys, big blobs in chunks.

Key layout (cache/REMOTE.md is the spec; PREFIX defaults to "pcompile:v1:"):
  PREFIX m:<key>          manifest JSON
  PREFIX b:<sha256>       blob head: 0x00 + the bytes, or 0x01 + {"size","chunks","chunk"} (JSON)
  PREFIX c:<sha256>:<i>   chunk i of a chunked blob (at most `chunk_bytes` each)

Why chunks: one multi-hundred-MiB value blocks Redis's single thread for its whole transfer and
defeats a per-round-trip deadline; 4 MiB chunks keep each round trip short. A chunked blob is
visible only once its head is written, and the head only after every chunk succeeded, so a
reader sees the whole blob or nothing. Eviction (allkeys-lru) may drop any key at any time: a
missing chunk reads as a missing blob, i.e. a miss, and `has_blob` checks every chunk so the next
publish rewrites what was evicted.

Auth: in the URL (redis://USER:PASS@host:port/db) or, to keep secrets out of the environment
that children inherit and logs print, PCOMPILE_REDIS_USERNAME and PCOMPILE_REDIS_PASSWORD /
PCOMPILE_REDIS_PASSWORD_FILE. rediss:// is TLS. `?prefix=NAME:` picks the key namespace.
"""
from __future__ import annotations

import json
import random
import urllib.parse
from typing import Any, Iterator

from pcompile.errors import PcompileError
from pcompile.keys.key import Key
from pcompile.settings import REDIS_CHUNK_BYTES, REDIS_PASSWORD, REDIS_PASSWORD_FILE, REDIS_USERNAME
from pcompile.store.backend import RemoteBackend, redact

DEFAULT_PREFIX = "pcompile:v1:"
DEFAULT_CHUNK: int = REDIS_CHUNK_BYTES.default

_INLINE = b"\x00"
_CHUNKED = b"\x01"


class RedisBackend(RemoteBackend):
    name = "redis"

    def __init__(self, client: Any, url: str, *, prefix: str = DEFAULT_PREFIX, chunk_bytes: int = DEFAULT_CHUNK) -> None:
        super().__init__()
        self.client = client
        self.url = url
        self.prefix = prefix
        self.chunk_bytes = max(1024, int(chunk_bytes))

    @staticmethod
    def from_url(url: str, *, timeout: float) -> "RedisBackend":
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise PcompileError("PCOMPILE_REMOTE is a redis:// URL but redis-py is missing: pip install 'pcompile[redis]'") from None
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qs(parts.query)
        prefix = (query.pop("prefix", [DEFAULT_PREFIX]) or [DEFAULT_PREFIX])[0]
        clean = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query, doseq=True)))
        kwargs: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry_on_timeout": False,
            # The breaker decides about retries, not the client, with one exception: a connection
            # error is retried once on a fresh connection. After a server restart every pooled
            # connection is dead (ECONNRESET on first use); counted as failures, a few threads'
            # stale connections tripped the breaker on a healthy server. Timeouts are never retried.
            "retry": Retry(NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,)),
            "health_check_interval": 0,
            "decode_responses": False,
        }
        if parts.username is None and REDIS_USERNAME.get():
            kwargs["username"] = REDIS_USERNAME.get()
        if parts.password is None:
            password = _password_from_env()
            if password is not None:
                kwargs["password"] = password
        try:
            client = redis.Redis.from_url(clean, **kwargs)
        except ValueError as exc:
            raise PcompileError(f"PCOMPILE_REMOTE={redact(url)!r}: {exc}; use redis://[USER:PASS@]HOST:PORT/DB") from None
        chunk = REDIS_CHUNK_BYTES.get()
        return RedisBackend(client, url, prefix=prefix, chunk_bytes=chunk)

    def location(self) -> str:
        return redact(self.url)

    def is_timeout(self, exc: BaseException) -> bool:
        import redis

        return isinstance(exc, (TimeoutError, redis.exceptions.TimeoutError))

    # -- names ------------------------------------------------------------------------------
    def _m(self, key: Key) -> str:
        return f"{self.prefix}m:{key}"

    def _b(self, sha256: str) -> str:
        return f"{self.prefix}b:{sha256}"

    def _c(self, sha256: str, index: int) -> str:
        return f"{self.prefix}c:{sha256}:{index}"

    # -- primitives -------------------------------------------------------------------------
    def read_manifest(self, key: Key) -> bytes | None:
        return self.io(self.client.get, self._m(key))

    def read_blob(self, sha256: str) -> bytes | None:
        head = self.io(self.client.get, self._b(sha256), nbytes=self.chunk_bytes)
        if not head:
            return None
        tag, body = head[:1], head[1:]
        if tag == _INLINE:
            return bytes(body)
        if tag != _CHUNKED:
            return None
        info = _parse_head(body)
        if info is None:
            return None
        parts = []
        for index in range(info["chunks"]):
            part = self.io(self.client.get, self._c(sha256, index), nbytes=info["chunk"])
            if part is None:
                return None  # evicted: a miss, and has_blob will say so to the next writer
            parts.append(part)
        data = b"".join(parts)
        return data if len(data) == info["size"] else None

    def has_blob(self, sha256: str, size: int) -> bool:
        length = self.io(self.client.strlen, self._b(sha256))
        if length == size + 1:
            return True  # inline, right size (a chunked head is tiny and never this long)
        if length == 0:
            return False
        head = self.io(self.client.get, self._b(sha256))
        info = _parse_head(head[1:]) if head and head[:1] == _CHUNKED else None
        if info is None or info["size"] != size:
            return False
        names = [self._c(sha256, i) for i in range(info["chunks"])]
        present = 0
        for start in range(0, len(names), 512):
            present += self.io(self.client.exists, *names[start : start + 512])
        return present == len(names)

    def write_blob(self, sha256: str, data: bytes) -> None:
        if len(data) <= self.chunk_bytes:
            self.io(self.client.set, self._b(sha256), _INLINE + data, nbytes=len(data))
            return
        view = memoryview(data)
        chunks = (len(data) + self.chunk_bytes - 1) // self.chunk_bytes
        for index in range(chunks):
            part = bytes(view[index * self.chunk_bytes : (index + 1) * self.chunk_bytes])
            self.io(self.client.set, self._c(sha256, index), part, nbytes=len(part))
        head = json.dumps({"size": len(data), "chunks": chunks, "chunk": self.chunk_bytes}, sort_keys=True).encode()
        self.io(self.client.set, self._b(sha256), _CHUNKED + head)  # last: the blob now exists

    def write_manifest(self, key: Key, data: bytes) -> None:
        self.io(self.client.set, self._m(key), data)

    def remove(self, key: Key) -> None:
        self.io(self.client.delete, self._m(key))

    def quarantine(self, key: Key, reason: str, bad_blob: str | None = None) -> None:
        """Delete the manifest, and a blob that failed its hash (else `has_blob` would keep it)."""
        names = [self._m(key)]
        if bad_blob:
            names.append(self._b(bad_blob))
        self.io(self.client.delete, *names)

    # -- listing ----------------------------------------------------------------------------
    def keys(self) -> Iterator[Key]:
        """Every manifest key, by SCAN (O(all keys) round trips of 1000; for `verify --all`)."""
        cursor = 0
        pattern = f"{self.prefix}m:*"
        seen: set[str] = set()
        while True:
            cursor, batch = self.io(self.client.scan, cursor, pattern, 1000)
            for raw in batch:
                key = self._parse_manifest_name(raw)
                if key is not None and str(key) not in seen:
                    seen.add(str(key))
                    yield key
            if int(cursor) == 0:
                return

    def sample_keys(self, n: int) -> list[Key]:
        """About n manifest keys chosen at random: RANDOMKEY in pipelined batches, keeping those
        that name manifests (blobs and chunks are the rest). Falls back to SCAN order when
        manifests are too rare among the keys for random probing to find them."""
        found: dict[str, Key] = {}
        tries = 0
        budget = max(256, 40 * n)
        while len(found) < n and tries < budget:
            batch = min(512, budget - tries)
            pipe = self.client.pipeline(transaction=False)
            for _ in range(batch):
                pipe.randomkey()
            results = self.io(pipe.execute)
            tries += batch
            if not any(results):
                break  # empty database
            for raw in results:
                key = self._parse_manifest_name(raw) if raw else None
                if key is not None:
                    found.setdefault(str(key), key)
        if len(found) < n:
            for key in self.keys():
                found.setdefault(str(key), key)
                if len(found) >= n:
                    break
        keys = list(found.values())
        random.shuffle(keys)
        return keys[:n]

    def _parse_manifest_name(self, raw: bytes | str) -> Key | None:
        name = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        head = f"{self.prefix}m:"
        if not name.startswith(head):
            return None
        try:
            return Key.parse(name[len(head) :])
        except PcompileError:
            return None

    def usage(self) -> tuple[int, int]:
        """(manifests under our prefix, server used_memory): Redis cannot size a prefix cheaply."""
        entries = sum(1 for _ in self.keys())
        info = self.io(self.client.info, "memory")
        return entries, int(info.get("used_memory", 0))


def _parse_head(body: bytes) -> dict[str, int] | None:
    try:
        info = json.loads(body)
        if all(isinstance(info.get(k), int) and info[k] >= 0 for k in ("size", "chunks", "chunk")):
            return info
    except (ValueError, AttributeError):
        pass
    return None


def _password_from_env() -> str | None:
    if REDIS_PASSWORD.get():
        return REDIS_PASSWORD.get()
    path = REDIS_PASSWORD_FILE.get()
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise PcompileError(f"{REDIS_PASSWORD_FILE.name}={path}: cannot read it ({exc.strerror}); fix the path or its permissions") from None
    return None
