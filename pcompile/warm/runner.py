"""`pcompile warm`, parent side: prepare the virtual device and caches, run the child, report.

This process never loads the virtual device: it builds the library, writes the profile where
the library reads it, and starts `python -m pcompile.warm.child` with LD_PRELOAD set for that
child only. Inductor's caches are pointed at <pcompile cache dir>/inductor so the GPU job, run
with the same pcompile settings, looks its graphs and kernels up exactly there.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pcompile.config import Settings
from pcompile.errors import PcompileError
from pcompile.settings import DISABLE, JOB_ID, JOB_SCRIPT, WARM_PROGRESS, WARMING
from pcompile.vdev import build, preload
from pcompile.warm import host_threads
from pcompile.warm import isolation, shortfall
from pcompile.vdev.profile import DeviceProfile, resolve

LAYERS = ("fxgraph", "aotautograd", "triton")


@dataclass
class WarmOptions:
    script: str
    script_args: list[str] = field(default_factory=list)
    target: str | None = None
    steps: int = 2  # 0: no limit (`--steps all`)
    world_size: int = 0
    ranks: str = "0"
    strict: bool = False
    check: bool = False
    cache_dir: str | None = None
    shared_dir: str | None = None
    timeout: float | None = None
    keep_workdir: bool = False
    command: str = ""  # what the user typed, shown by `pcompile report --list` and `stats`
    board_label: str = ""  # a multi-board warm's "h200 (2/2)": the progress line names the board


@dataclass
class WarmResult:
    exit_code: int
    report: dict[str, Any]
    written: dict[str, int]
    seconds: float
    profile: DeviceProfile
    version_warnings: list[str]
    worker_vdev: list[dict[str, Any]]
    cache_dir: Path
    #: this warm's cache look-ups per layer (store/hits.py), from its event log; None without events
    lookups: dict[str, dict[str, Any]] | None = None
    job: str = ""

    @property
    def failed(self) -> bool:
        return self.exit_code != 0

    def exit_status(self) -> int:
        """What `pcompile warm` exits with: 0, the script's own status (sys.exit(3) -> 3, an
        uncaught exception -> 1, as Python), or 1 when the warm itself could not run it."""
        if not self.failed:
            return 0
        for rk in [self.report, *(self.report.get("ranks") or [])]:
            status = rk.get("script_exit")
            if isinstance(status, int) and status:
                return status
        return 1


def inductor_dirs(settings: Settings) -> tuple[Path, Path]:
    """Where the warm child (and the GPU job, through pcompile) keep Inductor's and Triton's caches."""
    inductor = settings.cache_dir / "inductor"
    return inductor, inductor / "triton"


def cache_env(settings: Settings) -> dict[str, str]:
    inductor, triton = inductor_dirs(settings)
    env = settings.export_env()
    # The graph caches are switched on inside the child (compat.enable_graph_caches), not with
    # TORCHINDUCTOR_*_CACHE=1: those env vars *force* config values that AOTAutograd hashes into
    # its keys, so the warm would no longer match a GPU job that runs without them.
    env.update({"TORCHINDUCTOR_CACHE_DIR": str(inductor), "TRITON_CACHE_DIR": str(triton)})
    return env


def snapshot(root: Path, store: Path | None = None) -> dict[str, set[str]]:
    """Entries per cache layer: FX graph and AOTAutograd entries, Triton cubins.

    With pcompile's hooks on, Inductor's local FX/AOTAutograd caches are off while graphs compile
    and their entries go to the store (`store`: its node-local tier); with PCOMPILE_DISABLE=1 they
    are files under `root`. Both are counted, once per place (`written` takes the larger)."""
    out: dict[str, set[str]] = {k: set() for k in LAYERS}
    for layer, store_layer in (("fxgraph", "graph"), ("aotautograd", "autograd")):
        base = root / layer
        if base.exists():
            out[layer] = {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file() and not p.name.endswith(".lock")}
        manifests = store / "manifests" / store_layer if store is not None else None
        if manifests is not None and manifests.exists():
            out[f"store:{layer}"] = {p.name for p in manifests.rglob("*.json")}
    tri = root / "triton"
    if tri.exists():
        out["triton"] = {str(p.relative_to(tri)) for p in tri.rglob("*.cubin")}
    kernels = store / "manifests" / "kernel" if store is not None else None
    if kernels is not None and kernels.exists():
        out["store:triton"] = {p.name for p in kernels.rglob("*.json")}
    return out


def written_counts(before: dict[str, set[str]], after: dict[str, set[str]], store_in_use: bool) -> dict[str, int]:
    """New entries per layer: in the store while pcompile's hooks ran (`store_in_use`), else in
    Inductor's and Triton's local dirs (PCOMPILE_DISABLE=1). Not the local Triton dir with a store:
    a graph loaded from the store unpacks the cubins bundled with it there, which is no compile and
    no write (a rewarm after a GPU job published its tuned graph showed 43 'written' cubins with
    every look-up a hit)."""
    def new(key: str) -> int:
        return len(after.get(key, set()) - before.get(key, set()))

    return {layer: new(f"store:{layer}") if store_in_use else new(layer) for layer in LAYERS}


def warm_run_dir(settings: Settings, script: Path) -> Path:
    """Where this warm's redirected file writes go: <cache dir>/warm-runs/<time>-<script>."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = settings.cache_dir / "warm-runs"
    run = base / f"{stamp}-{script.stem}"
    n = 1
    while run.exists():
        n += 1
        run = base / f"{stamp}-{script.stem}-{n}"
    run.mkdir(parents=True)
    return run


