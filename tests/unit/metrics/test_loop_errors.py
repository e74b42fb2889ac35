"""Controllers that loop on a timer (garbage collection here) count a failed pass as a reconcile
error, by controller, and keep looping."""

from __future__ import annotations

import asyncio

from controller.metrics import REGISTRY
from controller.nodeclaim.gc import GarbageCollector
from tests.unit.harness import Harness, harness

__all__ = ["harness"]


class FailingOnce(GarbageCollector):
    calls = 0

    async def collect(self) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("apiserver said no")


def errors(controller: str) -> float | None:
    return REGISTRY.get_sample_value("joiner_controller_reconcile_errors_total", {"controller": controller})


async def test_a_failed_gc_pass_is_counted_and_the_next_pass_runs(harness: Harness) -> None:
    h = harness
    gc = FailingOnce(h.ctx, grace_seconds=30)
    before = errors("garbage-collector") or 0.0
    task = asyncio.create_task(gc.run())
    for _ in range(20):
        await asyncio.sleep(0)
    assert errors("garbage-collector") == before + 1
    await h.clock.advance(h.ctx.settings.gc_interval_seconds)
    assert gc.calls == 2
    assert errors("garbage-collector") == before + 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_the_interruption_handlers_error_series_is_served_at_zero() -> None:
    import controller.interruption.controller  # noqa: F401

    assert errors("interruption") is not None
