"""The forecast inside the capacity controller, against the in-memory apiserver and the fake clock:
history read from and written to its ConfigMap, a learned morning peak pre-warmed as buffer."""

from __future__ import annotations

from datetime import timedelta

from controller.capacity.controller import HISTORY_CONFIGMAP, CapacityController
from controller.capacity.history import History, deserialize, serialize
from controller.kube.resources import CONFIGMAPS
from tests.unit.capacity.test_wiring import h, pool, with_pool
from tests.unit.harness import Harness

__all__ = ["h"]
FORECAST = {"forecast": {"enabled": True}}


async def seed(harness: Harness, data: dict[str, str]) -> None:
    await harness.kube.create(
        CONFIGMAPS,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": HISTORY_CONFIGMAP, "namespace": "kube-system"},
            "data": data,
        },
        namespace="kube-system",
    )


def office_week(harness: Harness) -> History:
    """Seven days of 16 GPUs from 09:00 to 18:00 on weekdays, ending at the clock's now."""
    history = History(unit="gpu")
    now = harness.clock.now()
    t = now - timedelta(days=7)
    while t < now:
        busy = t.weekday() < 5 and 9 <= t.hour < 18
        history.record(16.0 if busy else 0.0, at=t)
        t += timedelta(hours=1)
    return history


async def test_a_learned_morning_peak_is_kept_warm_before_it_comes(h: Harness) -> None:
    await h.advance(8 * 3600 + 40 * 60)  # Thursday 08:40 UTC
    await seed(h, serialize({"gpu": office_week(h)}))
    await with_pool(h, pool(capacity=FORECAST))
    controller = CapacityController(h.ctx)
    assert await controller.sample()
    decision = controller.decisions["gpu"]
    assert decision.acted
    assert decision.prewarm == 16
    await controller.reconcile("gpu")
    report = h.ctx.buffers.report("gpu")
    assert report is not None
    assert report.wanted == 16  # sixteen one-GPU placeholders the provisioner buys for
    assert len(report.pods) == 16
    assert report.forecast == 16
    await controller.save_history()
    stored = h.kube.obj(CONFIGMAPS, HISTORY_CONFIGMAP, namespace="kube-system")
    assert stored is not None
    histories, problems = deserialize(stored["data"])
    assert problems == []
    assert histories["gpu"].peaks[h.clock.now().replace(minute=0, second=0, microsecond=0)] == 0.0  # today's sample


async def test_without_history_the_forecast_waits_and_unreadable_history_is_replaced(h: Harness) -> None:
    await seed(h, {"gpu": "{not json"})
    await with_pool(h, pool(capacity=FORECAST))
    controller = CapacityController(h.ctx)
    await controller.sample()
    decision = controller.decisions["gpu"]
    assert not decision.acted
    assert decision.prewarm == 0
    await controller.reconcile("gpu")
    report = h.ctx.buffers.report("gpu")
    assert report is not None
    assert report.wanted == 0
    assert report.forecast == 0
    await controller.save_history()
    stored = h.kube.obj(CONFIGMAPS, HISTORY_CONFIGMAP, namespace="kube-system")
    assert stored is not None
    assert History.from_json(stored["data"]["gpu"]).unit == "gpu"  # a fresh, readable history


async def test_a_pool_without_the_forecast_is_not_sampled(h: Harness) -> None:
    await with_pool(h, pool(capacity={"buffer": {"gpus": 1}}))
    controller = CapacityController(h.ctx)
    assert not await controller.sample()
    assert controller.decisions == {}
    assert h.kube.obj(CONFIGMAPS, HISTORY_CONFIGMAP, namespace="kube-system") is None
