"""S3 (and MinIO, Ceph RGW, moto...) as a remote backend (remote.RemoteTier wraps it).

Object layout (cache/REMOTE.md is the spec; PREFIX from s3://BUCKET/PREFIX):
  PREFIX/v1/manifests/<key>.json    manifest JSON
  PREFIX/v1/blobs/<sha256>          blob bytes

S3 PUTs are atomic and reads after writes are strongly consistent, so no chunk heads are needed:
blobs up to one part are a single PUT; larger ones a multipart upload (which S3 makes visible
all at once on completion) and ranged GETs. Each round trip then moves at most one part (8 MiB)
and fits a per-call deadline. The manifest is PUT after every blob, so it is visible only when
all its blobs are.

GC is the bucket's lifecycle rule (cache/s3/lifecycle.json): S3 expires objects by age, not by
access, so `has_blob` reports a blob older than PCOMPILE_S3_REFRESH_DAYS (default 7) as absent and
the writer re-uploads it, restarting its clock. With blobs expiring that many days after
manifests, a blob always outlives every manifest that names it.

Endpoint: PCOMPILE_S3_ENDPOINT_URL (MinIO/Ceph/moto; path-style addressing is used then);
region: PCOMPILE_S3_REGION or the usual AWS variables; credentials: boto3's usual chain.
"""
from __future__ import annotations

import datetime
import os
import random
import threading
import urllib.parse
from typing import Any, Iterator

from pcompile.errors import PcompileError
from pcompile.keys.key import LAYERS, Key
from pcompile.settings import S3_ENDPOINT_URL, S3_REFRESH_DAYS, S3_REGION
from pcompile.store.backend import RemoteBackend

