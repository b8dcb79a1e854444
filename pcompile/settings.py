"""Every `PCOMPILE_*` environment variable, declared once: name, type, default, one-line doc.

Why one registry: every process of a job (ranks, pool workers, the warm child) takes its settings
from the environment it inherits, so a variable read in one module must mean the same in all of
them; and a typo in one must never fail a training job. A bad value gives one line on stderr
(`pcompile: PCOMPILE_MAX_BYTES='abc' is not a size (like 20G); using the default 10G`) once per
job, and the default. Sizes take suffixes everywhere (`20G`, `512M`, `1.5GiB`, binary units).

Reads are cheap and honour changes to os.environ (tests change it): `Var.get()` looks the variable
up on every call and parses only when its text changed. Only this module reads `PCOMPILE_*`
variables (tests/test_settings.py checks the package's source); the README's Settings table is
generated from the public ones (tools/settings_table.py). Internal variables are the ones pcompile
sets for its own child processes, or that tests and diagnostics use. A variable pcompile deleted
stays named in `REMOVED`: set in a job, it gives one line saying so and has no effect.

Ground floor: imports nothing from pcompile but its ground-floor neighbours warn.py (the one
`first_time` behind every warn-once of the package) and setting_kinds.py (the parsers).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
import zlib
from typing import Any, Iterator, Mapping

from pcompile import warn
from pcompile.setting_kinds import (  # noqa: F401  (re-exported: settings.Choice, settings.parse_size, ...)
    Bool, Choice, Duration, FilePath, Float, Int, Kind, Size, Text, format_size, parse_size)

# ---- variables ----------------------------------------------------------------------------------

_lock = threading.Lock()
_cache: dict[str, tuple[str | None, Any]] = {}
REGISTRY: dict[str, "Var"] = {}


@dataclasses.dataclass(frozen=True)
class Var:
    """One environment variable. `default=None` with `default_text` reads "decided per machine"."""

    name: str
    kind: Kind
    default: Any
    doc: str
    internal: bool = False
    default_text: str | None = None

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The variable's text, None when unset or empty."""
        raw = (os.environ if environ is None else environ).get(self.name)
        return raw if raw else None

    def get(self, environ: Mapping[str, str] | None = None) -> Any:
        """The parsed value; the default when unset, empty or unusable (after one line on stderr)."""
        raw = self.raw(environ)
        if environ is None:
            cached = _cache.get(self.name)
            if cached is not None and cached[0] == raw:
                return cached[1]
        value = self._parse(raw)
        if environ is None:
            _cache[self.name] = (raw, value)
        return value

    def _parse(self, raw: str | None) -> Any:
        if raw is None:
            return self.default
        try:
            return self.kind.parse(raw)
        except ValueError as exc:
            _warn(self, raw, str(exc))
            return self.default

    def show_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        return "unset" if self.default is None else self.kind.show(self.default)


def _declare(name: str, kind: Kind, default: Any, doc: str, *, internal: bool = False,
             default_text: str | None = None) -> Var:
    var = Var(name, kind, default, doc, internal, default_text)
    assert name not in REGISTRY, name
    REGISTRY[name] = var
    return var


_WARN_TAG = "setting:"  # this module's tags in warn.py's one set


def _warn(var: Var, raw: str, reason: str) -> None:
    """One line per (variable, text) per job."""
    tag = f"{var.name}:{zlib.crc32(raw.encode(errors='replace')):08x}"
    _once_per_job(tag, f"pcompile: {var.name}={raw!r} {reason}; using the default {var.show_default()}")


def _once_per_job(tag: str, line: str) -> None:
    """Write `line` to stderr unless `tag` was written by this process or a parent: the mark is
    exported so that child processes (pool workers, the warm child) that inherit the same
    environment stay quiet."""
    with _lock:
        inherited = (os.environ.get(SETTINGS_WARNED.name) or "").split(",")
        if tag in inherited or not warn.first_time(_WARN_TAG + tag):
            return
        os.environ[SETTINGS_WARNED.name] = ",".join([t for t in inherited if t] + [tag])
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


@dataclasses.dataclass(frozen=True)
class Removed:
    """A variable pcompile had and deleted: set, it says so in one line instead of nothing at all."""

    name: str
    why: str  # short, for the stderr line
    note: str  # the README's line: what it did and the numbers that removed it


