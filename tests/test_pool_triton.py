"""Inductor's Triton jobs through pcompile's pool and store, on this CPU-only host.

The kernels are real Inductor output for an H100 (sm_90) captured by
tools/capture_triton_kernels.py; Triton compiles them to cubins here without a GPU. Each
scenario runs in fresh interpreters (the hook patches Inductor process-wide), talking to a
real node daemon and a real store.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
VERSION = ".".join(torch.__version__.split(".")[:2])
DATA = TESTS / "data" / f"triton_kernels_{VERSION}.json"

pytestmark = pytest.mark.skipif(not DATA.exists(), reason=f"no captured kernels for torch {VERSION} (run tools/capture_triton_kernels.py)")

PRELUDE = f"""
import functools, json, os, pickle, sys, time
import torch
from pcompile.inductor import pool_install
import torch._inductor.async_compile as ac
from torch._inductor.runtime.compile_tasks import _worker_compile_triton
from torch._inductor.codecache import _load_triton_kernel_from_source
KERNELS = json.load(open({str(DATA)!r}))["kernels"]

def inductor_submit(pool, name, source, triton_dir=None):
    # exactly the call AsyncCompile.triton() makes on its process pool
    extra_env = {{"TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
                  "TRITON_CACHE_DIR": triton_dir or os.environ.get("TRITON_CACHE_DIR")}}
    extra_config = {{"use_static_triton_launcher": torch._inductor.config.use_static_triton_launcher}}
    load_kernel = functools.partial(_load_triton_kernel_from_source, name, source)
    return pool.submit(_worker_compile_triton, load_kernel, extra_env, extra_config)

def describe(kernel):
    results = kernel.compile_results
    cubins = []
    for r in results:
        k = getattr(r, "kernel", None)
        raw = getattr(k, "cubin_raw", None)
        if raw is None:
            raw = (getattr(k, "asm", None) or {{}}).get("cubin")
        cubins.append(raw[:4] == b"\\x7fELF" if raw else False)
    return {{"type": type(kernel).__name__, "results": len(results), "cubins": cubins}}
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = dict(os.environ)
    e.update(
        {
            "PYTHONPATH": os.pathsep.join([str(REPO), e.get("PYTHONPATH", "")]),
            "PCOMPILE_CACHE_DIR": str(tmp_path / "cache"),
            "PCOMPILE_POOL": "node",
            "PCOMPILE_POOL_IDLE_EXIT": "60",
            "PCOMPILE_POOL_WORKERS": "2",
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
            "TRITON_CACHE_DIR": str(tmp_path / "triton"),
        }
    )
    for name in ("PCOMPILE_SHARED_DIR", "PCOMPILE_REMOTE", "PCOMPILE_READ_ONLY", "PCOMPILE_PRETEND_TORCH_VERSION", "TORCHINDUCTOR_COMPILE_THREADS"):
        e.pop(name, None)
    yield e
    stop = "from pcompile.pool.client import NodePool; NodePool(sys.argv[1], connect_now=False).stop_daemon()"
    subprocess.run([sys.executable, "-c", "import sys; " + stop, e["PCOMPILE_CACHE_DIR"]], env=e, timeout=60)


def run(code: str, env: dict[str, str], timeout: float = 240) -> dict:
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict = {}
    for line in proc.stdout.splitlines():  # every JSON line the snippet printed, merged
        if line.startswith("{"):
            out.update(json.loads(line))
    out["stderr"] = proc.stderr
    return out


