"""Time spent in Python's cyclic garbage collector during the first step, and where it struck.

Why: phase timers of identical compiles differed between processes by whole seconds in a
direction that depended on the model (RESULTS.md, session 4). A full (generation 2) collection
of a heap with torch, transformers and a large FX graph costs a fraction of a second and lands
in whichever phase happens to allocate at that moment; this clock says how much and where.
"""
from __future__ import annotations

import gc
import sys
import threading
import time
from typing import Any

#: Frames whose names say which compile phase allocated when a full collection started
#: (innermost first wins). Substrings of code qualnames.
PHASES = (
    "min_cut_rematerialization_partition", "post_grad_passes", "joint_graph_passes", "pre_grad_passes",
    "Scheduler.codegen", "Scheduler.__init__", "GraphLowering.codegen", "GraphLowering.run",
    "compile_fx_backward", "compile_fx_inner", "create_aot_dispatcher_function", "aot_stage1",
    "AOTAutogradCache", "FxGraphCache", "_compile.compile_inner", "InstructionTranslator",
)


class GcClock:
    def __init__(self) -> None:
        self.by_gen = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
        self.full: list[dict[str, Any]] = []
        self._t0: dict[int, tuple[float, str]] = {}
        self._on = False

    def _phase(self) -> str:
        f = sys._getframe(2)
        while f is not None:
            name = getattr(f.f_code, "co_qualname", f.f_code.co_name)
            for p in PHASES:
                if p in name:
                    return p
            f = f.f_back
        return "other"

    def _cb(self, phase: str, info: dict[str, Any]) -> None:
        if not self._on:
            return
        gen = int(info.get("generation", 0))
        tid = threading.get_ident()
        if phase == "start":
            self._t0[tid] = (time.perf_counter(), self._phase() if gen == 2 else "")
            return
        started = self._t0.pop(tid, None)
        if started is None:
            return
        dt = time.perf_counter() - started[0]
        self.by_gen[gen][0] += 1
        self.by_gen[gen][1] += dt
        if gen == 2:
            self.full.append({"s": round(dt, 3), "phase": started[1], "thread": threading.current_thread().name,
                              "collected": info.get("collected")})

    def start(self) -> "GcClock":
        self._on = True
        gc.callbacks.append(self._cb)
        return self

    def stop(self) -> dict[str, Any]:
        self._on = False
        try:
            gc.callbacks.remove(self._cb)
        except ValueError:
            pass
        by_phase: dict[str, float] = {}
        for c in self.full:
            by_phase[c["phase"]] = round(by_phase.get(c["phase"], 0.0) + c["s"], 3)
        return {"seconds_by_generation": {g: round(s, 3) for g, (n, s) in self.by_gen.items()},
                "collections_by_generation": {g: n for g, (n, s) in self.by_gen.items()},
                "full_by_phase_s": by_phase, "full": self.full[:40],
                "tracked_objects_after": len(gc.get_objects())}
