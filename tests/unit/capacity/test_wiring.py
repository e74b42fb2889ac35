"""The capacity controller, the provisioner and the NodePool status together, against the in-memory
apiserver and the fake clock: the buffer is bought before any pod, refilled behind a pod that took
warm room, opened and closed by a schedule, and stopped by limits and the budget, with words that say so."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from api.v1.labels import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE
from controller import metrics
from controller.capacity.controller import CapacityController
from controller.kube.resources import NODECLAIMS, NODEPOOLS, NODES, PODS
from controller.provisioning.nodepool_status import NodePoolStatusController
from controller.provisioning.provisioner import Provisioner
from tests.unit.harness import Harness, make_harness

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"


def pool(name: str = "gpu", *, capacity: Obj | None = None, limits: Obj | None = None) -> Obj:
    spec: Obj = {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [{"key": "joiner.sh/gpu-count", "operator": "In", "values": ["1"]}],
            }
        }
    }
    if capacity is not None:
        spec["capacity"] = capacity
    if limits is not None:
        spec["limits"] = limits
    return {"apiVersion": "joiner.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = await make_harness()
    await harness.create_nodeclass()
    try:
        yield harness
    finally:
        await harness.close()


async def with_pool(h: Harness, obj: Obj) -> None:
    await h.kube.create(NODEPOOLS, obj)
    await h.cached("NodePool", obj["metadata"]["name"])


def claims(h: Harness) -> list[Obj]:
    return list(h.kube.objects(NODECLAIMS).values())


async def cache_claims(h: Harness) -> None:
    for claim in claims(h):
        await h.cached("NodeClaim", claim["metadata"]["name"])


async def register(h: Harness, claim: Obj) -> str:
    """The claim's gpu-1 machine joined and is initialized."""
    name = str(claim["metadata"]["name"])
    labels = {
        LABEL_NODEPOOL: "gpu",
        LABEL_INSTANCE_TYPE: "gpu-1",
        LABEL_ZONE: "zone-b",
        LABEL_CAPACITY_TYPE: "spot",
        "joiner.sh/gpu-count": "1",
        "kubernetes.io/hostname": name,
    }
    await h.kube.create(
        NODES,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": f"kwok://{name}"},
            "status": {
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", GPU: "1"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    await h.kube.patch(NODECLAIMS, name, {"metadata": {"labels": labels}})
    status = {
        "providerID": f"kwok://{name}",
        "nodeName": name,
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": ""} for t in ("Launched", "Registered", "Initialized")
        ],
    }
    await h.kube.patch(NODECLAIMS, name, {"status": status}, subresource="status")
    await h.cached("Node", name)
    await h.cached("NodeClaim", name)
    return name


async def gpu_pod(h: Harness, name: str, *, node: str | None = None) -> None:
    spec: Obj = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {GPU: "1", "cpu": "1"}}}]}
    status: Obj = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    if node is not None:
        spec["nodeName"] = node
        status = {"phase": "Running"}
    await h.kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
            "status": status,
        },
    )
    await h.cached("Pod", f"default/{name}")


