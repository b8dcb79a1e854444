"""What every compile pool offers: concurrent.futures' `submit`, plus weighted jobs.

Inductor only calls `submit(fn, *args, **kwargs)`; pcompile's hook calls `submit_job` with a
weight (longest first), a timeout and an in-process fallback. One definition keeps the node pool
and the Ray pool interchangeable.
"""
from __future__ import annotations

import abc
from concurrent.futures import Future
from typing import Any, Callable


class JobPool(abc.ABC):
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return self.submit_job(fn, args, kwargs)

    @abc.abstractmethod
    def submit_job(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        weight: float = 0.0,
        timeout: float | None = None,
        label: str | None = None,
        fallback: Callable[[], Any] | None = None,
    ) -> Future: ...

    @abc.abstractmethod
    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...
