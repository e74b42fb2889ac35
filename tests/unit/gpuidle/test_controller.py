"""The idle-GPU controller on the in-memory apiserver: conditions, Events, metrics, and what
consolidation does with a node marked idle."""

from __future__ import annotations

from datetime import timedelta

from controller.disruption.budgets import REASON_EMPTY
from controller.gpuidle import controller as gpuidle
from controller.gpuidle.controller import GPUIdleController
from controller.gpuidle.prometheus import PrometheusError
from controller.gpuidle.tracker import IdlePolicy, IdleTracker
from tests.unit.disruption.world import World

RECLAIM = {"joiner.sh/idle-gpu-reclaim": "true"}


class Source:
    """Utilization the test sets; ``fail`` makes the next queries raise."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.fail = False
        self.ranges: list[int] = []

    async def utilization(self, *, range_seconds: int) -> dict[str, float]:
        self.ranges.append(range_seconds)
        if self.fail:
            raise PrometheusError("cannot reach Prometheus at http://prometheus:9090: refused")
        return dict(self.values)


def make(world: World, source: Source) -> GPUIdleController:
    policy = IdlePolicy(threshold_percent=20.0, window=timedelta(minutes=10))
    return GPUIdleController(world.h.ctx, source=source, tracker=IdleTracker(policy), poll_seconds=30.0)


async def poll_for(world: World, ctl: GPUIdleController, minutes: int) -> None:
    for _ in range(minutes * 2):
        await ctl.reconcile()
        await world.advance(30)


async def test_gpus_below_the_threshold_for_the_window_mark_the_nodeclaim_and_say_so(world: World) -> None:
    await world.nodepool()
    await world.node("gpu-a", instance_type="gpu-1")
    await world.node("gpu-b", instance_type="gpu-8")
    await world.node("cpu", instance_type="cpu-4")
    source = Source()
    source.values = {"gpu-a": 3.0, "gpu-b": 55.0, "cpu": 0.0}
    ctl = make(world, source)
    await poll_for(world, ctl, 9)
    assert world.condition("gpu-a", "GPUIdle") is None  # not a whole window yet
    await poll_for(world, ctl, 2)
    await world.settle()
    idle = world.condition("gpu-a", "GPUIdle")
    assert idle is not None
    assert idle["status"] == "True"
    assert idle["reason"] == "GPUIdle"
    assert "below 20% utilization" in idle["message"]
    assert "idle window 10m" in idle["message"]
    assert world.condition("gpu-b", "GPUIdle") is None  # busy, never marked
    assert world.condition("cpu", "GPUIdle") is None  # no GPUs: not judged
    assert "GPUIdle" in world.kube.event_reasons("gpu-a")  # on the NodeClaim and the Node (same name)
    assert gpuidle.IDLE_NODES.labels("default")._value.get() == 1
    assert gpuidle.IDLE_GPUS.labels("default")._value.get() == 1
    assert set(source.ranges) == {60}  # at least a minute back, so a slow scrape still has a sample

    source.values["gpu-a"] = 80.0
    await poll_for(world, ctl, 1)
    busy = world.condition("gpu-a", "GPUIdle")
    assert busy is not None
    assert busy["status"] == "False"
    assert busy["reason"] == "GPUBusy"
    assert "GPUBusy" in world.kube.event_reasons("gpu-a")
    assert gpuidle.IDLE_NODES.labels("default")._value.get() == 0


async def test_missing_data_and_a_long_prometheus_outage_clear_the_mark(world: World) -> None:
    await world.nodepool()
    await world.node("gpu-a", instance_type="gpu-1")
    source = Source()
    source.values = {"gpu-a": 1.0}
    ctl = make(world, source)
    await poll_for(world, ctl, 11)
    assert world.condition("gpu-a", "GPUIdle")["status"] == "True"  # type: ignore[index]
    errors = gpuidle.QUERY_ERRORS._value.get()
    source.fail = True
    await poll_for(world, ctl, 5)  # a short outage keeps the mark
    assert world.condition("gpu-a", "GPUIdle")["status"] == "True"  # type: ignore[index]
    await poll_for(world, ctl, 6)  # longer than the window without data: nothing is known
    cleared = world.condition("gpu-a", "GPUIdle")
    assert cleared is not None
    assert cleared["status"] == "False"
    assert cleared["reason"] == "NoUtilization"
    assert gpuidle.QUERY_ERRORS._value.get() - errors == 22


async def test_consolidation_reclaims_opted_in_pods_only_from_an_idle_gpu_node(world: World) -> None:
    await world.nodepool()
    await world.node("gpu-a", instance_type="gpu-1")
    await world.pod("notebook-1", "gpu-a", owned=False, annotations=RECLAIM)
    await world.node("gpu-b", instance_type="gpu-1")
    await world.pod("notebook-2", "gpu-b", owned=False, annotations=RECLAIM)
    await world.node("gpu-c", instance_type="gpu-1")
    await world.pod("session-3", "gpu-c", owned=False)  # idle too, but did not opt in
    await world.advance(31)
    decision = await world.controller.reconcile()
    assert decision.commands == ()  # nothing is idle yet: the bare pods keep their nodes

    source = Source()
    source.values = {"gpu-a": 2.0, "gpu-b": 90.0, "gpu-c": 2.0}
    await poll_for(world, make(world, source), 11)
    [command] = (await world.controller.reconcile()).commands
    assert command.reason == REASON_EMPTY
    assert command.candidates == ("gpu-a",)
    assert "reclaimed (opted in with joiner.sh/idle-gpu-reclaim): default/notebook-1" in command.detail
    blocked = " ".join(e["message"] for e in world.kube.events("gpu-c"))
    assert "has no controller" in blocked
    await world.advance(5)
    assert world.claim("gpu-a") is None
    assert world.claim("gpu-b") is not None
    assert world.claim("gpu-c") is not None
