"""Time, injected. Controllers never call time.* or asyncio.sleep directly.

`RealClock` is used in production; `FakeClock` lets tests move time forward by hand, so timeouts
of minutes are tested in microseconds and nothing sleeps to wait for a condition.
"""

from __future__ import annotations

import heapq
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from api.v1.types import format_duration

if TYPE_CHECKING:
    import asyncio  # the methods that wait import it: `joiner plan` reads times, never waits


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""

    async def sleep(self, seconds: float) -> None:
        """Wait this many seconds of this clock's time."""


class RealClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        import asyncio

        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that only moves when a test calls `advance`."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    async def sleep(self, seconds: float) -> None:
        import asyncio

        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking every sleeper whose deadline has come, in order."""
        import asyncio

        target = self._mono + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self._now += timedelta(seconds=deadline - self._mono)
            self._mono = deadline
            if not fut.done():
                fut.set_result(None)
            for _ in range(5):  # let the woken tasks run up to their next await
                await asyncio.sleep(0)
        self._now += timedelta(seconds=target - self._mono)
        self._mono = target
        for _ in range(5):
            await asyncio.sleep(0)


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 timestamp as Kubernetes writes it, or None."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_seconds(seconds: float) -> str:
    """A duration as users write it: ``15m``, ``1h30m``, ``45s`` (for messages and Events)."""
    return format_duration(timedelta(seconds=max(0, round(seconds))))


class TokenBucket:
    """At most ``rate`` a second on average, ``burst`` at once: :meth:`take` says whether one more
    may go now. Time comes from the clock, so tests move it."""

    def __init__(self, clock: Clock, *, rate: float, burst: int) -> None:
        self._clock = clock
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._at = clock.monotonic()

    def take(self) -> bool:
        now = self._clock.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
