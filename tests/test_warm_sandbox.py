"""`pcompile warm` never changes the user's files and shows the script what a real run would
(issue 25, file-system classes 1-5), in every file-sandbox mode this host offers: the kernel's
overlay in a mount namespace (root), in a user namespace (any user), and the Python fallback.

One plain script (tests/data/warm_scripts/file_classes.py) exercises all five classes and
reports what it saw; it is warmed unchanged twice per mode from a job directory in $HOME
(outside the temp dirs, which the fallback passes through). Each class has its own assertion.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from test_warm import ROOT, STOCK, warm  # noqa: E402  (same directory)

from pcompile.warm import isolation

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device and namespaces are Linux-only")
SCRIPT = ROOT / "tests" / "data" / "warm_scripts" / "file_classes.py"


def _available(mode: str, tmp: Path) -> str | None:
    if mode == "python":
        return None
    from pcompile.warm import isolation, sandbox

    why = sandbox.probe(mode, tmp)
    isolation.remove_tree(tmp / ".probe")
    return why


def tree(root: Path) -> dict[str, str]:
    """Every path under root with its type, mode and content digest."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = f"link {os.readlink(p)}"
            elif p.is_dir():
                out[rel] = f"dir {oct(st.st_mode)}"
            else:
                out[rel] = f"file {oct(st.st_mode)} {hashlib.sha256(p.read_bytes()).hexdigest()}"
    return out


@pytest.fixture(scope="module", params=["namespace", "userns", "python"])
def warmed(request, tmp_path_factory):
    mode = request.param
    tmp = tmp_path_factory.mktemp(f"sandbox-{mode}")
    why = _available(mode, tmp)
    if why:
        pytest.skip(f"{mode} sandbox not available here: {why}")
    job = Path.home() / f".pcompile-test-job-{uuid.uuid4().hex[:8]}"  # outside the temp dirs
    try:
        (job / "data").mkdir(parents=True)
        (job / "logs").mkdir()
        (job / "data" / "a.txt").write_text("a")
        (job / "data" / "old.txt").write_text("old")
        (job / "data" / "data.lock").write_text("")
        (job / "logs" / "train.log").write_text("the user's log\n")
        shutil.copy(SCRIPT, job / "train.py")
        before = tree(job)
        env = dict(STOCK, PCOMPILE_WARM_SANDBOX=mode)
        cache = tmp / "cache"
        first = warm(job / "train.py", cache, env=env, cwd=job)
        after_first = tree(job)
        second = warm(job / "train.py", cache, env=env, cwd=job)
        yield {"mode": mode, "before": before, "after": [after_first, tree(job)], "runs": [first, second]}
    finally:
        shutil.rmtree(job, ignore_errors=True)


def _seen(run: tuple[int, dict, str]) -> dict:
    rc, res, log = run
    assert rc == 0, log[-4000:]
    lines = [ln for ln in log.splitlines() if ln.startswith("SEEN ")]
    assert lines, log[-4000:]
    return json.loads(lines[-1][5:])


def test_user_tree_unchanged_byte_for_byte(warmed):
    for run in warmed["runs"]:
        _seen(run)  # each warm succeeded and its script ran to its last line (it writes, renames, deletes)
    assert warmed["after"][0] == warmed["before"]
    assert warmed["after"][1] == warmed["before"]


def test_compiles_then_second_warm_compiles_nothing(warmed):
    (_, first, log1), (_, second, log2) = warmed["runs"]
    mode = warmed["mode"]
    assert first["report"]["sandbox"]["mode"] == mode, log1[-2000:]
    assert any(f"file sandbox: {'Python redirect' if mode == 'python' else mode}" in ln for ln in first["lines"])
    c1, c2 = first["report"]["counters"], second["report"]["counters"]
    assert c1["inductor"]["fxgraph_cache_miss"] >= 2 and first["written"]["fxgraph"] >= 2, log1[-3000:]
    assert c2["inductor"].get("fxgraph_cache_miss", 0) == 0 and c2["aot_autograd"].get("autograd_cache_miss", 0) == 0, c2
    assert second["written"] == {"fxgraph": 0, "aotautograd": 0, "triton": 0}


