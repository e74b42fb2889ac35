"""Collects bursts of pending pods into one decision.

A batch opens with the first trigger and closes when `idle` seconds pass without another trigger,
or `max_wait` seconds after it opened, whichever comes first. Waiting uses the injected clock.

`arriving` (optional) says whether more of the burst is on its way although nothing triggered:
the provisioner answers with "kube-scheduler has pods it has not tried yet". While it holds, a
quiet period does not close the batch; `max_wait` still does. `settled` (optional) says that the
burst is known to be all in (each workload that made its pods holds as many as it wants): a batch
open for `idle` seconds then closes at once, without waiting for a quiet period; `wake()` asks
the open batch to look again. One decision for the whole burst
buys fewer, better-packed nodes than one per fragment, and fragments decided early slow down the
rest: every new node makes kube-scheduler retry all pending pods before it reaches untried ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from controller.clock import Clock


class Batcher:
    def __init__(
        self,
        *,
        clock: Clock,
        idle_seconds: float,
        max_seconds: float,
        arriving: Callable[[], bool] | None = None,
        settled: Callable[[], bool] | None = None,
    ) -> None:
        self._clock = clock
        self._idle = idle_seconds
        self._max = max_seconds
        self._arriving = arriving
        self._settled = settled
        self._trigger = asyncio.Event()
        self._wake = asyncio.Event()
        self._open = False

    def trigger(self) -> None:
        """Something happened that may need new capacity (a pod became unschedulable, ...)."""
        self._trigger.set()

    def poke(self) -> None:
        """Open a batch if none is open, without keeping an open one open longer: news that the
        open batch already covers (kube-scheduler's verdict on a pod it will plan anyway)."""
        if not self._open:
            self._trigger.set()

    def wake(self) -> None:
        """Have the open batch ask `settled` again now (the last pod of a workload arrived)."""
        if self._open:
            self._wake.set()

    async def _wait_for(self, seconds: float) -> Literal["trigger", "wake", "quiet"]:
        if not self._trigger.is_set() and not self._wake.is_set():
            waiters = {asyncio.ensure_future(self._trigger.wait()), asyncio.ensure_future(self._wake.wait())}
            timer = asyncio.ensure_future(self._clock.sleep(seconds))
            try:
                await asyncio.wait({*waiters, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (*waiters, timer):
                    task.cancel()
        if self._trigger.is_set():
            return "trigger"
        return "wake" if self._wake.is_set() else "quiet"

    async def wait(self) -> float:
        """Return when a batch is complete; the result is how long the batch stayed open."""
        await self._trigger.wait()
        opened = self._clock.monotonic()
        self._open = True
        try:
            quiet_until: float | None = None  # the end of the current quiet period
            while True:
                self._trigger.clear()
                self._wake.clear()
                now = self._clock.monotonic()
                elapsed = now - opened
                if elapsed >= self._max:
                    return elapsed
                if elapsed >= self._idle and self._settled is not None and self._settled():
                    return elapsed
                if quiet_until is None:
                    quiet_until = min(now + self._idle, opened + self._max)
                what = await self._wait_for(max(0.0, quiet_until - now))
                if what == "wake":
                    continue  # the same quiet period goes on
                if what == "quiet" and not self._more_arriving():
                    return self._clock.monotonic() - opened
                quiet_until = None
        finally:
            self._open = False

    def _more_arriving(self) -> bool:
        return self._arriving is not None and self._arriving()
