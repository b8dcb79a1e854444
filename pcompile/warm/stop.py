"""Stop the script after N training steps, without changing anything Dynamo traces.

The stop is raised where `torch.autograd.backward` begins (user code calls it eagerly): step k is
complete when the next step's first backward begins, so the script stops after N full
forward/backward/optimizer steps (and the next forward, usually a cache hit).

What a step is: a script that makes a `torch.optim.Optimizer` steps it once per training step,
after one backward or after several (gradient accumulation: build-nanogpt's 8 micro-steps, DDP's
`no_sync` micro-batches). Counting backward calls would stop such a script inside its first
accumulation loop, before the optimizer's step, the grad clipping and everything after them ran
(or compiled), and report micro-steps as steps. So with an optimizer made, a step is counted at
the optimizer's step (torch's global step post-hook; several optimizers stepping together, as
Muon + Adam, count once); without one (hand-written updates), each backward is a step. Whether a
backward ended a step is judged when the next one begins (or the script ends), by what happened in
between: a stray backward before the optimizer is made (modded-nanogpt's
`torch.empty(1, device="cuda", requires_grad=True).backward()` at import) is then no step.

Which steps count: in a warm (`compiled_only`), only those in which compiled code ran. A script
that times an eager baseline first (two eager steps, then the compiled model) would otherwise end
the default 2-step warm before its compiled code ran. A compiled graph that runs after the
optimizer stepped (and before the next backward) is the next step's forward; any other belongs to
the current step (its forward, backward, clipping, a compiled `opt.step()`). Eager steps are
counted apart (`eager_steps`) and the summary says when no compiled code ran at all.

CUDA graphs: a `torch.cuda.graph` capture holding a training step (a backward or an optimizer
step) is no step itself (nothing runs while capturing); each replay of it is one, counted at the
replay and stopped at the replay after the last.

The post-hook only sets an attribute (the count is taken at the next backward, eagerly): Dynamo,
tracing a compiled `opt.step()`, replays that as a side effect, and the step's graph (so its cache
key) is the same as without the hook; anything more (a progress write) would break its graph.
"""
from __future__ import annotations

import functools
import time
from typing import Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook


class WarmStop(BaseException):
    """Raised at the step boundary; BaseException so a script's `except Exception` lets it pass."""


class StepCounter:
    def __init__(self, steps: int, on_step: Callable[[int, float], None] | None = None, compiled_only: bool = False) -> None:
        self.steps = steps
        self.done = 0
        self.backwards = 0
        self.compiled_only = compiled_only
        self.compiled_runs = 0  # compiled graphs run (compiled_ran(), from the warm's hook)
        self.eager_steps = 0  # steps that ran no compiled code (not counted in `done` when compiled_only)
        self.replays = 0  # CUDA graph replays that were steps
        self._runs_now = 0  # compiled graphs run in the current step
        self._runs_next = 0  # ... after its optimizer stepped: the next step's
        self._capture: tuple[int, int] | None = None  # (backwards, compiled_runs) at a capture's start
        self.on_step = on_step
        self.t0 = time.monotonic()
        self.optimizer_made = False
        self._stepped = False  # an optimizer stepped since the last backward began
        self._pending = False  # a backward ran since then
        self._undo: list[Callable[[], None]] = []

    def _optimizer_stepped(self, *_args) -> None:
        self._stepped = True

    def compiled_ran(self) -> None:
        self.compiled_runs += 1
        if self._stepped:
            self._runs_next += 1
        else:
            self._runs_now += 1

    def _count(self, compiled: bool) -> None:
        if self.compiled_only and not compiled:
            self.eager_steps += 1
            return
        self.done += 1
        if self.on_step:
            self.on_step(self.done, time.monotonic() - self.t0)

    def _judge(self, backward_ends_step: bool = True) -> None:
        """Did the last backward end a step? Called when the next begins, and at the end."""
        if self._stepped or (self._pending and backward_ends_step and not self.optimizer_made):
            self._count(self._runs_now > 0)
            self._runs_now, self._runs_next = self._runs_next, 0
        self._stepped = self._pending = False

    def _stop_if_done(self) -> None:
        if self.steps and self.done >= self.steps:  # 0: no limit, the script runs to its end
            raise WarmStop(f"stopped after {self.steps} steps")

    def finish(self, completed: bool = True) -> int:
        """Steps done, the last one included when the script ended after it (`completed`); a
        script that failed after a backward with no optimizer did not finish that step."""
        self._judge(backward_ends_step=completed)
        return self.done

    def install(self) -> None:
        original = torch.autograd.backward
        optim = torch.optim.Optimizer
        original_init = optim.__init__

        from pcompile.compat.warm_runtime import untraced, untraced_frame

        @untraced
        def before() -> None:
            if self._capture is None:
                self._judge()
                self._stop_if_done()

        @untraced
        def after() -> None:
            self.backwards += 1
            self._pending = True

        def backward(*args, **kwargs):
            before()
            result = original(*args, **kwargs)  # the script's hooks run in here: traced as stock
            after()
            return result

        @functools.wraps(original_init)
        def init(opt, *args, **kwargs):
            self.optimizer_made = True
            original_init(opt, *args, **kwargs)

        torch.autograd.backward = untraced_frame(backward)
        optim.__init__ = untraced_frame(init)  # a subclass's methods (add_param_group) run in it
        handle = register_optimizer_step_post_hook(self._optimizer_stepped)

        def undo() -> None:
            torch.autograd.backward = original
            optim.__init__ = original_init
            handle.remove()

        self._undo.append(undo)
        self._count_graph_replays(untraced)

    def _count_graph_replays(self, untraced: Callable[[Callable], Callable]) -> None:
        """Each replay of a captured training step is a step (see the module docstring)."""
        graph = getattr(torch.cuda, "CUDAGraph", None)
        if graph is None:
            return
        begin, end, replay = graph.capture_begin, graph.capture_end, graph.replay

        def capture_begin(g, *args, **kwargs):
            self._judge()  # the warm-up steps before the capture are steps of their own
            self._capture = (self.backwards, self.compiled_runs)
            return begin(g, *args, **kwargs)

        def capture_end(g, *args, **kwargs):
            try:
                return end(g, *args, **kwargs)
            finally:
                if self._capture is not None:
                    backwards, runs = self._capture
                    g._pcompile_step = (self.backwards > backwards or self._stepped, self.compiled_runs > runs)
                    self._capture = None
                    self._stepped = self._pending = False  # the capture ran nothing: no step
                    self._runs_now = self._runs_next = 0

        def replay_(g, *args, **kwargs):
            is_step, compiled = getattr(g, "_pcompile_step", (False, False))
            if not is_step:
                return replay(g, *args, **kwargs)
            self._judge()
            self._stop_if_done()
            result = replay(g, *args, **kwargs)
            self.replays += 1
            self._count(compiled)
            return result

        graph.capture_begin, graph.capture_end, graph.replay = untraced(capture_begin), untraced(capture_end), untraced(replay_)

        def undo() -> None:
            graph.capture_begin, graph.capture_end, graph.replay = begin, end, replay

        self._undo.append(undo)

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()
