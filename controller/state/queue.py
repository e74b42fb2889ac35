"""A keyed work queue: each key is processed by one worker at a time, duplicates fold together,
and a key can be re-queued after a delay measured on the injected clock. Keys are taken in the order
they were added, or, given ``order``, lowest rank first (ties in the order they were added)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from itertools import count
from typing import Any

import structlog

from controller import metrics
from controller.clock import Clock

log = structlog.get_logger()

RECONCILE_ERRORS = metrics.counter(
    "joiner_controller_reconcile_errors_total",
    "Reconciles or timer passes that raised an error (retried later), by controller (its work queue's name, or "
    "disruption, garbage-collector, gpu-idle, interruption).",
    ("controller",),
)


class WorkQueue:
    def __init__(self, *, name: str, clock: Clock, order: Callable[[str], Any] | None = None) -> None:
        """``order``: a key's rank when it is added (comparable with every other key's rank)."""
        self.name = name
        self._clock = clock
        RECONCILE_ERRORS.labels(name)  # served as 0 from the start, so rate() has a series to read
        self._order = order
        self._seq = count()
        self._queue: asyncio.Queue[tuple[Any, int, str]] = asyncio.PriorityQueue() if order else asyncio.Queue()
        self._pending: set[str] = set()
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        self._timers: dict[str, tuple[float, asyncio.Task[None]]] = {}

    def add(self, key: str) -> None:
        if key in self._active:
            self._dirty.add(key)
            return
        if key in self._pending:
            return
        self._pending.add(key)
        self._queue.put_nowait((self._order(key) if self._order else 0, next(self._seq), key))

    def add_after(self, key: str, seconds: float) -> None:
        """Queue `key` again after `seconds`; of several requests for one key the earliest wins."""
        if seconds <= 0:
            self.add(key)
            return
        due = self._clock.monotonic() + seconds
        pending = self._timers.get(key)
        if pending is not None and not pending[1].done():
            if pending[0] <= due:
                return
            pending[1].cancel()

        async def later() -> None:
            await self._clock.sleep(due - self._clock.monotonic())
            self._timers.pop(key, None)
            self.add(key)

        self._timers[key] = (due, asyncio.create_task(later(), name=f"{self.name}-requeue-{key}"))

    def __len__(self) -> int:
        return len(self._pending)

    async def run(self, handler: Callable[[str], Awaitable[float | None]], *, workers: int = 4) -> None:
        """Process keys forever. The handler returns None when done, or seconds to look again."""

        async def worker() -> None:
            while True:
                _rank, _seq, key = await self._queue.get()
                self._pending.discard(key)
                self._active.add(key)
                try:
                    again = await handler(key)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception(f"{self.name}.reconcile_failed", key=key)
                    RECONCILE_ERRORS.labels(self.name).inc()
                    again = 5.0
                finally:
                    self._active.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)
                elif again is not None:
                    self.add_after(key, again)

        tasks = [asyncio.create_task(worker(), name=f"{self.name}-worker-{i}") for i in range(workers)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in [*tasks, *(task for _, task in self._timers.values())]:
                t.cancel()
