"""The cache/ deploy kit, checked where it can run here: redis-server started with the shipped
configuration and ACLs, the S3 JSON documents loaded into a real S3/IAM endpoint (moto, with IAM
enforcement on), the fstab lines parsed by findmnt, the systemd unit by systemd-analyze, the
pool start script run for real."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest_remote import (  # noqa: F401  (fixtures)
    REPO,
    MotoServer,
    RedisServer,
    make_entry,
    moto_server,
    open_store,
    remote_of,
)

CACHE = REPO / "cache"


# -- Redis -----------------------------------------------------------------------------------------
def _acl_file(tmp_path: Path, passwords: dict[str, str]) -> Path:
    text = (CACHE / "redis" / "users.acl.example").read_text()
    lines = []
    for line in text.splitlines():
        match = re.match(r"user (\S+) ", line)
        if match and match.group(1) in passwords:
            line = line.replace("#REPLACE_ME", "#" + hashlib.sha256(passwords[match.group(1)].encode()).hexdigest())
        lines.append(line)
    acl = tmp_path / "users.acl"
    acl.write_text("\n".join(lines) + "\n")
    return acl


def test_redis_placeholders_refuse_to_start(tmp_path: Path) -> None:
    """The example ACL file ships without passwords: Redis must not start from it unedited."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    from conftest_remote import free_port

    acl = tmp_path / "users.acl"
    shutil.copy(CACHE / "redis" / "users.acl.example", acl)
    proc = subprocess.run(
        ["redis-server", str(CACHE / "redis" / "pcompile-redis.conf"), "--port", str(free_port()), "--bind", "127.0.0.1",
         "--aclfile", str(acl), "--dir", str(tmp_path), "--logfile", ""],
        capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode != 0
    assert "ACL errors" in proc.stdout and "hash" in proc.stdout, proc.stdout[-500:]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_redis_config_evicts_instead_of_failing_and_separates_writers_from_readers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("redis")
    import redis

    passwords = {name: f"{name}-{os.urandom(6).hex()}" for name in ("pcompile-writer", "pcompile-reader", "pcompile-admin")}
    acl = _acl_file(tmp_path, passwords)
    server = RedisServer(
        tmp_path / "redis",
        config=CACHE / "redis" / "pcompile-redis.conf",
        args=["--aclfile", str(acl), "--maxmemory", "6mb"],  # small, to make eviction happen here
    ).start()
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            server.client().ping()  # no anonymous access
        admin = server.client(username="pcompile-admin", password=passwords["pcompile-admin"])
        config = admin.config_get("*")
        assert config["maxmemory-policy"] == "allkeys-lru"
        assert config["save"] == "" and config["appendonly"] == "no"
        assert config["lazyfree-lazy-eviction"] == "yes"

        def creds(user: str) -> dict[str, str]:
            f = tmp_path / f"{user}.pass"
            f.write_text(passwords[user])
            f.chmod(0o600)
            return {"PCOMPILE_REDIS_USERNAME": user, "PCOMPILE_REDIS_PASSWORD_FILE": str(f)}

        writer = open_store(monkeypatch, tmp_path / "w", server.url, PCOMPILE_REMOTE_QUEUE="1000", **creds("pcompile-writer"))
        entries = [make_entry("kernel", i, 250_000) for i in range(50)]  # ~12 MB into 6 MB
        for e in entries:
            writer.put(e)
        w = remote_of(writer)
        assert w.flush(60)
        assert w.counters.get("errors", 0) == 0 and w.counters.get("dropped_writes", 0) == 0
        assert w.counters["remote_writes"] == 50
        assert int(admin.info("stats")["evicted_keys"]) > 0
        writer.close()

        reader = open_store(monkeypatch, tmp_path / "r", server.url, PCOMPILE_READ_ONLY="1", **creds("pcompile-reader"))
        outcomes = [reader.get(e.key) is not None for e in entries]
        r = remote_of(reader)
        assert any(outcomes) and not all(outcomes)  # the newest survive, the oldest were evicted
        assert r.counters.get("errors", 0) == 0
        assert len(r.sample_keys(5)) >= 1 and r.usage()[0] >= 1  # INFO and RANDOMKEY are allowed
        reader.close()
        as_reader = server.client(username="pcompile-reader", password=passwords["pcompile-reader"])
        assert as_reader.exists(f"pcompile:v1:m:{entries[-1].key}") == 1
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_reader.set(f"pcompile:v1:m:{entries[0].key}", b"{}")
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_reader.delete(f"pcompile:v1:m:{entries[-1].key}")
        as_writer = server.client(username="pcompile-writer", password=passwords["pcompile-writer"])
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_writer.set("someone-else:key", b"x")  # only pcompile:* keys
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_writer.flushall()
    finally:
        server.stop()


# -- S3 --------------------------------------------------------------------------------------------
def _doc(name: str, bucket: str) -> str:
    return (CACHE / "s3" / name).read_text().replace("BUCKET", bucket)


def test_s3_documents_parse_and_agree_with_the_code() -> None:
    from pcompile.settings import S3_REFRESH_DAYS

    docs = {p.name: json.loads(p.read_text()) for p in (CACHE / "s3").glob("*.json")}
    assert set(docs) == {"lifecycle.json", "iam-writer-policy.json", "iam-reader-policy.json", "bucket-policy.json"}
    rules = {r["ID"]: r for r in docs["lifecycle.json"]["Rules"]}
    manifests = next(r for r in rules.values() if r["Filter"]["Prefix"].endswith("/v1/manifests/"))
    blobs = next(r for r in rules.values() if r["Filter"]["Prefix"].endswith("/v1/blobs/"))
    refresh = S3_REFRESH_DAYS.get()
    assert blobs["Expiration"]["Days"] - manifests["Expiration"]["Days"] >= refresh, "a blob must outlive the manifests naming it"
    reader_actions = {a for s in docs["iam-reader-policy.json"]["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert reader_actions == {"s3:GetObject", "s3:ListBucket"}, "readers get no write of any kind"


def test_s3_lifecycle_and_policies_are_accepted_and_enforced(moto_server: MotoServer) -> None:
    import boto3
    from botocore.exceptions import ClientError

    bucket = moto_server.make_bucket("pcompile-deploy")
    s3, iam = moto_server.client(), moto_server.client("iam")
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=json.loads(_doc("lifecycle.json", bucket)))
    assert len(s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]) == 3
    s3.put_bucket_policy(Bucket=bucket, Policy=_doc("bucket-policy.json", bucket))
    with pytest.raises(ClientError, match="403|AccessDenied|Forbidden"):
        s3.put_object(Bucket=bucket, Key="pcompile/v1/blobs/existing", Body=b"abc")  # plain HTTP: refused
    s3.delete_bucket_policy(Bucket=bucket)  # the loopback endpoint has no TLS
    s3.put_object(Bucket=bucket, Key="pcompile/v1/blobs/existing", Body=b"abc")
    s3.put_object(Bucket=bucket, Key="elsewhere/secret", Body=b"abc")
    clients = {}
    for role in ("reader", "writer"):
        arn = iam.create_policy(PolicyName=f"pcompile-{role}", PolicyDocument=_doc(f"iam-{role}-policy.json", bucket))["Policy"]["Arn"]
        iam.create_user(UserName=role)
        iam.attach_user_policy(UserName=role, PolicyArn=arn)
        key = iam.create_access_key(UserName=role)["AccessKey"]
        clients[role] = boto3.session.Session(
            aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], region_name="us-east-1"
        ).client("s3", endpoint_url=moto_server.endpoint)
    # from here on moto evaluates IAM policies for every request
    req = urllib.request.Request(moto_server.endpoint + "/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"})
    urllib.request.urlopen(req, timeout=10).read()

    def code(fn) -> str:
        try:
            fn()
            return "ok"
        except ClientError as exc:
            return str(exc.response["Error"]["Code"])

    for role, c in clients.items():
        assert code(lambda: c.get_object(Bucket=bucket, Key="pcompile/v1/blobs/existing")) == "ok"
        assert code(lambda: c.head_object(Bucket=bucket, Key="pcompile/v1/blobs/missing")) == "404"  # a miss, not a 403
        assert code(lambda: c.get_object(Bucket=bucket, Key="elsewhere/secret")) == "AccessDenied"
    reader, writer = clients["reader"], clients["writer"]
    assert code(lambda: reader.put_object(Bucket=bucket, Key="pcompile/v1/blobs/new", Body=b"x")) == "AccessDenied"
    assert code(lambda: reader.delete_object(Bucket=bucket, Key="pcompile/v1/blobs/existing")) == "AccessDenied"
    assert code(lambda: reader.create_multipart_upload(Bucket=bucket, Key="pcompile/v1/blobs/big")) == "AccessDenied"
    assert code(lambda: writer.put_object(Bucket=bucket, Key="pcompile/v1/blobs/new", Body=b"x")) == "ok"
    assert code(lambda: writer.put_object(Bucket=bucket, Key="elsewhere/new", Body=b"x")) == "AccessDenied"
    upload = writer.create_multipart_upload(Bucket=bucket, Key="pcompile/v1/blobs/big")["UploadId"]
    assert code(lambda: writer.abort_multipart_upload(Bucket=bucket, Key="pcompile/v1/blobs/big", UploadId=upload)) == "ok"
    assert code(lambda: writer.delete_object(Bucket=bucket, Key="pcompile/v1/blobs/new")) == "ok"
    # (ListBucket under enforced auth is not checked: moto's server mis-signs list requests.)


