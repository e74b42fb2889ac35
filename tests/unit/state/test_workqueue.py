"""The work queue folds duplicates, serialises a key, and re-queues on the injected clock."""

from __future__ import annotations

import asyncio
from collections import Counter

from controller.clock import FakeClock
from controller.state.queue import WorkQueue


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_duplicates_fold_and_requeue_after_delay() -> None:
    clock = FakeClock()
    queue = WorkQueue(name="test", clock=clock)
    seen: Counter[str] = Counter()

    async def handler(key: str) -> float | None:
        seen[key] += 1
        return 30.0 if key == "again" and seen[key] == 1 else None

    runner = asyncio.ensure_future(queue.run(handler, workers=2))
    for key in ("a", "a", "a", "again"):
        queue.add(key)
    await _settle()
    assert seen == Counter({"a": 1, "again": 1})
    await clock.advance(29)
    assert seen["again"] == 1
    await clock.advance(2)
    await _settle()
    assert seen["again"] == 2
    runner.cancel()


async def test_a_key_added_while_processing_runs_again() -> None:
    clock = FakeClock()
    queue = WorkQueue(name="test", clock=clock)
    release = asyncio.Event()
    calls: list[str] = []

    async def handler(key: str) -> float | None:
        calls.append(key)
        if len(calls) == 1:
            await release.wait()
        return None

    runner = asyncio.ensure_future(queue.run(handler, workers=4))
    queue.add("k")
    await _settle()
    queue.add("k")  # arrives while "k" is being handled: must not run concurrently, must run again
    await _settle()
    assert calls == ["k"]
    release.set()
    await _settle()
    assert calls == ["k", "k"]
    runner.cancel()


async def test_failing_handler_is_retried_not_fatal() -> None:
    clock = FakeClock()
    queue = WorkQueue(name="test", clock=clock)
    calls: list[str] = []

    async def handler(key: str) -> float | None:
        calls.append(key)
        if len(calls) == 1:
            raise RuntimeError("apiserver hiccup")
        return None

    runner = asyncio.ensure_future(queue.run(handler, workers=1))
    queue.add("k")
    await _settle()
    await clock.advance(5)
    await _settle()
    assert calls == ["k", "k"]
    runner.cancel()


async def test_the_earliest_requeue_wins() -> None:
    clock = FakeClock()
    queue = WorkQueue(name="test", clock=clock)
    calls: list[float] = []

    async def handler(key: str) -> float | None:
        calls.append(clock.monotonic())
        return None

    runner = asyncio.ensure_future(queue.run(handler, workers=1))
    start = clock.monotonic()
    queue.add_after("k", 300)  # a launch timeout ...
    queue.add_after("k", 10)  # ... then an earlier registration check
    await _settle()
    await clock.advance(11)
    await _settle()
    assert calls == [start + 10]
    await clock.advance(300)
    await _settle()
    assert len(calls) == 1  # the later timer was replaced, not kept as well
    runner.cancel()


async def test_an_ordered_queue_takes_the_lowest_rank_first_and_ties_as_they_came() -> None:
    clock = FakeClock()
    rank = {"late": 3, "b": 1, "a": 1, "first": 0}
    queue = WorkQueue(name="test", clock=clock, order=rank.__getitem__)
    calls: list[str] = []

    async def handler(key: str) -> float | None:
        calls.append(key)
        return None

    for key in ("late", "b", "a", "first", "b"):
        queue.add(key)
    runner = asyncio.ensure_future(queue.run(handler, workers=1))
    await _settle()
    assert calls == ["first", "b", "a", "late"]
    runner.cancel()