def test_class1_existence_listings_mkdir_rename_delete(warmed):
    for run in warmed["runs"]:
        s = _seen(run)
        assert s["exists"] == [True, True, True]
        assert s["listdir"] == ["a.txt", "data.lock", "new.txt", "old.txt"]
        assert s["scandir"] == ["config.json"] and s["iterdir"] == ["exp1"] and s["walk"] == ["runs/exp1/config.json"]
        assert s["glob"] == ["data/a.txt", "data/new.txt", "data/old.txt"]
        assert s["after_rename_delete"] == ["b.txt", "data.lock", "new.txt"] and s["b_content"] == "a"
        assert s["log"] == "the user's log\nstep 0\n"


def test_class2_chmod_after_rename(warmed):
    assert all(_seen(run)["chmod"] == "0o600" for run in warmed["runs"])


def test_class3_free_space(warmed):
    assert all(_seen(run)["free"] == [True, True] for run in warmed["runs"])


def test_class4_existing_lock_file_is_acquired(warmed):
    assert all(_seen(run)["lock"] is True for run in warmed["runs"])


def test_class5_spawned_and_subprocess_python_children(warmed):
    for run in warmed["runs"]:
        s = _seen(run)
        assert s["spawn"] == "from a spawned worker\n" and s["subprocess"] == "from a subprocess"


def test_class5_non_python_child(warmed, request):
    if warmed["mode"] == "python":
        request.applymarker(pytest.mark.xfail(strict=True, reason="the Python redirect cannot reach a non-Python child "
                                                                  "(it sees the real tree, where runs/exp1 does not exist)"))
    assert all(_seen(run)["shell"] == "from a shell\n" for run in warmed["runs"])


def test_writes_are_recorded_in_the_run_dir(warmed):
    _, first, _ = warmed["runs"][0]
    w = first["report"]["writes"]
    files = Path(w["dir"])
    assert files.is_dir() and w["n_redirected"] >= 5, w
    config = [p for p in w["redirected"] if p.endswith("runs/exp1/config.json")]
    assert config and Path(str(files) + config[0]).read_text() == "{}", w


def test_gc_removes_warm_runs(warmed, tmp_path):
    """The run dirs (overlay work dirs of mode 000 included) go with `pcompile gc`."""
    _, first, _ = warmed["runs"][0]
    cache = Path(first["report"]["writes"]["dir"]).parents[2]
    runs = cache / "warm-runs"
    assert any(runs.iterdir())
    for run in runs.iterdir():
        os.utime(run, (0, 0))
    out = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "gc", "--cache-dir", str(cache), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["warm-runs"]["runs_removed"] == 2 and not any(runs.iterdir())


LATE_COMPILE = """
import time, torch
time.sleep(4)  # past the daemon's idle exit: only the runner's hold keeps it up
f = torch.compile(lambda x: x * 2 + 1)
print("OUT", f(torch.ones(8, device="cuda")).sum().item())
"""


def test_the_child_compiles_on_the_daemon_the_runner_holds(tmp_path):
    """The sandboxed child cannot start a daemon, so the runner starts one outside and holds it for
    the warm's length: a child that compiles after the daemon's idle exit still finds it."""
    mode = next((m for m in ("namespace", "userns") if not _available(m, tmp_path)), None)
    if mode is None:
        pytest.skip("no namespace sandbox on this host")
    script = tmp_path / "late.py"
    script.write_text(LATE_COMPILE)
    rc, res, log = warm(script, tmp_path / "cache", "--steps", "all",
                        env={"PCOMPILE_WARM_SANDBOX": mode, "PCOMPILE_POOL_IDLE_EXIT": "1"}, cwd=tmp_path)
    assert rc == 0, log[-3000:]
    assert "compile pool unavailable" not in log, log[-3000:]
    assert res["report"]["sandbox"]["daemon"] == "started or found outside the sandbox", log[-3000:]


def test_no_daemon_is_started_inside_a_sandbox(tmp_path, monkeypatch):
    """A node compile daemon outlives the warm: one started inside the sandbox would live on in
    its view, so the pool refuses (the runner starts it outside, isolation.start_daemon_outside)."""
    from pcompile.pool.errors import PoolUnavailable
    from pcompile.pool.launcher import DaemonOptions, connect_or_start
    from pcompile.pool.paths import PoolPaths

    monkeypatch.setenv("PCOMPILE_WARM_SANDBOX_ACTIVE", "namespace")
    with pytest.raises(PoolUnavailable, match="file sandbox"):
        connect_or_start(tmp_path, DaemonOptions(idle_exit=5), start_timeout=5)
    assert not PoolPaths.for_cache_dir(tmp_path).pidfile.exists()