# -- shared filesystem -------------------------------------------------------------------------------
def _fstab_lines() -> list[str]:
    lines = []
    for raw in (CACHE / "shared-fs" / "fstab.example").read_text().splitlines():
        line = raw.lstrip("# ").rstrip()
        if len(line.split()) == 6 and ":" in line.split()[0]:
            lines.append(line)
    return lines


def test_fstab_lines_parse_and_set_the_options_that_matter(tmp_path: Path) -> None:
    lines = _fstab_lines()
    assert len(lines) == 3
    for line in lines:
        source, target, fstype, options, dump, passno = line.split()
        opts = dict(o.split("=", 1) if "=" in o else (o, "") for o in options.split(","))
        assert "_netdev" in opts and "nofail" in opts
        if fstype.startswith("nfs"):
            assert opts.get("lookupcache") == "positive"
            assert "hard" in opts and "soft" not in opts
            assert "nocto" not in opts and "noac" not in opts
            assert 0 < int(opts["actimeo"]) <= 10
            assert opts.get("local_lock", "none") == "none"
    if shutil.which("findmnt") is None:
        pytest.skip("findmnt is not installed")
    tab = tmp_path / "fstab"
    tab.write_text("\n".join(lines) + "\n")
    proc = subprocess.run(["findmnt", "--verify", "--tab-file", str(tab)], capture_output=True, text=True, timeout=30)
    assert "0 parse errors" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


