"""Build info, the start time (restarts are its changes), loop restarts and reconcile errors."""

from __future__ import annotations

import asyncio
import platform

from controller.clock import FakeClock
from controller.metrics import REGISTRY
from controller.operator.metrics import record_start, version
from controller.state.queue import WorkQueue


def test_build_info_and_start_time() -> None:
    record_start(now=1_795_000_000.0, commit_id="abc123def456")
    labels = {"version": version(), "python_version": platform.python_version(), "commit": "abc123def456"}
    assert REGISTRY.get_sample_value("joiner_build_info", labels) == 1
    assert REGISTRY.get_sample_value("joiner_controller_start_time_seconds") == 1_795_000_000.0
    assert version() not in ("", "unknown")  # the installed package's version


async def test_a_failing_reconcile_is_counted_by_controller_and_retried() -> None:
    clock = FakeClock()
    queue = WorkQueue(name="metrics-test", clock=clock)
    calls = 0

    async def handler(key: str) -> float | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        return None

    def errors() -> float:
        return (
            REGISTRY.get_sample_value("joiner_controller_reconcile_errors_total", {"controller": "metrics-test"}) or 0
        )

    before = errors()
    assert REGISTRY.get_sample_value("joiner_controller_reconcile_errors_total", {"controller": "metrics-test"}) == 0
    runner = asyncio.ensure_future(queue.run(handler, workers=1))
    queue.add("k")
    for _ in range(20):
        await asyncio.sleep(0)
    assert errors() - before == 1
    await clock.advance(5)
    assert calls == 2
    assert errors() - before == 1
    runner.cancel()


async def test_a_crashed_controller_loop_is_restarted_and_counted() -> None:
    from controller.operator.app import _supervise

    clock = FakeClock()
    runs = 0

    async def crashing() -> None:
        nonlocal runs
        runs += 1
        if runs <= 2:
            raise RuntimeError("bug")
        await asyncio.Event().wait()

    def restarts() -> float:
        return REGISTRY.get_sample_value("joiner_controller_restarts_total", {"controller": "Crashing"}) or 0

    before = restarts()
    task = asyncio.create_task(_supervise("Crashing", crashing, clock))
    for _ in range(10):
        await asyncio.sleep(0)
    assert restarts() - before == 1
    await clock.advance(1)  # backoff 1 s, crashes again
    await clock.advance(2)  # backoff 2 s, then it keeps running
    assert runs == 3
    assert restarts() - before == 2
    task.cancel()
