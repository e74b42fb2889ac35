"""A gang under its NodePool's $/hour budget or limits.nodes: bought whole, or not at all and told why."""

from __future__ import annotations

from typing import Any

from controller.kube.resources import NODECLAIMS, NODEPOOLS
from controller.nodeclaim.lifecycle import LifecycleController
from controller.termination.controller import TerminationController
from tests.unit.gang.test_controller import events, gang_pod, gated, start_gangs
from tests.unit.harness import Harness

Obj = dict[str, Any]


async def pool(h: Harness, *, capacity: Obj | None = None, limits: Obj | None = None) -> None:
    spec: Obj = {
        "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}}}
    }
    if capacity:
        spec["capacity"] = capacity
    if limits:
        spec["limits"] = limits
    await h.kube.create(
        NODEPOOLS, {"apiVersion": "joiner.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"}, "spec": spec}
    )
    await h.cached("NodePool", "gpu")


async def waiting_message(h: Harness, name: str) -> str:
    await h.eventually(lambda: "GangWaitingForCapacity" in [e["reason"] for e in events(h, name)], "an Event")
    return str(next(e["message"] for e in events(h, name) if e["reason"] == "GangWaitingForCapacity"))


async def test_a_gang_that_would_cross_the_budget_buys_nothing_and_waits_saying_why(harness: Harness) -> None:
    h = harness
    h.start(LifecycleController(h.ctx), TerminationController(h.ctx))
    await h.create_nodeclass()
    await pool(h, capacity={"budget": {"maxPricePerHour": "200"}})  # three gpu-8 at $98/h make $294/h
    for name in ("w0", "w1", "w2"):
        await gang_pod(h, name)
    start_gangs(h)
    message = await waiting_message(h, "w0")
    assert 'nodepool "gpu": its budget is $200.00/h' in message
    assert "gpu-8 at $98.00/h would cross it" in message
    assert h.kube.objects(NODECLAIMS) == {}
    assert all(gated(h, n) for n in ("w0", "w1", "w2"))


async def test_a_gang_over_limits_nodes_buys_nothing(harness: Harness) -> None:
    h = harness
    h.start(LifecycleController(h.ctx), TerminationController(h.ctx))
    await h.create_nodeclass()
    await pool(h, limits={"nodes": "2"})
    for name in ("w0", "w1", "w2"):
        await gang_pod(h, name)
    start_gangs(h)
    message = await waiting_message(h, "w1")
    assert (
        'nodepool "gpu": all available instance types exceed limits for nodepool '
        "(limits.nodes is 2 and it has 0 and 2 more planned)"
    ) in message
    assert h.kube.objects(NODECLAIMS) == {}


async def test_a_gang_within_the_budget_is_bought_whole(harness: Harness) -> None:
    h = harness
    h.start(LifecycleController(h.ctx), TerminationController(h.ctx))
    await h.create_nodeclass()
    await pool(h, capacity={"budget": {"maxPricePerHour": "300"}}, limits={"nodes": "3"})
    for name in ("w0", "w1", "w2"):
        await gang_pod(h, name)
    start_gangs(h)
    await h.eventually(lambda: len(h.kube.objects(NODECLAIMS)) == 3, "the gang's three NodeClaims")