PART_BYTES = 8 << 20  # >= S3's 5 MiB multipart minimum
_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3Backend(RemoteBackend):
    name = "s3"

    def __init__(self, bucket: str, prefix: str, *, timeout: float, endpoint_url: str | None = None, region: str | None = None) -> None:
        super().__init__()
        self.bucket = bucket
        self.prefix = (prefix.strip("/") + "/" if prefix.strip("/") else "") + "v1/"
        self.timeout = timeout
        self.endpoint_url = endpoint_url
        self.region = region
        self.refresh_days = S3_REFRESH_DAYS.get()
        self._client: Any = None
        self._client_pid = -1
        self._lock = threading.Lock()

    @staticmethod
    def from_url(url: str, *, timeout: float) -> "S3Backend":
        try:
            import boto3  # noqa: F401
        except ImportError:
            raise PcompileError("PCOMPILE_REMOTE is an s3:// URL but boto3 is missing: pip install 'pcompile[s3]'") from None
        parts = urllib.parse.urlsplit(url)
        if not parts.netloc:
            raise PcompileError(f"PCOMPILE_REMOTE={url!r} names no bucket: use s3://BUCKET/PREFIX")
        return S3Backend(
            parts.netloc,
            parts.path,
            timeout=timeout,
            endpoint_url=S3_ENDPOINT_URL.get(),
            region=S3_REGION.get() or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None,
        )

    def location(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}"
        return f"{where} via {self.endpoint_url}" if self.endpoint_url else where

    @property
    def client(self) -> Any:
        """One boto3 client per process (clients are thread-safe but not fork-safe).

        Built outside the per-call deadline: loading botocore's models takes a while on a busy
        host and is not a remote failure."""
        if self._client is None or self._client_pid != os.getpid():
            with self._lock:
                if self._client is None or self._client_pid != os.getpid():
                    import boto3
                    from botocore.config import Config

                    config = Config(
                        connect_timeout=self.timeout,
                        read_timeout=self.timeout,
                        retries={"total_max_attempts": 1, "mode": "standard"},
                        s3={"addressing_style": "path" if self.endpoint_url else "auto"},
                        signature_version="s3v4",
                    )
                    session = boto3.session.Session()
                    self._client = session.client("s3", endpoint_url=self.endpoint_url, region_name=self.region or "us-east-1", config=config)
                    self._client_pid = os.getpid()
        return self._client

    def is_timeout(self, exc: BaseException) -> bool:
        from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

        return isinstance(exc, (TimeoutError, ConnectTimeoutError, ReadTimeoutError))

    # -- names ------------------------------------------------------------------------------
    def _m(self, key: Key) -> str:
        return f"{self.prefix}manifests/{key}.json"

    def _b(self, sha256: str) -> str:
        return f"{self.prefix}blobs/{sha256}"

    # -- helpers ----------------------------------------------------------------------------
    def _get(self, name: str, start: int | None = None, end: int | None = None) -> tuple[bytes, int] | None:
        """(bytes, total size) of the object or a byte range of it; None if absent."""
        from botocore.exceptions import ClientError

        client = self.client

        def call() -> tuple[bytes, int] | None:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": name}
            if start is not None:
                kwargs["Range"] = f"bytes={start}-{end}"
            try:
                resp = client.get_object(**kwargs)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code in _MISSING:
                    return None
                if code == "InvalidRange":  # an empty object has no byte 0
                    return b"", 0
                raise
            body = resp["Body"].read()
            total = len(body)
            rng = resp.get("ContentRange")
            if rng and "/" in rng:
                total = int(rng.rsplit("/", 1)[1])
            return body, total

        return self.io(call, nbytes=PART_BYTES if start is not None else 0)

    def _put(self, name: str, data: bytes) -> None:
        client = self.client
        self.io(lambda: client.put_object(Bucket=self.bucket, Key=name, Body=data), nbytes=len(data))

    # -- primitives -------------------------------------------------------------------------
    def read_manifest(self, key: Key) -> bytes | None:
        got = self._get(self._m(key))
        return None if got is None else got[0]

    def read_blob(self, sha256: str) -> bytes | None:
        name = self._b(sha256)
        got = self._get(name, 0, PART_BYTES - 1)
        if got is None:
            return None
        first, total = got
        parts = [first]
        offset = len(first)
        while offset < total:
            more = self._get(name, offset, min(total, offset + PART_BYTES) - 1)
            if more is None or not more[0]:
                return None  # expired or replaced mid-read: a miss
            parts.append(more[0])
            offset += len(more[0])
        return b"".join(parts)

    def has_blob(self, sha256: str, size: int) -> bool:
        from botocore.exceptions import ClientError

        client = self.client
        name = self._b(sha256)

        def call() -> dict[str, Any] | None:
            try:
                return client.head_object(Bucket=self.bucket, Key=name)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in _MISSING:
                    return None
                raise

        head = self.io(call)
        if head is None or int(head.get("ContentLength", -1)) != size:
            return False
        modified = head.get("LastModified")
        if isinstance(modified, datetime.datetime) and self.refresh_days > 0:
            age = datetime.datetime.now(datetime.timezone.utc) - modified.astimezone(datetime.timezone.utc)
            if age.total_seconds() > self.refresh_days * 86400:
                return False  # re-upload: restarts its lifecycle clock
        return True

    def write_blob(self, sha256: str, data: bytes) -> None:
        name = self._b(sha256)
        if len(data) <= PART_BYTES:
            self._put(name, data)
            return
        client = self.client
        upload = self.io(lambda: client.create_multipart_upload(Bucket=self.bucket, Key=name))["UploadId"]
        try:
            done = []
            view = memoryview(data)
            for number, start in enumerate(range(0, len(data), PART_BYTES), start=1):
                body = bytes(view[start : start + PART_BYTES])
                resp = self.io(
                    lambda b=body, n=number: client.upload_part(Bucket=self.bucket, Key=name, UploadId=upload, PartNumber=n, Body=b),
                    nbytes=len(body),
                )
                done.append({"ETag": resp["ETag"], "PartNumber": number})
            self.io(
                lambda: client.complete_multipart_upload(
                    Bucket=self.bucket, Key=name, UploadId=upload, MultipartUpload={"Parts": done}
                )
            )
        except BaseException:
            try:  # best effort; the lifecycle rule aborts leftovers after a day anyway
                client.abort_multipart_upload(Bucket=self.bucket, Key=name, UploadId=upload)
            except Exception:
                pass
            raise

    def write_manifest(self, key: Key, data: bytes) -> None:
        self._put(self._m(key), data)

    def remove(self, key: Key) -> None:
        client = self.client
        self.io(lambda: client.delete_object(Bucket=self.bucket, Key=self._m(key)))

    def quarantine(self, key: Key, reason: str, bad_blob: str | None = None) -> None:
        self.remove(key)
        if bad_blob:
            client = self.client
            self.io(lambda: client.delete_object(Bucket=self.bucket, Key=self._b(bad_blob)))

    # -- listing ----------------------------------------------------------------------------
    def _list(self, start_after: str | None, limit: int | None, token: str | None = None) -> dict[str, Any]:
        client = self.client
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": f"{self.prefix}manifests/"}
        if start_after:
            kwargs["StartAfter"] = start_after
        if limit:
            kwargs["MaxKeys"] = limit
        if token:
            kwargs["ContinuationToken"] = token
        return self.io(lambda: client.list_objects_v2(**kwargs))

    def _key_of(self, name: str) -> Key | None:
        head = f"{self.prefix}manifests/"
        if not (name.startswith(head) and name.endswith(".json")):
            return None
        try:
            return Key.parse(name[len(head) : -len(".json")])
        except PcompileError:
            return None

    def keys(self) -> Iterator[Key]:
        token: str | None = None
        while True:
            resp = self._list(None, None, token)
            for obj in resp.get("Contents", []) or []:
                key = self._key_of(obj["Key"])
                if key is not None:
                    yield key
            if not resp.get("IsTruncated"):
                return
            token = resp.get("NextContinuationToken")

    def sample_keys(self, n: int) -> list[Key]:
        """About n random manifest keys: short listings starting after random points of the
        keyspace (keys are uniform hashes, so each probe lands anywhere), plus a wrap-around."""
        found: dict[str, Key] = {}
        probes = 0
        while len(found) < n and probes < max(8, 4 * n):
            probes += 1
            point = f"{self.prefix}manifests/{random.choice(LAYERS)}-{random.getrandbits(128):032x}"
            resp = self._list(point, min(8, n - len(found)) or 1)
            for obj in resp.get("Contents", []) or []:
                key = self._key_of(obj["Key"])
                if key is not None:
                    found.setdefault(str(key), key)
            if probes == 1 and not resp.get("Contents"):
                first = self._list(None, n)  # the random point was past the last key
                if not first.get("Contents"):
                    break  # empty
                for obj in first["Contents"]:
                    key = self._key_of(obj["Key"])
                    if key is not None:
                        found.setdefault(str(key), key)
        return list(found.values())[:n]

    def usage(self) -> tuple[int, int]:
        entries = total = 0
        token: str | None = None
        client = self.client
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix}
            if token:
                kwargs["ContinuationToken"] = token
            resp = self.io(lambda kw=kwargs: client.list_objects_v2(**kw))
            for obj in resp.get("Contents", []) or []:
                total += int(obj.get("Size", 0))
                if obj["Key"].startswith(f"{self.prefix}manifests/"):
                    entries += 1
            if not resp.get("IsTruncated"):
                return entries, total
            token = resp.get("NextContinuationToken")