@pytest.mark.parametrize("mode", ["namespace", "userns"])
def test_a_socket_listening_outside_is_reachable_inside(mode, tmp_path):
    """Another program's Unix socket (a Ray raylet's, under /tmp/ray) is a copy of its inode when
    seen through an overlay, and connect() is refused; the view binds live sockets through."""
    import socket
    import tempfile
    import threading

    from pcompile.warm import isolation

    why = _available(mode, tmp_path)
    if why:
        pytest.skip(f"{mode} sandbox not available here: {why}")
    sockdir = Path(tempfile.mkdtemp(prefix="pcompile-sock-", dir="/tmp"))
    try:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(sockdir / "raylet"))
        server.listen(1)
        server.settimeout(60)
        got: list[bytes] = []
        accepter = threading.Thread(target=lambda: got.append(server.accept()[0].recv(16)), daemon=True)
        accepter.start()
        run = tmp_path / "run"
        run.mkdir()
        probe = ("import socket; s = socket.socket(socket.AF_UNIX); "
                 f"s.connect({str(sockdir / 'raylet')!r}); s.sendall(b'hello'); print('connected')")
        plan = {"mode": mode, "run": str(run), "record": str(run / "rec.json"), "keep": [str(tmp_path)],
                "cwd": str(tmp_path), "argv": [sys.executable, "-c", probe], "env": dict(os.environ)}
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        out = subprocess.run([sys.executable, "-m", "pcompile.warm.sandbox", str(tmp_path / "plan.json")],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "connected" in out.stdout, out.stdout + out.stderr
        rec = json.loads((run / "rec.json").read_text())
        assert str(sockdir / "raylet") in rec["sockets"]
        accepter.join(60)  # the child connected and sent before it exited: the bytes are there to read
        server.close()
        assert got == [b"hello"], got  # what the child sent reached the listening socket outside
    finally:
        isolation.remove_tree(tmp_path / "run")
        shutil.rmtree(sockdir, ignore_errors=True)


@pytest.mark.parametrize("mode", ["namespace", "userns"])
def test_entries_that_vanish_while_the_view_is_built_are_left_out(mode, tmp_path):
    """Another process's temp dir or socket that is listed and then removed before its mount (CI:
    /tmp/pymp-* of a multiprocessing pool) failed the whole sandbox with ENOENT, or was reported as
    a socket not reachable. PCOMPILE_TEST_VANISH removes the named entries at exactly that moment,
    so the race happens every run: a directory and a file in a directory rebuilt entry by entry
    (it has a mount below it; user namespace only: as root the view never lists a directory), and
    a live socket found by the socket walk (both modes). The mount below lives in a private mount
    namespace of this test."""
    import socket
    import tempfile

    why = _available(mode, tmp_path)
    if why:
        pytest.skip(f"{mode} sandbox not available here: {why}")
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for the test's own mount namespace")
    top = Path(tempfile.mkdtemp(prefix="pcompile-vanish-", dir="/tmp"))  # shallow: the socket walk reaches it first
    busy, sockdir = top / "busy", top / "sock"
    (busy / "mnt").mkdir(parents=True)
    (busy / "kept").mkdir()
    (busy / "pymp-gone").mkdir()
    (busy / "gone.tmp").write_text("x")
    sockdir.mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sockdir / "gone.sock"))
    server.listen(1)
    scaffolded = [str(busy / "gone.tmp"), str(busy / "pymp-gone")]
    sock = str(sockdir / "gone.sock")
    gone = scaffolded + [sock] if mode == "userns" else [sock]
    run = tmp_path / "run"
    run.mkdir()
    probe = ("import json, os; "
             f"print('SEEN', json.dumps({{p: os.path.lexists(p) for p in {scaffolded + [sock, str(busy / 'kept')]!r}}}))")
    plan = {"mode": mode, "run": str(run), "record": str(run / "rec.json"), "keep": [str(run)],
            "cwd": str(tmp_path), "argv": [sys.executable, "-c", probe], "env": dict(os.environ)}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    env = dict(os.environ, PCOMPILE_TEST_VANISH=os.pathsep.join(scaffolded + [sock]))
    try:
        script = (f"mount -t tmpfs none {busy / 'mnt'} && "
                  f"exec {sys.executable} -m pcompile.warm.sandbox {tmp_path / 'plan.json'}")
        out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                             env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        seen = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("SEEN "))[5:])
        rec = json.loads((run / "rec.json").read_text())
        assert not [f for f in rec["failed"] if any(p in f for p in gone)], rec["failed"]  # gone is no failure
        ours = [v for v in rec["vanished"] if v.startswith(str(top) + os.sep)]
        assert sorted(ours) == sorted(gone), rec["vanished"]  # others' (a live /tmp/pymp-*) may vanish too
        assert not any(os.path.lexists(p) for p in gone)  # the hook really removed them
        # inside: gone as they are for real (no placeholder left behind); the rest as it is
        assert seen == {**{p: p not in gone for p in scaffolded}, sock: False, str(busy / "kept"): True}, seen
        if mode == "userns":
            assert str(busy) in rec["scaffolds"], rec["scaffolds"]
    finally:
        server.close()
        isolation.remove_tree(run)
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("mode", ["namespace", "userns"])
def test_output_paths_pcompile_was_asked_to_write_stay_real(mode, tmp_path):
    """Settings that name a place pcompile writes to (settings.outputs: a key-dump directory, a
    key-dump file) are bound through; without that a warm's FX-key descriptions vanished into its
    overlay (benchmarks/diag_warm_keys.py found 0 keys on the H100)."""
    from pcompile.warm import isolation

    why = _available(mode, tmp_path)
    if why:
        pytest.skip(f"{mode} sandbox not available here: {why}")
    home = Path.home() / f".pcompile-test-out-{uuid.uuid4().hex[:8]}"  # outside the temp dirs
    try:
        env = dict(os.environ, PCOMPILE_DEBUG_FX_KEYS=str(home / "fx-keys"), PCOMPILE_AOT_KEY_DUMP=str(home / "aot.jsonl"))
        run = tmp_path / "run"
        run.mkdir()
        probe = (f"open({str(home / 'fx-keys' / 'k1.txt')!r}, 'w').write('fx'); "
                 f"open({str(home / 'aot.jsonl')!r}, 'a').write('aot'); "
                 f"open({str(home / 'elsewhere.txt')!r}, 'w').write('no')")
        plan = {"mode": mode, "run": str(run), "record": str(run / "rec.json"),
                "keep": isolation.keep_paths(env, run, tmp_path, tmp_path / "cache"),
                "cwd": str(tmp_path), "argv": [sys.executable, "-c", probe], "env": env}
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        out = subprocess.run([sys.executable, "-m", "pcompile.warm.sandbox", str(tmp_path / "plan.json")],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert (home / "fx-keys" / "k1.txt").read_text() == "fx"
        assert (home / "aot.jsonl").read_text() == "aot"
        assert not (home / "elsewhere.txt").exists()  # everything else still goes to the overlay
    finally:
        isolation.remove_tree(tmp_path / "run")
        shutil.rmtree(home, ignore_errors=True)


def test_cache_dirs_the_script_chooses_stay_in_its_view(tmp_path):
    """A script that points Inductor's caches at a temp dir while it runs (`fresh_inductor_cache()`,
    as cold-start benchmarks do) hands that path to every compile job; the node pool's workers run
    outside the sandbox and created it on the real file system. They write pcompile's dirs instead."""
    script = ROOT / "tests" / "data" / "warm_scripts" / "fresh_cache_dirs.py"
    cache = tmp_path / "cache"
    rc, res, log = warm(script, cache, "--steps", "all", cwd=tmp_path)
    assert rc == 0, log[-3000:]
    fresh = [line.split(":", 1)[1].strip() for line in log.splitlines() if line.startswith("fresh cache dir:")]
    assert fresh, log[-3000:]
    leaked = [p for p in fresh if os.path.exists(p)]
    for p in leaked:
        shutil.rmtree(p, ignore_errors=True)
    assert not leaked, f"the pool wrote the script's temp cache dir on the real file system: {leaked}"
    assert list((cache / "inductor" / "triton").rglob("*.cubin")), log[-3000:]  # the kernel is kept