def torch_build() -> tuple[str, str | None]:
    """(version, CUDA version) of the installed torch, read from torch/version.py without
    importing torch: importing the CUDA build maps the host's libcuda (cuBLASLt dlopens it), and
    this process must never touch the host's driver."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise PcompileError("torch is not installed here; install the GPU host's torch wheel to warm for it")
    values: dict[str, Any] = {}
    text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    for node in ast.parse(text).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if isinstance(getattr(node, "value", None), ast.Constant):
            for t in targets:
                if isinstance(t, ast.Name):
                    values[t.id] = node.value.value  # type: ignore[union-attr]
    return str(values.get("__version__", "?")), values.get("cuda")


def check_cuda_abi() -> None:
    """The virtual device answers with CUDA 13 structs; a torch built for another CUDA would misread them."""
    version, cuda = torch_build()
    if not cuda or not str(cuda).startswith("13."):
        raise PcompileError(f"pcompile warm needs a CUDA 13 build of torch (the virtual device speaks the CUDA 13 ABI); "
                            f"this torch {version} is built for CUDA {cuda}. Install the GPU host's torch wheel here")


def software_here() -> dict[str, Any]:
    """torch, triton and cuDNN versions of this process (the warm child's; cuDNN asked without a CUDA init)."""
    import torch

    local: dict[str, Any] = {"torch": torch.__version__}
    try:
        import triton

        local["triton"] = triton.__version__
    except ImportError:
        local["triton"] = None
    from pcompile.compat import cudnn_version

    local["cudnn"] = cudnn_version.version()
    from pcompile.keys import versions

    local["python"] = versions.python_version()  # major.minor, as in the keys
    return local


def builtin(profile: DeviceProfile) -> bool:
    """A profile shipped with pcompile (board properties only: its capture host's software is
    not the user's GPU host's)."""
    from pcompile.vdev.profile import BUILTIN_DIR

    try:
        return Path(profile.source).resolve().parent == BUILTIN_DIR
    except OSError:
        return False


#: Software fields that are part of every cache key (pcompile/keys/fingerprint.py), so a GPU job
#: whose values differ from the warm host's misses every entry the warm wrote.
KEYED_SOFTWARE = ("torch", "triton", "cudnn", "python")


def version_warnings(profile: DeviceProfile, local: dict[str, Any]) -> list[str]:
    """At most one line: the keyed software of the warm host that differs from the GPU host's.

    Only a profile captured on the user's GPU host (`pcompile profile`) says what that host runs;
    a built-in profile describes the board, and its capture host's versions mean nothing here."""
    if builtin(profile):
        return []
    sw = profile.software
    if sw.get("python"):
        sw["python"] = ".".join(str(sw["python"]).split(".")[:2])
    diffs = [(key, local.get(key), sw.get(key)) for key in KEYED_SOFTWARE
             if sw.get(key) is not None and local.get(key) is not None and str(sw[key]) != str(local[key])]
    if not diffs:
        return []
    here = ", ".join(f"{k} {h}" for k, h, _ in diffs)
    there = ", ".join(f"{k} {t}" for k, _, t in diffs)
    return [f"this host runs {here} but the GPU host of {profile.source} runs {there}: every key differs, so the "
            f"GPU job will miss all of it; install the GPU host's versions here (or capture the profile again "
            f"if the GPU host was upgraded) and warm again"]


def builtin_profile_note(profile: DeviceProfile, local: dict[str, Any]) -> str:
    """One line when a built-in profile's capture host ran other versions than this host: what
    differs and that it does not matter (a built-in profile gives the board; keys hold this host's
    versions). '' for a user's own profile (`version_warnings` speaks there) or when nothing differs."""
    if not builtin(profile):
        return ""
    sw = dict(profile.software)
    if sw.get("python"):
        sw["python"] = ".".join(str(sw["python"]).split(".")[:2])
    diffs = [k for k in KEYED_SOFTWARE if sw.get(k) is not None and local.get(k) is not None and str(sw[k]) != str(local[k])]
    if not diffs:
        return ""
    there = ", ".join(f"{k} {sw[k]}" for k in diffs)
    here = ", ".join(f"{k} {local[k]}" for k in diffs)
    return (f"the built-in {profile.board or profile.name} profile was captured with {there}; this host runs {here}: "
            f"only the profile's board properties are used, and the keys hold this host's versions, so the GPU job "
            f"must run {here} to hit")


def software_line(local: dict[str, Any], board: str = "") -> str:
    """What the GPU job must run to hit what this warm wrote (informational, not a warning):
    graph entries are per board, so the line names the board (another board's job misses them)."""
    shown = ", ".join(f"{k} {local[k]}" for k in KEYED_SOFTWARE if local.get(k) is not None)
    on = f" on an {board}" if board else ""
    other = "; a job on another board misses them (warm for each: --target h100,h200)" if board else ""
    return f"the GPU job{on} hits these entries when it runs pcompile with the same {shown}{other}" if shown else ""


def _wait(proc: subprocess.Popen, workdir: Path, opts: WarmOptions, settings: Settings, script: Path) -> int:
    """The child's return code, with the progress line; a stall or a crash raises (watch.py)."""
    from pcompile.progress import progress
    from pcompile.warm import watch

    inductor, triton = inductor_dirs(settings)
    activity = [inductor, triton, inductor / "fxgraph", inductor / "aotautograd"]
    try:
        from pcompile.events import events_dir, job_id

        activity.append(events_dir(settings.cache_dir) / f"{job_id()}.jsonl")  # the child's job id: inherited
    except Exception:  # events are optional
        pass
    w = watch.Watch(proc, workdir / "progress", workdir / "stacks", activity, watch.stall_seconds(),
                    script=str(script.resolve()), timeout=opts.timeout)
    with progress(total=opts.steps or None, desc=f"warming {opts.board_label}".strip()) as bar:
        rc = w.wait(bar.advance)
        if rc != 0:
            bar.fail()
        return rc


def run_warm(opts: WarmOptions) -> WarmResult:
    script = Path(opts.script)
    if script.is_dir():
        raise PcompileError(f"{opts.script} is a directory; pass the training script (a .py file) as `pcompile warm SCRIPT`")
    if not script.is_file():
        raise PcompileError(f"script {opts.script} not found; pass the training script as `pcompile warm SCRIPT`")
    if opts.steps < 0:
        raise PcompileError("--steps must be at least 1, or 0 ('all') to run the script to its end")
    settings = Settings.from_env(cache_dir=opts.cache_dir, shared_dir=opts.shared_dir)
    profile = resolve(opts.target)
    check_cuda_abi()
    lib = build.library()
    inductor, _ = inductor_dirs(settings)
    inductor.mkdir(parents=True, exist_ok=True)
    ranks = warm_ranks(opts)
    run_dir = warm_run_dir(settings, script)
    job = f"warm-{run_dir.name}"
    iso = isolation.choose(run_dir)
    print(iso.notice(), file=sys.stderr, flush=True)
    starting = isolation.start_daemon_outside(iso, settings.cache_dir)
    before = snapshot(inductor, settings.cache_dir / "store")
    t0 = time.monotonic()
    try:
        results = [_run_rank(opts, settings, profile, lib, script, run_dir, rank, iso, job) for rank in ranks]
    finally:
        isolation.release_daemon(iso, starting)
    seconds = time.monotonic() - t0
    after = snapshot(inductor, settings.cache_dir / "store")
    rc, report, workers = results[0]
    if len(results) > 1:
        report["ranks"] = [{"rank": r, "exit_code": code, "status": rep.get("status"), "error": rep.get("error"),
                            "script_exit": rep.get("script_exit"),
                            "counters": {k: rep.get("counters", {}).get(k, {}) for k in ("inductor", "aot_autograd")}}
                           for r, (code, rep, _) in zip(ranks, results)]
        rc = max(code for code, _, _ in results)
        failed = [f"rank {r}: {rep.get('error')}" for r, (code, rep, _) in zip(ranks, results) if code]
        if failed and not report.get("error"):
            report["error"] = "; ".join(failed)
    warnings = version_warnings(profile, report.get("software") or {})
    written = written_counts(before, after, store_in_use=not DISABLE.get())
    lookups = job_lookups(settings, job)
    short = shortfall.problem(report, written, lookups, settings.cache_dir) if rc == 0 else None
    if short:  # the script ran, but the cache did not get what it compiled: not a success
        rc, report["error"] = 1, short
    return WarmResult(rc, report, written, seconds, profile, warnings, [w for _, _, ws in results for w in ws], inductor,
                      lookups=lookups, job=job)


def job_lookups(settings: Settings, job: str) -> dict[str, dict[str, Any]] | None:
    """The warm's look-ups per layer, counted from its event log as `pcompile report` counts them."""
    from pcompile.events import reader
    from pcompile.events._sink import SUFFIX, events_dir
    from pcompile.store import hits

    path = events_dir(settings.cache_dir) / (job + SUFFIX)
    if not path.is_file():
        return None
    try:
        events, _bad = reader.load(path)
    except OSError:
        return None
    return hits.from_events(events)


def warm_ranks(opts: WarmOptions) -> list[int]:
    """Which ranks to run: rank 0 (SPMD ranks share its entries), or every rank (`--ranks all`)."""
    if opts.ranks in ("0", "", None):
        return [0]
    if not opts.world_size:
        raise PcompileError("--ranks needs --world-size W (the job's number of ranks)")
    if opts.ranks == "all":
        return list(range(opts.world_size))
    try:
        picked = sorted({int(r) for r in str(opts.ranks).split(",")})
    except ValueError:
        raise PcompileError(f"--ranks {opts.ranks!r}: give 'all' or comma-separated rank numbers, e.g. --ranks 0,3") from None
    if picked[0] < 0 or picked[-1] >= opts.world_size:
        raise PcompileError(f"--ranks {opts.ranks}: ranks run from 0 to {opts.world_size - 1} with --world-size {opts.world_size}")
    return picked


def _run_rank(opts: WarmOptions, settings: Settings, profile: DeviceProfile, lib: Path, script: Path, run_dir: Path,
              rank: int, iso: isolation.Isolation, job: str) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """One warm child, as `rank` of the job: (exit code, its report, its workers' device stats)."""
    workdir = Path(tempfile.mkdtemp(prefix="pcompile-warm-"))
    try:
        # as many virtual devices as the job has local ranks: set_device(LOCAL_RANK) must work
        env = preload.child_env(lib, profile, workdir, opts.strict, devices=max(1, opts.world_size))
        env.update(cache_env(settings))
        env[WARMING.name] = "1"
        env[WARM_PROGRESS.name] = str(workdir / "progress")
        env[JOB_ID.name] = job  # one event log for the warm: its summary counts look-ups from it
        env[JOB_SCRIPT.name] = opts.command or f"pcompile warm {opts.script}"
        if opts.world_size:
            from pcompile.warm.fakepg import env_for

            env.update(env_for(opts.world_size, rank, env))
        rank_dir = run_dir / f"rank{rank}" if opts.world_size else run_dir
        rank_dir.mkdir(parents=True, exist_ok=True)
        spec = {"script": str(script.resolve()), "args": opts.script_args, "steps": opts.steps,
                "world_size": opts.world_size, "rank": rank, "strict": opts.strict,
                "report": str(workdir / "report.json"), "run_dir": str(rank_dir),
                "cpu_threads": host_threads.threads_for(profile.data, opts.world_size, env),
                "cpu_threads_from": host_threads.source(profile.data, opts.world_size, env)}
        (workdir / "spec.json").write_text(json.dumps(spec))
        child = [sys.executable, "-m", "pcompile.warm.child", str(workdir / "spec.json")]
        argv, env = isolation.command(iso, child, env, rank_dir, workdir, settings.cache_dir)
        proc = subprocess.Popen(argv, env=env)  # the sandbox launcher execs the child: same process
        rc = _wait(proc, workdir, opts, settings, script)
        report_path = workdir / "report.json"
        if not report_path.exists():
            rec = workdir / "sandbox.json"
            if rec.exists() and json.loads(rec.read_text()).get("error"):
                raise PcompileError(f"the {iso.mode} file sandbox could not be set up ({json.loads(rec.read_text())['error']}); "
                                    f"set {sandbox_env()}=python to warm with the Python redirect instead")
            from pcompile.warm import watch

            stacks = (workdir / "stacks").read_text(errors="replace") if (workdir / "stacks").exists() else ""
            raise watch.crashed(rc, stacks, str(script.resolve()))
        report = json.loads(report_path.read_text())
        isolation.collect(iso, report, workdir, rank_dir)
        workers = [s for s in preload.read_stats_file(workdir / "vdev-stats.jsonl") if s.get("pid") != report.get("vdev", {}).get("pid")]
        return rc, report, workers
    finally:
        if not opts.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def sandbox_env() -> str:
    from pcompile.warm.sandbox import ENV_MODE

    return ENV_MODE
