"""Stop the script after N training steps, without changing anything Dynamo traces.

Hooks on the optimizer would be traced into a compiled `opt.step()` and change its graph (and so
its cache key). The step boundary used instead is `torch.autograd.backward`, which user code calls
eagerly once per step: step k is complete when backward k+1 begins, so the script is stopped
there, after N full forward/backward/optimizer steps (and the next forward, usually a cache hit).
"""
from __future__ import annotations

import time
from typing import Callable

import torch


class WarmStop(BaseException):
    """Raised at the step boundary; BaseException so a script's `except Exception` lets it pass."""


class StepCounter:
    def __init__(self, steps: int, on_step: Callable[[int, float], None] | None = None) -> None:
        self.steps = steps
        self.done = 0
        self.on_step = on_step
        self.t0 = time.monotonic()
        self._original = None

    def install(self) -> None:
        self._original = original = torch.autograd.backward

        def backward(*args, **kwargs):
            if self.steps and self.done >= self.steps:  # 0: no limit, the script runs to its end
                raise WarmStop(f"stopped after {self.steps} steps")
            result = original(*args, **kwargs)
            self.done += 1
            if self.on_step:
                self.on_step(self.done, time.monotonic() - self.t0)
            return result

        torch.autograd.backward = backward