#: name -> Removed. Unknown PCOMPILE_* names are otherwise ignored (a typo must not fail a job).
REMOVED: dict[str, Removed] = {}


def _remove(name: str, why: str, note: str) -> None:
    assert name not in REGISTRY and name not in REMOVED, name
    REMOVED[name] = Removed(name, why, note)


def warn_removed(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per job for each removed variable set (non-empty) in the environment; returns
    their names. Called where pcompile starts acting in a process (hooks.install_hooks)."""
    env = os.environ if environ is None else environ
    found = [r for r in REMOVED.values() if env.get(r.name)]
    for r in found:
        _once_per_job(f"{r.name}:removed", f"pcompile: {r.name} was removed ({r.why}); it has no effect")
    return [r.name for r in found]


def reload() -> None:
    """Forget parsed values and this process's warnings (tests). A warning already exported in
    PCOMPILE_SETTINGS_WARNED stays silent, as it does in a child process."""
    with _lock:
        _cache.clear()
        warn.forget(prefix=_WARN_TAG)


def outputs(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(path, "dir" | "file") of every output setting set in `env` (settings pcompile writes to)."""
    found = []
    for var in REGISTRY.values():
        kind = var.kind
        if isinstance(kind, FilePath) and kind.output and (env.get(var.name) or "").strip():
            found.append((kind.parse(env[var.name]), kind.output))
    return found


def public() -> Iterator[Var]:
    return (v for v in REGISTRY.values() if not v.internal)


_GiB = 1024**3
_MiB = 1024**2

# -- where the caches live --
CACHE_DIR = _declare("PCOMPILE_CACHE_DIR", FilePath(), "~/.cache/pcompile",
                     "node-local tier, Inductor/Triton working dirs, pool socket, stats, event logs")
SHARED_DIR = _declare("PCOMPILE_SHARED_DIR", FilePath(), None, "shared-filesystem tier (NFS/Lustre)")
REMOTE = _declare("PCOMPILE_REMOTE", Text(), None,
                  "`redis://[USER:PASS@]HOST:PORT/DB[?prefix=NAME:]`, `rediss://…` (TLS) or `s3://BUCKET/PREFIX` "
                  "(operator notes in [`cache/README.md`](cache/README.md))")
READ_ONLY = _declare("PCOMPILE_READ_ONLY", Bool(), False, "`1`: never write or delete anything in shared or remote tiers")
MAX_BYTES = _declare("PCOMPILE_MAX_BYTES", Size(minimum=0), 10 * _GiB,
                     "node-local size budget (like `20G`), kept by a background LRU GC")
MAX_ENTRIES = _declare("PCOMPILE_MAX_ENTRIES", Int(minimum=0), 200_000, "node-local entry budget, kept by the same GC")
MIN_FREE_BYTES = _declare("PCOMPILE_MIN_FREE_BYTES", Size(minimum=0), 256 * _MiB,
                          "free space the cache dir's filesystem keeps: below it (at start, or before a write) pcompile "
                          "caches nothing and Inductor works in a private temp dir")
CACHE_DIR_TIMEOUT = _declare("PCOMPILE_CACHE_DIR_TIMEOUT", Duration(minimum=0.01), 10.0,
                             "how long the start-of-job probe (a 64 KiB write + fsync) may take before the cache dir "
                             "counts as hung")
LEASE_TIMEOUT = _declare("PCOMPILE_LEASE_TIMEOUT", Duration(minimum=0.01), 60.0,
                         "how long a silent single-flight holder is trusted before a waiter takes over")

# -- routing --
ROUTE = _declare("PCOMPILE", Bool(), False, "`1`: route an unchanged script's `torch.compile` through pcompile")
DISABLE = _declare("PCOMPILE_DISABLE", Bool(), False, "`1`: stock behaviour everywhere (for A/B comparisons)")
POOL = _declare("PCOMPILE_POOL", Choice(("node", "ray", "local", "off"),
                                        aliases=(("daemon", "node"), ("1", "node"), ("on", "node"), ("inprocess", "local"),
                                                 ("in-process", "local"), ("threads", "local"), ("0", "off"),
                                                 ("stock", "off"), ("none", "off")),
                                        prefixes=("ray://",), spelled="node, ray, ray://ADDRESS, local or off"), "node",
                "`node` (one daemon per node), `ray` / `ray://ADDR` (Ray actors; `ray://` needs `ray[client]`), "
                "`local`, `off`")
POOL_WORKERS = _declare("PCOMPILE_POOL_WORKERS", Int(minimum=1), None, "compile workers of the pool",
                        default_text="from cgroup CPU quota, affinity and free memory")
POOL_MEM_PER_WORKER = _declare("PCOMPILE_POOL_MEM_PER_WORKER", Size(minimum=1), int(1.5 * _GiB),
                               "memory budgeted per pool worker when sizing the pool from free memory")
POOL_IDLE_EXIT = _declare("PCOMPILE_POOL_IDLE_EXIT", Duration(minimum=0), 120.0, "how long an idle node daemon lives")
POOL_JOB_TIMEOUT = _declare("PCOMPILE_POOL_JOB_TIMEOUT", Duration(minimum=0.01), 600.0, "a hung compile's limit")
POOL_EAGER = _declare("PCOMPILE_POOL_EAGER", Bool(), None,
                      "start (or connect to) the node daemon when pcompile installs, so its workers are warm by the "
                      "first kernel; `0`: at the first kernel", default_text="on where a CUDA device is visible")
RAY_ACTORS = _declare("PCOMPILE_RAY_ACTORS", Int(minimum=0), None, "Ray compile actors (`ray` pool); 0: Ray's CPU count",
                      default_text="the Ray cluster's CPUs")
EAGER_BACKWARD = _declare("PCOMPILE_EAGER_BACKWARD", Bool(), True,
                          "compile a region's backward with its forward, so its AOTAutograd entry is published before "
                          "the first `.backward()` (part of AOTAutograd's key: warm host and GPU job must agree)")
BYTECODE = _declare(
    "PCOMPILE_BYTECODE", Bool(), None,
    "keep the Python bytecode of torch's modules (and the rest a job imports after `import torch`) under "
    "CACHE_DIR/bytecode through Python's `sys.pycache_prefix`, so a process does not compile `torch._dynamo` and "
    "Inductor from source on every start (H200 image with PYTHONDONTWRITEBYTECODE=1: their import 8.7 s -> 2.1 s); "
    "rank and worker processes inherit it; with PCOMPILE=1 from interpreter start, so `import torch` itself reads it "
    "(`pcompile-startup.pth`). Python checks each file against its source. `0` off, `1` on even where "
    "Python keeps bytecode itself",
    default_text="on where Python keeps no bytecode for torch's modules (PYTHONDONTWRITEBYTECODE, read-only site-packages)")
PROGRAMS = _declare("PCOMPILE_PROGRAMS", Bool(), True,
                    "save what Dynamo made of each compiled function (bytecode, guards, compiled graphs) to the "
                    "cache, so a restart runs it without tracing (torch's caching precompile, keyed by the "
                    "torch.compile options and configs; a failing guard or an edited source traces again, a failing "
                    "guard named in the event log (`program_guard_failed`); frames "
                    "DDP splits into buckets too). On an H200 a restart's first step with it: 0.31-0.40x stock hot for "
                    "GPT-2, 0.50x Llama-style, 0.75x ResNet-50, 0.57x a 2-rank DDP nanoGPT (to the first step's "
                    "end). A warm writes them too, so the job after it skips Dynamo as well (after a warm: 0.47x stock hot for "
                    "GPT-2, 0.77x Llama-style, 0.54x an unchanged nanoGPT train.py to its first step's end). A program keeps at most Dynamo's recompile_limit entries per "
                    "code, and torch's caching precompile drops ID_MATCH guards. `0`: Dynamo traces every start")
DDP_AUTOGRAD_CACHE = _declare(
    "PCOMPILE_DDP_AUTOGRAD_CACHE", Bool(), True,
    "store and load AOTAutograd entries for DDPOptimizer's bucket-split graphs, which torch's own cache bypasses "
    "(backward lowered ahead or lazily, so torch 2.11 too; `0`: every rank re-traces them on every start, as stock)")
BACKWARD_AHEAD = _declare(
    "PCOMPILE_BACKWARD_AHEAD", Bool(), None,
    "ship each region's backward graph to a worker process as soon as AOTAutograd has partitioned it, so it compiles "
    "while the forward does; the parent loads it through the store, and compiles any backward the worker has not "
    "taken yet itself (it never waits for a worker still starting). Costs ~12 CPU-s of imports in another process "
    "and ~0.6 GB of GPU memory for its CUDA context while it lives. `0` off, `1` on (also on CPU-only hosts)",
    default_text="on for GPU jobs on ≥ 8 CPUs")
AUTOTUNE = _declare("PCOMPILE_AUTOTUNE", Choice(("auto", "predicted", "benchmark")), "auto",
                    "for a kernel with no measured autotune winner: `auto`: `benchmark` while Inductor compiles in a "
                    "tuning mode (`max_autotune` or `coordinate_descent_tuning` on, e.g. mode=\"max-autotune\": the user "
                    "asked for steady-state speed; H200, GPT-2 inference: the warm's predicted winners cost 4% more GPU "
                    "kernel time per step than stock, measured ones 5% less to 1% more), else `predicted`; `predicted`: use the "
                    "warm host's prediction (Inductor's no-benchmark choice); `benchmark`: benchmark at first launch "
                    "and publish the winner")
WARM_PAD_MM = _declare("PCOMPILE_WARM_PAD_MM", Choice(("pad", "nopad"), aliases=(("no", "nopad"), ("0", "nopad"),
                                                                                  ("false", "nopad"), ("off", "nopad"))),
                       "pad", "what `pcompile warm` decides where Inductor's pad_mm pass would time padded vs unpadded "
                              "matmuls on a GPU; the choice is part of the warmed graph")
WARM_COORDESC_STEPS = _declare("PCOMPILE_WARM_COORDESC_STEPS", Int(minimum=0, maximum=3), 2,
                               "for kernels the GPU job will coordinate-descent tune, `pcompile warm` also compiles "
                               "the configs this many single-field moves away from the kernel's own (the tuner moves "
                               "greedily, so its first round already reaches 2; gpt-fast: 70 configs at 1, 170 at 2); 0: off")
WARM_SANDBOX = _declare("PCOMPILE_WARM_SANDBOX", Choice(("auto", "namespace", "userns", "python")), "auto",
                        "how `pcompile warm` keeps the script's writes off your files: `namespace` (a private mount "
                        "namespace with an overlay of the file system, as root), `userns` (the same in a user "
                        "namespace), `python` (a redirect of Python's file calls); `auto`: the first that works here")
WARM_STALL_SECONDS = _declare("PCOMPILE_WARM_STALL_SECONDS", Duration(minimum=0), 300.0,
                              "`pcompile warm`: time without a training step, a compile or CPU use after which the warm "
                              "is stopped with every thread's Python stack (exit 124); `0`: never")
WARM_VALUE_LIMIT = _declare("PCOMPILE_WARM_VALUE_LIMIT", Int(minimum=0), 1 << 20,
                            "`pcompile warm`: largest tensor (elements) made from the script's host data that keeps its "
                            "real values on the virtual device (labels, masks, indices); larger ones read as zeros")
INDUCTOR_LOCAL_CACHES = _declare("PCOMPILE_INDUCTOR_LOCAL_CACHES", Bool(), False,
                                 "`1`: keep Inductor's own local FX/AOT caches on as well (by default the store "
                                 "replaces them)")
DEBUG_FX_KEYS = _declare("PCOMPILE_DEBUG_FX_KEYS", FilePath(output="dir"), None,
                         "a directory: write Inductor's description of every FX graph key computed (one file per key "
                         "and process), to see why two keys differ")

# -- events and output --
EVENTS = _declare("PCOMPILE_EVENTS", Bool(), True, "`0` turns off the compile event log (`pcompile report`)")
EVENTS_MAX_BYTES = _declare("PCOMPILE_EVENTS_MAX_BYTES", Size(minimum=0), 64 * _MiB, "largest event log of one job")
EVENTS_KEEP = _declare("PCOMPILE_EVENTS_KEEP", Int(minimum=1), 50, "event logs (jobs) kept under the cache dir")
JOB_ID = _declare("PCOMPILE_JOB_ID", Text(), None, "the job id that groups all ranks' events in one log",
                  default_text="TORCHELASTIC_RUN_ID, SLURM_JOB_ID, else minted")
JOB_SCRIPT = _declare("PCOMPILE_JOB_SCRIPT", Text(), None, "what a job runs, as `pcompile report --list` and `stats` show it "
                      "(the warm sets its command line; default: the process's script)", internal=True)
PROGRESS = _declare("PCOMPILE_PROGRESS", Choice(("auto", "plain", "bar", "off"),
                                                aliases=(("0", "off"), ("false", "off"), ("no", "off"), ("quiet", "off"))),
                    "auto", "progress style of `pcompile warm`: `plain` lines, `bar`, `off` (auto: bar on a terminal)")

# -- remote tier (cache/README.md has the operator notes) --
REMOTE_TIMEOUT = _declare("PCOMPILE_REMOTE_TIMEOUT", Duration(minimum=0.01), 2.0,
                          "per remote round trip; the most a remote failure can stall a job")
REMOTE_BREAKER_FAILURES = _declare("PCOMPILE_REMOTE_BREAKER_FAILURES", Int(minimum=1), 3,
                                   "consecutive failures that open the circuit breaker (a timeout counts as all of them)")
REMOTE_BREAKER_SECONDS = _declare("PCOMPILE_REMOTE_BREAKER_SECONDS", Duration(minimum=0), 60.0,
                                  "how long the remote is skipped (node-wide) once the breaker is open")
REMOTE_QUEUE = _declare("PCOMPILE_REMOTE_QUEUE", Int(minimum=1), 256, "write-behind queue bound (entries); beyond it writes are dropped (counted)")
REMOTE_QUEUE_BYTES = _declare("PCOMPILE_REMOTE_QUEUE_BYTES", Size(minimum=1), _GiB, "write-behind queue bound (bytes)")
REMOTE_FLUSH_TIMEOUT = _declare("PCOMPILE_REMOTE_FLUSH_TIMEOUT", Duration(minimum=0), 10.0,
                                "how long process exit waits for queued remote writes")
REMOTE_MISS_TTL = _declare("PCOMPILE_REMOTE_MISS_TTL", Duration(minimum=0), 5.0, "how long a remote miss is remembered per process")
REMOTE_FETCH_WAIT = _declare("PCOMPILE_REMOTE_FETCH_WAIT", Duration(minimum=0), 120.0,
                             "longest a rank waits for another rank of its node to fetch an entry")
REMOTE_MIN_RATE = _declare("PCOMPILE_REMOTE_MIN_RATE", Size(minimum=1024), 4 * _MiB,
                           "per second: a chunk transfer slower than this counts as a failure")
REDIS_USERNAME = _declare("PCOMPILE_REDIS_USERNAME", Text(), None, "Redis user when the URL names none")
REDIS_PASSWORD = _declare("PCOMPILE_REDIS_PASSWORD", Text(), None, "Redis password when the URL has none")
REDIS_PASSWORD_FILE = _declare("PCOMPILE_REDIS_PASSWORD_FILE", FilePath(), None, "file holding the Redis password")
REDIS_CHUNK_BYTES = _declare("PCOMPILE_REDIS_CHUNK_BYTES", Size(minimum=1), 4 * _MiB,
                             "Redis blobs above this are stored in chunks")
S3_ENDPOINT_URL = _declare("PCOMPILE_S3_ENDPOINT_URL", Text(), None, "S3-compatible endpoint (MinIO, Ceph, moto); path-style addressing then")
S3_REGION = _declare("PCOMPILE_S3_REGION", Text(), None, "S3 region", default_text="AWS_REGION / AWS_DEFAULT_REGION")
S3_REFRESH_DAYS = _declare("PCOMPILE_S3_REFRESH_DAYS", Float(minimum=0), 7.0,
                           "re-upload S3 blobs older than this many days (restarts their lifecycle clock)")

# -- trust (signing keys; `pcompile keygen`) --
HMAC_KEY = _declare("PCOMPILE_HMAC_KEY", Text(), None, "shared signing key (≥ 16 bytes): everyone who holds it signs and verifies")
HMAC_KEY_FILE = _declare("PCOMPILE_HMAC_KEY_FILE", FilePath(), None, "file holding the HMAC key")
SIGNING_KEY_FILE = _declare("PCOMPILE_SIGNING_KEY_FILE", FilePath(), None, "ed25519 private key (PEM/OpenSSH): this process signs what it publishes")
VERIFY_KEY_FILE = _declare("PCOMPILE_VERIFY_KEY_FILE", Text(), None,
                           "ed25519 public key files, `:`-separated: the accepted signers")

# -- virtual device (pcompile warm) --
VDEV_DIR = _declare("PCOMPILE_VDEV_DIR", FilePath(), None, "where the virtual CUDA device library is built",
                    default_text="$XDG_CACHE_HOME/pcompile-vdev")
VDEV_TRACE = _declare("PCOMPILE_VDEV_TRACE", Bool(), False,
                      "`1`: the warm child prints a native backtrace for every refused driver call (read by vcuda.c)")

# -- internal: set by pcompile for its own child processes, or used by tests and diagnostics --
WARMING = _declare("PCOMPILE_WARMING", Bool(), False, "set in the warm child (`pcompile.warming()`)", internal=True)
WARM_PROGRESS = _declare("PCOMPILE_WARM_PROGRESS", FilePath(), None, "file the warm child appends step times to",
                         internal=True)
POOL_WORKER = _declare("PCOMPILE_POOL_WORKER", Bool(), False, "set in the pool's workers: they never start a pool",
                       internal=True)
VDEV_PROFILE = _declare("PCOMPILE_VDEV_PROFILE", FilePath(), None, "flat device profile the virtual device answers from",
                        internal=True)
VDEV_STRICT = _declare("PCOMPILE_VDEV_STRICT", Bool(), False, "a native launch fails instead of being swallowed",
                       internal=True)
VDEV_STATS = _declare("PCOMPILE_VDEV_STATS", FilePath(), None, "file the virtual device appends its call counts to",
                      internal=True)
VDEV_DEVICES = _declare("PCOMPILE_VDEV_DEVICES", Int(minimum=1, maximum=64), 1, "virtual devices the warm child sees",
                        internal=True)
VDEV_SANITIZE = _declare("PCOMPILE_VDEV_SANITIZE", Choice(("none", "address")), "none",
                         "`address`: build the virtual device with AddressSanitizer (its memory tests)", internal=True)
WARM_SANDBOX_ACTIVE = _declare("PCOMPILE_WARM_SANDBOX_ACTIVE", Text(), None,
                               "set in the warm child and its children: the file sandbox mode that runs", internal=True)
WARM_REDIRECT = _declare("PCOMPILE_WARM_REDIRECT", FilePath(), None,
                         "the Python redirect's state file, installed by the warm child's Python children", internal=True)
#: every variable starting with this is the warm's own, never passed to the node daemon
WARM_PREFIX = "PCOMPILE_WARM_"
#: every variable starting with this belongs to the warm child's virtual device
VDEV_PREFIX = "PCOMPILE_VDEV_"
#: every pcompile variable starts with this
PREFIX = "PCOMPILE"
SETTINGS_WARNED = _declare("PCOMPILE_SETTINGS_WARNED", Text(), None,
                           "bad settings already reported by a parent process (one line per job)", internal=True)
PRETEND_TORCH_VERSION = _declare("PCOMPILE_PRETEND_TORCH_VERSION", Text(), None,
                                 "the version gate sees this torch (tests)", internal=True)
TEST_VANISH = _declare("PCOMPILE_TEST_VANISH", Text(), None,
                      "tests only: paths (os.pathsep-separated) the warm sandbox removes between listing their "
                      "directory and mounting them, so that race happens every time", internal=True)
PRETEND_TRITON_VERSION = _declare("PCOMPILE_PRETEND_TRITON_VERSION", Text(), None,
                                  "the version gate sees this triton (tests)", internal=True)
TARGET_ARCH = _declare("PCOMPILE_TARGET_ARCH", Text(), None, "key target arch (like sm_90) instead of this device's",
                       internal=True)
TARGET_NAME = _declare("PCOMPILE_TARGET_NAME", Text(), "", "key target board name with PCOMPILE_TARGET_ARCH",
                       internal=True)
DEVICE_INDEX = _declare("PCOMPILE_DEVICE_INDEX", Choice(("normalise", "keep"),
                                                        aliases=(("normalize", "normalise"), ("1", "normalise"),
                                                                 ("on", "normalise"), ("0", "keep"), ("off", "keep"),
                                                                 ("no", "keep"), ("false", "keep"))),
                        "normalise", "`keep`: stock keys (entries per GPU index; tests show the rebinding matters)",
                        internal=True)
AOT_KEY_DUMP = _declare("PCOMPILE_AOT_KEY_DUMP", FilePath(output="file"), None,
                        "the warm child writes its AOTAutograd key inputs here (benchmarks/diag_warm_keys.py)",
                        internal=True)

# -- removed: set, each gives one line (warn_removed) and does nothing --
