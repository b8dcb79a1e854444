"""The S3 tier against a real S3-protocol server on loopback (moto's server mode stands in for S3,
MinIO or Ceph): sharing between processes, multipart blobs, the server dying mid-run."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest_remote import (  # noqa: F401  (fixtures)
    MotoServer,
    job_env,
    make_entry,
    moto_server,
    open_store,
    parse_summary,
    remote_of,
    run_worker,
    start_worker,
    warnings_in,
)
from pcompile.store.fs_tier import DirectoryTier

pytest.importorskip("boto3")


def _env(server: MotoServer, cache: Path, bucket: str, **extra: str) -> dict[str, str]:
    return job_env(cache, f"s3://{bucket}/team/cache", PCOMPILE_S3_ENDPOINT_URL=server.endpoint, **extra)


def test_process_b_hits_what_process_a_compiled(moto_server: MotoServer, tmp_path: Path) -> None:
    bucket = moto_server.make_bucket()
    sizes = [2000, 9 * 1024 * 1024, 10]  # 9 MiB: a multipart upload, read back in ranges
    a, err_a = run_worker(_env(moto_server, tmp_path / "a", bucket), count=3, sizes=sizes)
    assert a["outcomes"] == ["compiled"] * 3 and a["flushed"] is True
    assert a["remote"]["remote_writes"] == 3
    assert not warnings_in(err_a), err_a
    listed = moto_server.client().list_objects_v2(Bucket=bucket)["Contents"]
    names = [o["Key"] for o in listed]
    assert sum(n.startswith("team/cache/v1/manifests/") for n in names) == 3
    assert max(o["Size"] for o in listed) > 9 * 1024 * 1024

    b, err_b = run_worker(_env(moto_server, tmp_path / "b", bucket), count=3, sizes=sizes)
    assert b["outcomes"] == ["hit"] * 3 and b["computed"] == 0 and b["loaded"] == 3
    assert not warnings_in(err_b), err_b


def test_s3_killed_mid_run_job_finishes_warns_once(moto_server: MotoServer, tmp_path: Path) -> None:
    bucket = moto_server.make_bucket()
    env = _env(moto_server, tmp_path / "a", bucket, PCOMPILE_REMOTE_TIMEOUT="1")
    count = 24
    proc = start_worker(env, count=count, sizes=[3000, 100_000], compile_seconds=0.05)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if len(lines) == 6:
            moto_server.kill()
            break
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    summary = parse_summary("".join(lines) + rest)
    assert summary["outcomes"] == ["compiled"] * count and summary["loaded"] == count
    assert summary["elapsed"] < count * 0.05 + 15
    warned = warnings_in(err)
    assert len(warned) == 1 and "s3" in warned[0], err
    local = DirectoryTier(tmp_path / "a" / "store", "local", create=False)
    assert len(list(local.keys())) == count
    assert all(local.verify(k) is None for k in local.keys())


def test_s3_sampling_listing_usage_and_refresh(moto_server: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = moto_server.make_bucket()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    store = open_store(monkeypatch, tmp_path / "a", f"s3://{bucket}/p", PCOMPILE_S3_ENDPOINT_URL=moto_server.endpoint)
    entries = [make_entry("graph", i, 100) for i in range(40)]
    for e in entries:
        store.put(e)
    remote = remote_of(store)
    assert remote.flush(60)
    every = {str(k) for k in remote.keys()}
    assert every == {str(e.key) for e in entries}
    sample = remote.sample_keys(10)
    assert len(sample) == 10 and {str(k) for k in sample} <= every
    n, size = remote.usage()
    assert n == 40 and size > 40 * 100
    assert all(remote.verify(e.key) is None for e in entries[:5])
    # a blob older than PCOMPILE_S3_REFRESH_DAYS reads as absent, so a writer re-uploads it and
    # restarts its lifecycle clock
    from pcompile.store.entry import Manifest

    info = Manifest.for_entry(entries[0]).blobs["payload.pkl"]
    assert remote.has_blob(info["sha256"], info["size"]) is True
    remote.backend.refresh_days = 1e-9
    time.sleep(0.01)
    assert remote.has_blob(info["sha256"], info["size"]) is False
    store.close()


def test_s3_missing_bucket_is_one_warning_not_a_failure(moto_server: MotoServer, tmp_path: Path) -> None:
    env = _env(moto_server, tmp_path / "a", "no-such-bucket")
    summary, err = run_worker(env, count=5)
    assert summary["outcomes"] == ["compiled"] * 5
    warned = warnings_in(err)
    assert len(warned) == 1 and "NoSuchBucket" in warned[0], err