# -- node pool ----------------------------------------------------------------------------------------
def test_systemd_unit_verifies(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not available")
    text = (CACHE / "pool" / "pcompile-pool@.service").read_text()
    assert "ExecStart=/usr/local/libexec/pcompile-pool-start" in text
    unit = tmp_path / f"pcompile-pool@{os.environ.get('USER', 'root') or 'root'}.service"
    # verify resolves ExecStart on this machine: point it at the script in the repo
    unit.write_text(text.replace("/usr/local/libexec/pcompile-pool-start", str(CACHE / "pool" / "pcompile-pool-start")))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Unknown" not in proc.stderr and "ignoring" not in proc.stderr, proc.stderr


def test_container_recipes_are_well_formed() -> None:
    yaml = pytest.importorskip("yaml")
    pod = yaml.safe_load((CACHE / "pool" / "k8s-sidecar.yaml").read_text())
    sidecar = pod["spec"]["initContainers"][0]
    train = pod["spec"]["containers"][0]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == train["image"], "the pool must run the job's own environment"
    env = lambda c: {e["name"]: e.get("value") for e in c["env"]}  # noqa: E731
    assert env(sidecar)["PCOMPILE_CACHE_DIR"] == env(train)["PCOMPILE_CACHE_DIR"]
    mounts = lambda c: {m["name"]: m["mountPath"] for m in c["volumeMounts"]}  # noqa: E731
    assert mounts(sidecar)["pcompile-cache"] == mounts(train)["pcompile-cache"] == env(train)["PCOMPILE_CACHE_DIR"]
    known = {"FROM", "ARG", "RUN", "COPY", "ENV", "USER", "CMD", "WORKDIR", "LABEL", "ENTRYPOINT"}
    for line in (CACHE / "pool" / "Containerfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert line.split()[0] in known, line
            if line.startswith("COPY"):
                assert (REPO / line.split()[1]).exists(), line


def test_pool_start_script_starts_the_daemon(tmp_path: Path) -> None:
    pytest.importorskip("pcompile.pool.daemon")
    script = CACHE / "pool" / "pcompile-pool-start"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["sh", "-n", str(script)], timeout=10).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("PCOMPILE_")}
    env.update(PCOMPILE_CACHE_DIR=str(tmp_path / "c"), PCOMPILE_PYTHON=sys.executable, PCOMPILE_POOL_WORKERS="1", PYTHONPATH=str(REPO))
    ident = subprocess.run(
        [sys.executable, "-c", "from pcompile.pool.paths import PoolPaths; print(PoolPaths.for_cache_dir(%r).socket)" % str(tmp_path / "c")],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()
    proc = subprocess.Popen([str(script)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60
        while not Path(ident).exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < end, "the daemon's socket did not appear where clients look for it"
            time.sleep(0.1)
        import socket

        with socket.socket(socket.AF_UNIX) as s:
            s.connect(ident)  # a client of the same environment finds it
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            rc = None
    assert rc == 0, "SIGTERM must stop the daemon cleanly (it was killed after 30 s, or failed)"
    assert not Path(ident).exists(), "the stopped daemon left its socket behind"
