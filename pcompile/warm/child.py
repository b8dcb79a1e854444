"""The warm process: runs an unchanged training script on fake tensors under the virtual device.

Started only by `pcompile warm` (runner.py), with LD_PRELOAD set to the virtual device and the
Inductor caches pointed at pcompile's cache dir. It installs the adjustments in pcompile/compat/warm_*.py, runs
the script under one FakeTensorMode until N steps are done, and writes a JSON report for the
parent. Usage: python -m pcompile.warm.child SPEC.json
"""
from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from pcompile import settings

EXIT_OK = 0
EXIT_SCRIPT_ERROR = 3
EXIT_UNSUPPORTED = 4
STRICT_MARKER = "pcompile virtual device (strict mode)"


class _Strict:
    """Strict launches only inside Inductor's compile windows (nesting-safe)."""

    def __init__(self, wanted: bool) -> None:
        self.wanted = wanted
        self.depth = 0
        self.max_autotune_seen = False

    def enter(self) -> None:
        from pcompile.vdev import preload
        from pcompile.compat import warm_runtime as compat

        self.depth += 1
        if compat.max_autotune_enabled():
            self.max_autotune_seen = True
        if self.wanted and self.depth == 1:
            preload.set_strict(True)

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Launches whose values nobody reads (benchmark inputs) are not strict-mode errors."""
        from pcompile.vdev import preload

        active = self.wanted and self.depth > 0
        if active:
            preload.set_strict(False)
        try:
            yield
        finally:
            if active:
                preload.set_strict(True)

    def leave(self) -> None:
        from pcompile.vdev import preload

        self.depth -= 1
        if self.wanted and self.depth == 0:
            preload.set_strict(False)


def _install_pcompile_backend() -> str:
    """Route the default backend through pcompile (the hooks' feature registry decides the rest)."""
    import pcompile

    if settings.DISABLE.get():
        return "disabled by PCOMPILE_DISABLE=1; stock Inductor caches only"
    try:
        if pcompile.install() is False:
            return "declined (see its warning); stock Inductor caches only"
        # install() leaves the hooks to the first torch.compile; a warm always compiles, and its
        # cache flags must be set before enable_graph_caches() looks at them, so turn them on now.
        from pcompile.inductor import hooks

        ok = hooks.install_hooks()
    except Exception as exc:  # the warm still fills the stock caches
        return f"failed ({type(exc).__name__}: {exc}); stock Inductor caches only"
    return "installed" if ok is not False else "declined (see its warning); stock Inductor caches only"


def _explain(exc: BaseException) -> str | None:
    """A one-line explanation for errors that come from running on fake tensors."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if STRICT_MARKER in str(cur):
            site = _user_line_from_tb(exc)
            return ("strict mode: a native CUDA kernel was launched while Inductor was compiling"
                    + (f" (from {site})" if site else "")
                    + "; on the virtual device it computes nothing, so a value read from it would be garbage. "
                      "Find the pass or op that evaluates on the device (PCOMPILE_VDEV_TRACE=1 helps), or drop --strict to only count it")
        cur = cur.__cause__ or cur.__context__
    return None


def _user_line_from_tb(exc: BaseException) -> str | None:
    from pcompile.warm import reads

    tb = traceback.extract_tb(exc.__traceback__)
    for fs in reversed(tb):
        if reads._SCRIPT and os.path.realpath(fs.filename) == reads._SCRIPT:
            return f"{fs.filename}:{fs.lineno}: `{(fs.line or '').strip()}`"
    return None


def _predict_winner(autotuner: Any, report: dict[str, Any]) -> bool:
    """File Inductor's no-benchmark choice for this kernel in pcompile's store (never raises)."""
    try:
        from pcompile import compat as inductor_compat
        from pcompile.inductor import store_adapter
        from pcompile.compat import autotune_choice

        reason = inductor_compat.check("autotune_choice")
        if reason is not None:
            report["autotune_predict_error"] = reason
            return False
        if autotune_choice.publish_prediction(autotuner, store_adapter.predicting):
            return True
        name = getattr(getattr(autotuner, "fn", None), "__name__", "?")
        report.setdefault("autotune_not_predicted", {})[name] = autotune_choice.why_not(autotuner) or "?"
        return False
    except Exception as exc:
        print(f"pcompile warm: could not predict an autotune winner ({type(exc).__name__}: {exc})", file=sys.stderr)
        return False


def _adjust_torch(spec: dict[str, Any], report: dict[str, Any], strict: _Strict) -> Any:
    """Install every compat adjustment; returns the FakeTensorMode the script runs under."""
    from pcompile.inductor.graph_normalize import normalize_placeholder_types
    from pcompile.compat import warm_compiled_autograd as compiled_autograd
    from pcompile.compat import warm_fakes as fakes
    from pcompile.compat import warm_launches as launches
    from pcompile.compat import warm_runtime as runtime
    from pcompile.compat import warm_timings as timings
    from pcompile.compat import warm_training as training
    from pcompile.compat import warm_uncached as uncached
    from pcompile.compat import warm_values as values
    from pcompile.warm import reads

    unselected: dict[str, int] = report["autotune_unselected"]
    report["pad_mm_guessed"] = 0
    report["pad_mm_prediction"] = timings.pad_mm_prediction()

    predicted: set[str] = set()
    report["autotune_predicted"] = 0

    def on_unselected(name: str, n: int, autotuner: Any) -> None:
        unselected[name] = n
        if name not in predicted and _predict_winner(autotuner, report):
            predicted.add(name)
            report["autotune_predicted"] = len(predicted)

    def on_pad_guess() -> None:
        report["pad_mm_guessed"] += 1

    fakes.allow_fake_param_moves()
    fakes.keep_parameters_when_moved()
    values.drop_mutated_inputs_of_compiled_graphs()
    fakes.load_cuda_checkpoints_as_fakes()
    fakes.meta_for_scaled_mm_out()
    launches.route_wrapper_allocations()
    launches.skip_kernel_launches(on_unselected)
    launches.fold_constants_on_cpu()
    launches.placeholder_repr_for_device_tensors()
    training.grad_scaler_assumes_finite()
    compiled_autograd.capture_outside_the_script_mode()
    report["cudagraphs_skipped"] = 0

    def on_cudagraph_skip() -> None:
        report["cudagraphs_skipped"] += 1

    launches.no_cuda_graph_capture(on_cudagraph_skip)
    timings.no_gpu_timing_in_pad_mm(on_pad_guess, strict.suspended)
    report["gpu_timings_faked"] = {}
    report["left_for_gpu_tuning"] = {}

    def on_fake(what: str) -> None:
        report["gpu_timings_faked"][what] = report["gpu_timings_faked"].get(what, 0) + 1

    def on_unpublished(layer: str) -> None:
        report["left_for_gpu_tuning"][layer] = report["left_for_gpu_tuning"].get(layer, 0) + 1

    def tally(field: str) -> Callable[[str], None]:
        """A callback counting each reason torch gave under report[field]."""
        from pcompile.warm.report import one_line

        counts: dict[str, int] = report.setdefault(field, {})

        def count(reason: str) -> None:
            key = one_line(reason)  # torch's multi-line reasons: one line, and the same reason counted once
            counts[key] = counts.get(key, 0) + 1

        return count

    uncached.on_fx_cache_bypass(tally("fx_cache_bypassed"))
    uncached.on_aot_cache_bypass(tally("aot_cache_bypassed"))
    timings.fake_gpu_timings(on_fake)
    timings.keep_tuned_graphs_unpublished(on_unpublished)
    runtime.during_inductor_compile(strict.enter, strict.leave)
    runtime.normalize_graphs_before_inductor(normalize_placeholder_types)
    if settings.AOT_KEY_DUMP.get():
        runtime.dump_aot_keys(settings.AOT_KEY_DUMP.get())
    mode = fakes.new_fake_mode(reads.record)
    def is_script_fake(t: Any) -> bool:
        return getattr(t, "fake_mode", None) is mode

    fakes.fake_scalar_reads(is_script_fake, reads.read_fake)
    from pcompile.compat import warm_nested

    warm_nested.uniform_inner_tensors(is_script_fake)
    warm_nested.eager_ragged_sizes(is_script_fake)
    from pcompile.compat import warm_storage

    warm_storage.install(mode)  # distinct data_ptr()s, deepcopy/clone of fakes (vdev classes 6, 7)
    from pcompile.compat import warm_tracers

    warm_tracers.tracers_see_no_script_mode(mode)  # the script's make_fx makes its own mode, as on the GPU
    from pcompile.compat import warm_programs

    warm_programs.pickle_script_fakes_as_real(is_script_fake)  # programs' guards stand for the job's tensors
    if spec.get("world_size"):
        from pcompile.warm import fakepg

        fakepg.install(int(spec["world_size"]), int(spec.get("rank", 0)))
    return mode


def _protect_user_files(spec: dict[str, Any], mode: Any) -> Any:
    """Skip saves of virtual tensors, and without a namespace sandbox (sandbox.py) redirect the
    script's file writes in Python (pcompile/warm/writes.py); returns the state."""
    from pcompile.warm import protect, writes
    from pcompile.compat.warm_fakes import is_fake

    sandboxed = settings.WARM_SANDBOX_ACTIVE.get() in ("namespace", "userns")
    keep = [p for p in (settings.CACHE_DIR.raw(), settings.SHARED_DIR.raw(),
                        os.environ.get("TORCHINDUCTOR_CACHE_DIR"), os.environ.get("TRITON_CACHE_DIR")) if p]
    keep.append(os.path.dirname(spec["report"]))  # the warm's own work dir
    user = [os.getcwd(), str(Path(spec["script"]).resolve().parent)]
    w = writes.Writes(Path(spec["run_dir"]), keep, user, lambda t: is_fake(t) and t.fake_mode is mode, redirect=not sandboxed)
    protect.install(w, None if sandboxed else settings.WARM_REDIRECT.raw())
    return w


def _root_cause(exc: BaseException) -> BaseException:
    seen: set[int] = set()
    while exc.__cause__ is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__
    return exc


def _after_stop(exc: BaseException) -> bool:
    """Did `exc` arise while a WarmStop propagated (in its __context__/__cause__ chain)?

    The stop interrupts the script inside a step (at the next backward), with that step's autograd
    graph alive; a framework's handler then runs its cleanup (Lightning's teardown moves the model
    to the CPU, which the warm's in-place parameter swap refuses while the graph holds the
    parameters). The GPU job never takes that path, so such an error is the stop's, not the script's."""
    from pcompile.warm.stop import WarmStop

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, WarmStop):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _run_script(spec: dict[str, Any], mode: Any, report: dict[str, Any]) -> int:
    """Run the script as __main__ under `mode`; fills status/error; returns the exit code."""
    from pcompile.warm import reads
    from pcompile.warm.stop import WarmStop

    script = spec["script"]
    reads.set_script(script)
    sys.argv = [script, *spec.get("args", [])]
    sys.path.insert(0, str(Path(script).resolve().parent))
    try:
        with mode:
            runpy.run_path(script, run_name="__main__")
        report["status"] = "completed"
    except WarmStop:
        report["status"] = "stopped"
    except SystemExit as exc:
        if exc.code in (0, None):
            report["status"] = "completed"
        else:
            status = exc.code if isinstance(exc.code, int) else 1  # as Python: sys.exit("msg") prints it, exits 1
            if not isinstance(exc.code, int):
                sys.stderr.write(f"{exc.code}\n")
            report.update(status="exited", script_exit=status, error=f"the script exited with status {status}")
            return EXIT_SCRIPT_ERROR
    except BaseException as exc:  # report, never hang the parent
        if _after_stop(exc):
            first = (str(exc).strip().splitlines() or [""])[0]
            report.update(status="stopped", after_stop=f"{type(exc).__name__}: {first}")
            return EXIT_OK
        msg = _explain(exc)
        if msg is None:
            sys.stderr.write("".join(traceback.format_exception(exc)))
            root = _root_cause(exc)
            first = (str(root).strip().splitlines() or [""])[0]
            msg = f"the script failed under warm: {type(root).__name__}: {first}"
        report.update(status="error", script_exit=1, error=msg)  # 1: Python's status for an uncaught exception
        return EXIT_SCRIPT_ERROR
    return EXIT_OK


