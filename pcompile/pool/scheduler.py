"""Longest-job-first queue shared by the daemon's worker slots.

Why longest first: a compile batch finishes when its slowest kernel does. Starting the big
kernels first and filling the gaps with small ones shortens that tail (the LPT rule), which
FIFO does not: a large kernel submitted last would run alone at the end. The weight is the
client's estimate (source size, or a past timing); ties go to the earlier submission.
"""
from __future__ import annotations

import heapq
import itertools
import threading
from typing import Generic, Hashable, TypeVar

T = TypeVar("T")


class LongestFirstQueue(Generic[T]):
    """A blocking max-priority queue by weight, FIFO among equals, with removal by owner."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable, T]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False

    def push(self, item: T, weight: float, owner: Hashable = None) -> None:
        with self._cond:
            heapq.heappush(self._heap, (-float(weight), next(self._seq), owner, item))
            self._cond.notify()

    def pop(self, timeout: float | None = None) -> T | None:
        """The heaviest item, waiting up to `timeout` seconds; None on timeout or close."""
        with self._cond:
            while True:
                if self._heap:
                    return heapq.heappop(self._heap)[3]
                if self._closed:
                    return None
                if not self._cond.wait(timeout):
                    return None

    def drop_owner(self, owner: Hashable) -> int:
        """Forget every queued item of `owner` (a client that disconnected); returns how many."""
        with self._cond:
            before = len(self._heap)
            self._heap = [entry for entry in self._heap if entry[2] != owner]
            heapq.heapify(self._heap)
            return before - len(self._heap)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._heap)