def created(reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value("joiner_nodeclaims_created_total", {"nodepool": "gpu", "reason": reason})
    return value or 0.0


async def test_the_buffer_is_bought_before_any_pod_and_refilled_behind_a_pod_that_took_a_warm_node(h: Harness) -> None:
    await with_pool(h, pool(capacity={"buffer": {"nodes": 2}}))
    capacity, provisioner = CapacityController(h.ctx), Provisioner(h.ctx)
    before = created("capacity")
    await capacity.reconcile("gpu")
    report = h.ctx.buffers.report("gpu")
    assert report is not None
    assert (report.wanted, report.ready, report.missing) == (2, 0, 2)
    plan = await provisioner.reconcile()
    assert plan is not None
    assert [n.choice.instance_type for n in plan.new_nodes] == ["gpu-1", "gpu-1"]
    assert len(claims(h)) == 2
    assert created("capacity") - before == 2  # written by the one writer, as capacity
    await cache_claims(h)
    # in flight: held, not ready, nothing more to buy
    await capacity.reconcile("gpu")
    report = h.ctx.buffers.report("gpu")
    assert report is not None
    assert (report.wanted, report.ready, report.missing) == (2, 0, 0)
    assert await provisioner.reconcile() is not None
    assert len(claims(h)) == 2
    names = [await register(h, c) for c in claims(h)]
    await capacity.reconcile("gpu")
    report = h.ctx.buffers.report("gpu")
    assert report is not None
    assert (report.ready, report.missing) == (2, 0)
    # a pod lands on a warm node (kube-scheduler binds it there): no NodeClaim is made for it, the
    # buffer is one short and the refill is one new NodeClaim
    await gpu_pod(h, "train-0", node=names[0])
    await capacity.reconcile("gpu")
    report = h.ctx.buffers.report("gpu")
    assert report is not None
    assert (report.ready, report.missing) == (1, 1)
    await provisioner.reconcile()
    assert len(claims(h)) == 3
    assert created("capacity") - before == 3


async def test_a_pending_pod_takes_warm_room_first_and_the_buffer_refills_behind_it(h: Harness) -> None:
    await with_pool(h, pool(capacity={"buffer": {"nodes": 1}}))
    capacity, provisioner = CapacityController(h.ctx), Provisioner(h.ctx)
    await capacity.reconcile("gpu")
    await provisioner.reconcile()
    [warm] = claims(h)
    await h.cached("NodeClaim", warm["metadata"]["name"])
    # a real pod arrives while the warm node is still coming up: it is planned onto the warm node,
    # and the buffer is bought again behind it
    await gpu_pod(h, "train-0")
    plan = await provisioner.reconcile()
    assert plan is not None
    assert plan.existing_placements == {warm["metadata"]["name"]: ("default/train-0",)}
    assert [n.pods[0].startswith("joiner.sh:buffer/") for n in plan.new_nodes] == [True]
    assert len(claims(h)) == 2


async def test_a_schedule_opens_the_buffer_and_closing_it_shrinks_the_buffer(h: Harness) -> None:
    await h.clock.advance((datetime(2026, 1, 1, 8, 59, tzinfo=UTC) - h.clock.now()).total_seconds())
    window = {"schedule": "0 9 * * *", "duration": "1h", "buffer": {"nodes": 2}}
    await with_pool(h, pool(capacity={"schedules": [window]}))
    capacity, provisioner = CapacityController(h.ctx), Provisioner(h.ctx)
    wait = await capacity.reconcile("gpu")
    assert wait == pytest.approx(60.5)  # wakes up when the window opens
    assert await provisioner.reconcile() is None
    assert claims(h) == []
    await h.clock.advance(60)
    await capacity.reconcile("gpu")
    await provisioner.reconcile()
    assert len(claims(h)) == 2
    await h.clock.advance(3600)
    await capacity.reconcile("gpu")
    report = h.ctx.buffers.report("gpu")
    assert report is not None
    assert (report.wanted, report.pods) == (0, ())  # closed: disruption may take the nodes back


async def test_the_buffer_stops_at_the_limits_and_the_pool_says_so(h: Harness) -> None:
    await with_pool(h, pool(capacity={"buffer": {"nodes": 3}}, limits={"nodes": "2"}))
    capacity, provisioner, status = CapacityController(h.ctx), Provisioner(h.ctx), NodePoolStatusController(h.ctx)
    await capacity.reconcile("gpu")
    await provisioner.reconcile()
    assert len(claims(h)) == 2
    await cache_claims(h)
    await capacity.reconcile("gpu")
    await status.reconcile("gpu")
    obj = h.kube.obj(NODEPOOLS, "gpu")
    assert obj is not None
    assert obj["status"]["buffer"] == {"wanted": 3, "ready": 0}
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conditions["BufferLimited"]["status"] == "True"
    assert conditions["BufferLimited"]["message"] == (
        'nodepool "gpu": all available instance types exceed limits for nodepool '
        "(limits.nodes is 2 and it has 0 and 2 more planned)"
    )
    assert conditions["LimitsReached"]["message"] == "nodes: 2 of 2"


async def test_a_gpu_limit_stops_the_buffer_with_the_solvers_reason(h: Harness) -> None:
    await with_pool(h, pool(capacity={"buffer": {"gpus": 2}}, limits={GPU: "1"}))
    capacity, provisioner = CapacityController(h.ctx), Provisioner(h.ctx)
    await capacity.reconcile("gpu")
    await provisioner.reconcile()
    assert len(claims(h)) == 1
    limited = h.ctx.buffers.limited("gpu")
    assert limited == (
        'nodepool "gpu": all available instance types exceed limits for nodepool '
        "(nvidia.com/gpu: 1 of 1 in use, the cheapest instance type that fits has 1)"
    )


async def test_pods_refused_by_the_budget_or_the_node_limit_get_an_event_that_says_so(h: Harness) -> None:
    await with_pool(h, pool(capacity={"budget": {"maxPricePerHour": "0.50"}}))
    provisioner = Provisioner(h.ctx)
    await gpu_pod(h, "a")
    await gpu_pod(h, "b")
    plan = await provisioner.reconcile()
    assert plan is not None
    assert len(plan.new_nodes) == 1  # $0.35/h: a second would make $0.70/h
    await asyncio.gather(*provisioner._event_tasks)
    refused = [p for p in ("a", "b") if "BudgetExceeded" in h.kube.event_reasons(p)]
    assert len(refused) == 1
    [event] = [e for e in h.kube.events(refused[0]) if e["reason"] == "BudgetExceeded"]
    assert event["type"] == "Warning"
    assert event["message"] == (
        'nodepool "gpu": its budget is $0.50/h and its nodes and the 1 planned cost $0.35/h: '
        "a gpu-1 at $0.35/h would cross it"
    )


async def test_limits_nodes_refuses_the_pod_that_needs_one_node_too_many(h: Harness) -> None:
    await with_pool(h, pool(limits={"nodes": 1}))
    provisioner = Provisioner(h.ctx)
    await gpu_pod(h, "a")
    await gpu_pod(h, "b")
    await provisioner.reconcile()
    assert len(claims(h)) == 1
    await asyncio.gather(*provisioner._event_tasks)
    assert sum("NodeLimitReached" in h.kube.event_reasons(p) for p in ("a", "b")) == 1
