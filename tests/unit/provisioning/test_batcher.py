"""The batcher closes a batch after `idle` quiet seconds or `max` seconds in all (fake clock)."""

from __future__ import annotations

import asyncio

from controller.clock import FakeClock
from controller.provisioning.batcher import Batcher


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_batch_closes_after_idle_period() -> None:
    clock = FakeClock()
    batcher = Batcher(clock=clock, idle_seconds=1.0, max_seconds=10.0)
    done = asyncio.ensure_future(batcher.wait())
    batcher.trigger()
    await _settle()
    await clock.advance(0.9)
    assert not done.done()
    await clock.advance(0.2)
    await _settle()
    assert done.done()
    assert done.result() == 1.0


async def test_each_new_pod_extends_the_batch_until_max() -> None:
    clock = FakeClock()
    batcher = Batcher(clock=clock, idle_seconds=1.0, max_seconds=10.0)
    done = asyncio.ensure_future(batcher.wait())
    batcher.trigger()
    await _settle()
    for _ in range(20):  # a pod every 0.8 s keeps the batch open ...
        await clock.advance(0.8)
        batcher.trigger()
        await _settle()
        if done.done():
            break
    assert done.done()  # ... but never beyond max_seconds
    assert 9.5 <= done.result() <= 10.0


async def test_no_batch_without_trigger() -> None:
    clock = FakeClock()
    batcher = Batcher(clock=clock, idle_seconds=1.0, max_seconds=10.0)
    done = asyncio.ensure_future(batcher.wait())
    await clock.advance(60)
    assert not done.done()
    done.cancel()


async def test_trigger_during_solve_opens_the_next_batch() -> None:
    clock = FakeClock()
    batcher = Batcher(clock=clock, idle_seconds=1.0, max_seconds=10.0)
    batcher.trigger()
    first = asyncio.ensure_future(batcher.wait())
    await _settle()
    await clock.advance(1.0)
    await _settle()
    assert first.done()
    batcher.trigger()  # arrives while the provisioner is busy with the first batch
    second = asyncio.ensure_future(batcher.wait())
    await _settle()
    await clock.advance(1.0)
    await _settle()
    assert second.done()


async def test_a_burst_still_arriving_keeps_the_batch_open_until_max() -> None:
    clock = FakeClock()
    arriving = [True]
    batcher = Batcher(clock=clock, idle_seconds=1.0, max_seconds=10.0, arriving=lambda: arriving[0])
    done = asyncio.ensure_future(batcher.wait())
    batcher.trigger()
    await _settle()
    await clock.advance(3.5)  # quiet, but kube-scheduler has not tried every pod yet
    await _settle()
    assert not done.done()
    arriving[0] = False  # it has now: the next quiet period closes the batch
    await clock.advance(1.0)
    await _settle()
    assert done.done()
    assert done.result() == 4.0


async def test_a_burst_that_never_ends_is_still_cut_at_max() -> None:
    clock = FakeClock()
    batcher = Batcher(clock=clock, idle_seconds=1.0, max_seconds=10.0, arriving=lambda: True)
    done = asyncio.ensure_future(batcher.wait())
    batcher.trigger()
    await _settle()
    for _ in range(12):
        await clock.advance(1.0)
        await _settle()
    assert done.done()
    assert done.result() == 10.0


async def test_a_poke_opens_a_batch_but_does_not_keep_an_open_one_open() -> None:
    """kube-scheduler's verdicts on pods the open batch plans anyway come every few milliseconds for
    seconds: they must not hold it open, but one that comes with no batch open starts one."""
    clock = FakeClock()
    batcher = Batcher(clock=clock, idle_seconds=1.0, max_seconds=10.0)
    done = asyncio.ensure_future(batcher.wait())
    batcher.poke()  # none open: this opens one
    await _settle()
    for _ in range(3):
        await clock.advance(0.4)
        batcher.poke()  # the open one is not extended
        await _settle()
    await _settle()
    assert done.done()
    assert done.result() == 1.0
    # after it closed, the next poke opens the next batch
    following = asyncio.ensure_future(batcher.wait())
    batcher.poke()
    await _settle()
    await clock.advance(1.1)
    await _settle()
    assert following.done()