def run(spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    t0 = time.monotonic()
    report: dict[str, Any] = {"status": "error", "steps_done": 0, "autotune_unselected": {}}
    import warnings

    import torch

    # Inductor's runtime alignment checks read data_ptr() (0 on fakes, which is aligned): not news.
    warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")

    from pcompile.vdev import preload
    from pcompile.compat import warm_runtime as compat
    from pcompile.warm.stop import StepCounter

    report["torch"] = torch.__version__
    from pcompile.warm import host_threads

    host_threads.apply(spec.get("cpu_threads"))  # the GPU host's count: every frame's guards check it
    report["cpu_threads"] = {"count": torch.get_num_threads(), "from": spec.get("cpu_threads_from")}
    from pcompile.warm.runner import software_here

    report["software"] = software_here()
    missing = compat.check()
    if missing or not compat.version_supported():
        lo, hi = compat.SUPPORTED
        report["error"] = (f"torch {torch.__version__} is not supported by pcompile warm (needs {lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}"
                           + (f"; missing private APIs: {', '.join(missing)}" if missing else "") + ")")
        return EXIT_UNSUPPORTED, report
    strict = _Strict(bool(spec.get("strict")))
    preload.set_strict(False)
    report["pcompile_backend"] = _install_pcompile_backend()
    report["caches_switched_on"] = compat.enable_graph_caches()
    mode = _adjust_torch(spec, report, strict)

    progress_file = settings.WARM_PROGRESS.get()

    def on_step(k: int, elapsed: float) -> None:
        compat.observe_counters()  # a script may clear torch's counters between steps
        if progress_file:
            with open(progress_file, "a") as fh:
                fh.write(f"{k} {elapsed:.3f}\n")

    counter = StepCounter(int(spec.get("steps", 2)), on_step, compiled_only=True)
    from pcompile.compat import warm_launches

    warm_launches.on_compiled_run(counter.compiled_ran)  # steps count once compiled code runs in them
    counter.install()
    w = _protect_user_files(spec, mode) if spec.get("run_dir") else None
    code = _run_script(spec, mode, report)
    report["coordesc"] = _drain_tuner_candidates()
    if w is not None:
        report["writes"] = w.summary()
    report["steps_done"] = counter.finish(completed=report.get("status") in ("completed", "stopped"))
    report["backward_calls"] = counter.backwards
    report.update(compiled_runs=counter.compiled_runs, eager_steps=counter.eager_steps, graph_replays=counter.replays)
    report["seconds"] = round(time.monotonic() - t0, 3)
    report["counters"] = compat.counters()
    report["vdev"] = preload.stats_here()
    report["max_autotune"] = strict.max_autotune_seen or compat.max_autotune_enabled()
    from pcompile.warm import reads

    report["reads"] = reads.summary()
    from pcompile.warm.shortfall import cache_fault

    report["cache_fault"] = cache_fault()
    return code, report


def _drain_tuner_candidates() -> dict[str, int]:
    """Wait for the candidate configs queued for coordinate-descent-tuned kernels (kernel_router.py):
    the warm is not done until their cubins are in the store."""
    from pcompile.inductor import pool_install
    from pcompile.warm.watch import stall_seconds

    router = pool_install.router()
    if router is None:
        return {"kernels": 0, "configs": 0, "late": 0}
    stall = stall_seconds() or 300.0  # 0: the watchdog is off
    kernels, configs, late = router.drain_speculation(budget_s=max(10.0, stall / 2))
    return {"kernels": kernels, "configs": configs, "late": late}


_STACKS: Any = None  # kept open for the life of the process: faulthandler writes into it


def _arm_stack_dumps(workdir: Path) -> None:
    """Every thread's Python stack into <workdir>/stacks on a fatal signal, and on the parent's
    STACK_SIGNAL when it sees no progress (pcompile/warm/watch.py reads and prints it)."""
    global _STACKS
    import faulthandler

    from pcompile.warm.watch import STACK_SIGNAL

    _STACKS = open(workdir / "stacks", "w")
    faulthandler.enable(file=_STACKS, all_threads=True)
    faulthandler.register(STACK_SIGNAL, file=_STACKS, all_threads=True, chain=False)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    _arm_stack_dumps(Path(spec["report"]).parent)
    from pcompile.inductor import bytecode

    bytecode.enable_from_env()  # before torch's import: a second warm starts faster
    code, report = run(spec)
    tmp = Path(spec["report"] + ".tmp")
    tmp.write_text(json.dumps(report, default=str))
    os.replace(tmp, spec["report"])
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