def spawn(code: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


COMPILE_ALL = """
assert pool_install.install_pool()
pool = ac.AsyncCompile.process_pool()
futures = [inductor_submit(pool, k["name"], k["source"]) for k in KERNELS]
described = [describe(f.result(timeout=300)[0]) for f in futures]
r = pool_install.router()
print(json.dumps({"kernels": described, "counts": pool_install.counts(), "pool": type(pool).__name__,
                  "mode": r.jobs.mode, "daemon": getattr(r.jobs, "daemon_pid", None), "pid": os.getpid()}))
"""


def test_compat_checks_pass_on_this_torch() -> None:
    """Fails loudly when a torch version moves one of the private APIs the hook relies on."""
    from pcompile.compat import pool_hook

    pool_hook.check()
    source = json.loads(DATA.read_text())["kernels"][0]["source"]
    assert pool_hook.device_of(source) == ("cuda", 90, 0)


def test_kernels_compile_for_sm90_in_the_node_pool_and_land_in_the_store(env: dict[str, str]) -> None:
    first = run(COMPILE_ALL, env)
    assert first["pool"] == "InductorPool" and first["mode"] == "daemon"
    n = len(json.loads(DATA.read_text())["kernels"])
    assert first["counts"]["compiled"] == n, first["counts"]
    for kernel in first["kernels"]:
        assert kernel["type"] == "CachingAutotuner" and kernel["results"] >= 1 and all(kernel["cubins"]), kernel
    # A second process (same cache dir) gets every kernel from the store, compiling nothing.
    second = run(COMPILE_ALL + textwrap.dedent("""
        from pcompile.config import Settings
        from pcompile.store.compose import open_store
        from pcompile.store.tiered import Store
        from pcompile.compat import pool_hook
        r = pool_install.KernelRouter("local")  # only for its key_for()
        store = open_store(Settings.from_env())
        found = []
        for k in KERNELS:
            job = pool_hook.TritonJob(k["name"], k["source"], {}, {"use_static_triton_launcher": torch._inductor.config.use_static_triton_launcher})
            key = r.key_for(job)[0]
            entry = store.get(key)
            found.append([str(key), entry is not None and entry.meta.get("kernel") == k["name"], entry.inputs.fingerprint.get("target_arch") if entry else None])
        print(json.dumps({"found": found}))
        """), env)
    assert second["counts"].get("hit") == n and not second["counts"].get("compiled"), second["counts"]
    assert second["kernels"] == first["kernels"]
    assert second["daemon"] is None  # all hits: it never needed (or started) a daemon
    # The entries are real store entries, verified on read, keyed under the kernel layer.
    check = second
    for key, ok, arch in check["found"]:
        assert key.startswith("kernel-") and ok and arch == "sm_90"
    # A rank with another Triton cache-invalidating knob gets its own key, and the shared
    # daemon (started without the knob) compiles under the caller's setting: the worker's
    # report matches the caller's key, so nothing falls back and nothing is reused wrongly.
    third = run(COMPILE_ALL, dict(env, TRITON_DEFAULT_FP_FUSION="0"))
    assert third["counts"].get("compiled") == n and not third["counts"].get("fallback"), third["counts"]
    assert third["daemon"] == first["daemon"]


def test_inductor_triton_call_uses_the_pool(env: dict[str, str]) -> None:
    """AsyncCompile.triton() itself (the codegen pre-submit and module-load path) goes parallel
    through the installed pool, and Inductor's pool lifecycle calls keep working."""
    out = run(
        """
        assert pool_install.install_pool()
        from pcompile.pool.launcher import read_pidfile
        time.sleep(1.0)
        lazy = read_pidfile(os.environ["PCOMPILE_CACHE_DIR"]) is None  # no GPU here: no daemon until a Triton job
        from torch._inductor.codecache import LambdaFuture
        from torch._inductor.async_compile import AsyncCompile, CompiledTritonKernels, shutdown_compile_workers, after_fork
        assert AsyncCompile.use_process_pool()  # ready from the first kernel on
        k = KERNELS[0]
        fut = AsyncCompile().triton(k["name"], k["source"])
        assert isinstance(fut, LambdaFuture) and fut.future is not None
        kernel, us = fut.future.result(timeout=300)   # get_result() itself needs a GPU (launchers)
        again = AsyncCompile().triton(k["name"], k["source"])   # the module-load call: Inductor's own memo
        shutdown_compile_workers()                  # at exit and on fresh_cache: needs cache_clear
        after_fork()
        pool_type = type(AsyncCompile.process_pool()).__name__
        print(json.dumps({"kernel": describe(kernel), "same": again is fut, "pool": pool_type, "lazy": lazy,
                          "daemon": (read_pidfile(os.environ["PCOMPILE_CACHE_DIR"]) or {}).get("pid"),
                          "threads": torch._inductor.config.compile_threads, "counts": pool_install.counts()}))
        """,
        env,
    )
    assert out["kernel"]["type"] == "CachingAutotuner" and all(out["kernel"]["cubins"])
    assert out["same"] and out["pool"] == "InductorPool" and out["threads"] > 1
    assert out["lazy"] and out["daemon"]  # started by the first kernel, not by install
    assert out["counts"]["compiled"] == 1


def test_four_processes_compile_each_kernel_once(env: dict[str, str]) -> None:
    procs = [spawn(COMPILE_ALL, env) for _ in range(4)]
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=400)
        assert proc.returncode == 0, stderr[-4000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    n = len(json.loads(DATA.read_text())["kernels"])
    compiled = sum(o["counts"].get("compiled", 0) for o in outs)
    reused = sum(o["counts"].get("hit", 0) + o["counts"].get("waited", 0) for o in outs)
    assert compiled == n and reused == 3 * n, [o["counts"] for o in outs]
    assert len({o["daemon"] for o in outs} - {None}) == 1  # one daemon; a rank that only waited never connects
    assert all(o["kernels"] == outs[0]["kernels"] for o in outs)


def test_worker_killed_mid_compile_does_not_fail_the_compile(env: dict[str, str], tmp_path: Path) -> None:
    out = run(
        f"""
        import signal
        assert pool_install.install_pool()
        pool = ac.AsyncCompile.process_pool()  # what Inductor's first kernel does: builds the router
        r = pool_install.router()
        assert r.jobs.wait_connected(120)
        k = KERNELS[0]
        killed = None
        for attempt in range(4):
            # a fresh source and Triton cache each attempt, so the compile is a real, slow one
            source = k["source"] + f"\\n# attempt {{attempt}}\\n"
            fut = inductor_submit(pool, k["name"], source, triton_dir={str(tmp_path)!r} + f"/t{{attempt}}")
            deadline = time.time() + 120
            while time.time() < deadline and not fut.done():
                busy = [s for s in r.jobs.status()["slots"] if s["label"] == k["name"]]
                if busy and busy[0]["pid"]:
                    os.kill(busy[0]["pid"], signal.SIGKILL)
                    killed = busy[0]["pid"]
                    break
                time.sleep(0.01)
            kernel, us = fut.result(timeout=300)
            if killed:
                break
        print(json.dumps({{"killed": killed, "kernel": describe(kernel), "counts": pool_install.counts()}}))
        """,
        env,
    )
    assert out["killed"], "never caught the worker mid-compile"
    assert out["kernel"]["type"] == "CachingAutotuner" and all(out["kernel"]["cubins"])
    assert out["counts"]["fallback"] >= 1
    assert "SIGKILL" in out["stderr"] and "compiling" in out["stderr"] and "in-process" in out["stderr"]


def test_unknown_torch_version_pool_off_and_serial_compile_all_leave_inductor_stock(env: dict[str, str]) -> None:
    out = run(
        """
        from pcompile.compat import pool_hook
        os.environ["PCOMPILE_PRETEND_TORCH_VERSION"] = "2.99.0"
        unknown = [pool_install.install_pool() for _ in range(3)]
        del os.environ["PCOMPILE_PRETEND_TORCH_VERSION"]
        os.environ["PCOMPILE_POOL"] = "off"
        off = pool_install.install_pool()
        os.environ["PCOMPILE_POOL"] = "node"
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        torch._inductor.config.compile_threads = 1
        serial = pool_install.install_pool()
        print(json.dumps({"unknown": unknown, "off": off, "serial": serial, "installed": pool_hook.installed()}))
        """,
        env,
    )
    assert out["unknown"] == [False, False, False] and out["off"] is False and out["serial"] is False
    assert not out["installed"]
    lines = [line for line in out["stderr"].splitlines() if "stock Inductor" in line]
    assert len(lines) == 1 and "2.99.0" in lines[0], out["stderr"]


CANDIDATES = """
assert pool_install.install_pool()
from pathlib import Path
from pcompile.compat import autotune_precompile
pool = ac.AsyncCompile.process_pool()
fresh = os.environ["FRESH_TRITON_DIR"]
def submit(k):
    if os.environ.get("NO_TRITON_DIR"):  # Inductor passes TRITON_CACHE_DIR only once this process set it
        extra_env = {"TORCHINDUCTOR_CACHE_DIR": os.environ["TORCHINDUCTOR_CACHE_DIR"]}
        load_kernel = functools.partial(_load_triton_kernel_from_source, k["name"], k["source"])
        config = {"use_static_triton_launcher": torch._inductor.config.use_static_triton_launcher}
        return pool.submit(_worker_compile_triton, load_kernel, extra_env, config)
    return inductor_submit(pool, k["name"], k["source"], triton_dir=fresh)
if os.environ.get("AS_CANDIDATES"):
    with autotune_precompile.submitting_candidates():  # what max-autotune's precompile step runs in
        futures = [submit(k) for k in KERNELS]
else:
    futures = [submit(k) for k in KERNELS]
t0 = time.perf_counter()
results = [f.result(timeout=300)[0] for f in futures]   # the precompile step's wait
configs = sum(len(k.compile_results) for k in results)
cubins = sorted(p.name for p in Path(fresh).rglob("*.cubin")) if os.path.isdir(fresh) else []
print(json.dumps({"counts": pool_install.counts(), "configs": configs, "cubins": cubins}))
"""


def test_autotune_candidates_from_the_store_land_in_the_local_triton_dir(env: dict[str, str], tmp_path: Path) -> None:
    """Issue 34: max-autotune's precompile step submits each candidate to the pool and ignores the
    result; the benchmark then loads the candidate from Triton's local dir. A store hit that left
    that dir empty made the benchmark compile every candidate serially inside its timing loop
    (H200: 12.6-17.5 s for 22 choices, "0.0003 seconds precompiling"). Candidates answered from
    the store must still have their cubins on local disk when the precompile step's wait ends;
    other kernels keep the store's answer alone (nothing local to write on a hot start)."""
    first = run(CANDIDATES, dict(env, FRESH_TRITON_DIR=str(tmp_path / "triton-first")))
    n = len(json.loads(DATA.read_text())["kernels"])
    assert first["counts"]["compiled"] == n, first["counts"]
    hot = run(CANDIDATES, dict(env, FRESH_TRITON_DIR=str(tmp_path / "triton-hot")))
    assert hot["counts"]["hit"] == n and hot["cubins"] == [], hot  # unchanged: the store answers alone
    tuned = run(CANDIDATES, dict(env, FRESH_TRITON_DIR=str(tmp_path / "triton-tuned"), AS_CANDIDATES="1"))
    assert len(tuned["cubins"]) == tuned["configs"] >= n, tuned  # every config's cubin, before any benchmark
    assert tuned["counts"]["hit"] == n and tuned["counts"].get("candidate") == n, tuned["counts"]
    # Before this process set TRITON_CACHE_DIR, the shared daemon's worker still has the dir of the
    # jobs above in its environment; the cubins must land where this process's benchmark will look.
    inductor = tmp_path / "inductor-unset"
    unset = {k: v for k, v in env.items() if k != "TRITON_CACHE_DIR"}
    late = run(CANDIDATES, dict(unset, TORCHINDUCTOR_CACHE_DIR=str(inductor), NO_TRITON_DIR="1", AS_CANDIDATES="1",
                                FRESH_TRITON_DIR=str(inductor / "triton" / "0")))
    assert len(late["cubins"]) == late["configs"] >= n, late


WINNERS = """
from pcompile.inductor import hooks
assert hooks.install_hooks()
assert pool_install.install_pool()
from pcompile.compat import autotune_choice
from pcompile.inductor import store_adapter
pool = ac.AsyncCompile.process_pool()
k = dict(KERNELS[0])  # a pointwise kernel with two configs; as codegen writes it where pcompile is the autotune backend
k["source"] = k["source"].replace("'autotune_remote_cache': None", "'autotune_remote_cache': True")
static = torch._inductor.config.use_static_triton_launcher
extra_config = {"use_static_triton_launcher": static if os.environ.get("SAME_KEY") else not static}
load_kernel = functools.partial(_load_triton_kernel_from_source, k["name"], k["source"])
extra_env = {"TORCHINDUCTOR_CACHE_DIR": os.environ["TORCHINDUCTOR_CACHE_DIR"], "TRITON_CACHE_DIR": os.environ["TRITON_CACHE_DIR"]}
kernel = pool.submit(_worker_compile_triton, load_kernel, extra_env, extra_config).result(timeout=300)[0]
configs = [str(sorted(r.config.kwargs.items())) for r in kernel.compile_results]
step = os.environ.get("STEP")
if step == "predict":
    assert autotune_choice.publish_prediction(kernel, store_adapter.predicting), autotune_choice.why_not(kernel)
elif step == "measure":  # what a GPU job's first launch saves after benchmarking: the second config won
    assert len(kernel.compile_results) == 2
    kernel.save_cache_hook(kernel.compile_results[1].config, 1000, found_by_coordesc=False)
print(json.dumps({"counts": pool_install.counts(), "configs": configs}))
"""


def test_a_stored_kernel_gets_the_winner_the_requesting_job_sees(env: dict[str, str], tmp_path: Path) -> None:
    """Issue 34 item 2: a kernel entry holds the autotune winner its *builder* saw. Stock reads the
    winner where the module loads, each job anew. So: a warm's prediction must not be baked into an
    entry (a PCOMPILE_AUTOTUNE=benchmark job would use it, and no measured winner would ever replace
    it), and a winner published after the entry was built must be used (else every job re-tunes)."""
    def job(step: str, **extra: str) -> dict:
        name = f"{step}-{len(list(tmp_path.iterdir()))}"
        return run(WINNERS, dict(env, STEP=step, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / name / "inductor"),
                                 TRITON_CACHE_DIR=str(tmp_path / name / "triton"), **extra))

    first = job("predict", SAME_KEY="1")  # builds the entry (both configs), then files a prediction
    assert first["counts"]["compiled"] == 1 and len(first["configs"]) == 2, first
    predicted = job("use", SAME_KEY="1")  # hit; the default (auto) outside tuning modes is predicted: the prediction applies
    assert predicted["counts"]["hit"] == 1 and predicted["configs"] == first["configs"][:1], predicted
    # a new entry built while the prediction exists, for a job that wants to benchmark: both configs
    built = job("use", PCOMPILE_AUTOTUNE="benchmark")
    assert built["counts"]["compiled"] == 1 and built["configs"] == first["configs"], built
    measured = job("measure", SAME_KEY="1", PCOMPILE_AUTOTUNE="benchmark")  # a GPU job publishes its measured winner: the second config
    after = job("use", SAME_KEY="1")
    assert after["counts"]["hit"] == 1 and after["configs"] == first["configs"][1:], (measured, after)
