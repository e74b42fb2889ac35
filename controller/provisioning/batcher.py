"""Collects bursts of pending pods into one decision.

A batch opens with the first trigger and closes when `idle` seconds pass without another trigger,
or `max_wait` seconds after it opened, whichever comes first. Waiting uses the injected clock.

`arriving` (optional) says whether more of the burst is on its way although nothing triggered:
the provisioner answers with "kube-scheduler has pods it has not tried yet". While it holds, a
quiet period does not close the batch; `max_wait` still does. One decision for the whole burst
buys fewer, better-packed nodes than one per fragment, and fragments decided early slow down the
rest: every new node makes kube-scheduler retry all pending pods before it reaches untried ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from controller.clock import Clock


class Batcher:
    def __init__(
        self,
        *,
        clock: Clock,
        idle_seconds: float,
        max_seconds: float,
        arriving: Callable[[], bool] | None = None,
    ) -> None:
        self._clock = clock
        self._idle = idle_seconds
        self._max = max_seconds
        self._arriving = arriving
        self._trigger = asyncio.Event()
        self._open = False

    def trigger(self) -> None:
        """Something happened that may need new capacity (a pod became unschedulable, ...)."""
        self._trigger.set()

    def poke(self) -> None:
        """Open a batch if none is open, without keeping an open one open longer: news that the
        open batch already covers (kube-scheduler's verdict on a pod it will plan anyway)."""
        if not self._open:
            self._trigger.set()

    async def _triggered_within(self, seconds: float) -> bool:
        if self._trigger.is_set():
            return True
        waiter = asyncio.ensure_future(self._trigger.wait())
        timer = asyncio.ensure_future(self._clock.sleep(seconds))
        try:
            await asyncio.wait({waiter, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            timer.cancel()
        return self._trigger.is_set()

    async def wait(self) -> float:
        """Return when a batch is complete; the result is how long the batch stayed open."""
        await self._trigger.wait()
        opened = self._clock.monotonic()
        self._open = True
        try:
            while True:
                self._trigger.clear()
                elapsed = self._clock.monotonic() - opened
                remaining = self._max - elapsed
                if remaining <= 0:
                    return elapsed
                if not await self._triggered_within(min(self._idle, remaining)) and not self._more_arriving():
                    return self._clock.monotonic() - opened
        finally:
            self._open = False

    def _more_arriving(self) -> bool:
        return self._arriving is not None and self._arriving()
