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
    def __init__(self, steps: int, on_step: Callable[[int, float], None] | None = None) -> None:
        self.steps = steps
        self.done = 0
        self.backwards = 0
        self.on_step = on_step
        self.t0 = time.monotonic()
        self.optimizer_made = False
        self._stepped = False  # an optimizer stepped since the last backward began
        self._pending = False  # a backward ran since then
        self._undo: list[Callable[[], None]] = []

    def _optimizer_stepped(self, *_args) -> None:
        self._stepped = True

    def _judge(self, backward_ends_step: bool = True) -> None:
        """Did the last backward end a step? Called when the next begins, and at the end."""
        if self._stepped or (self._pending and backward_ends_step and not self.optimizer_made):
            self.done += 1
            if self.on_step:
                self.on_step(self.done, time.monotonic() - self.t0)
        self._stepped = self._pending = False

    def finish(self, completed: bool = True) -> int:
        """Steps done, the last one included when the script ended after it (`completed`); a
        script that failed after a backward with no optimizer did not finish that step."""
        self._judge(backward_ends_step=completed)
        return self.done

    def install(self) -> None:
        original = torch.autograd.backward
        optim = torch.optim.Optimizer
        original_init = optim.__init__

        def backward(*args, **kwargs):
            self._judge()
            if self.steps and self.done >= self.steps:  # 0: no limit, the script runs to its end
                raise WarmStop(f"stopped after {self.steps} steps")
            result = original(*args, **kwargs)
            self.backwards += 1
            self._pending = True
            return result

        @functools.wraps(original_init)
        def init(opt, *args, **kwargs):
            self.optimizer_made = True
            original_init(opt, *args, **kwargs)

        torch.autograd.backward = backward
        optim.__init__ = init
        handle = register_optimizer_step_post_hook(self._optimizer_stepped)

        def undo() -> None:
            torch.autograd.backward = original
            optim.__init__ = original_init
            handle.remove()

        self._undo.append(undo)

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()
