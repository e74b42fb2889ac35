"""A NodePool whose nodeClassRef is an EC2NodeClass reports NodeClassReady when the class exists."""

from __future__ import annotations

import asyncio
from typing import Any

from controller.clock import FakeClock
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.context import Context
from controller.kube.events import EventRecorder
from controller.kube.resources import EC2NODECLASSES, NODEPOOLS
from controller.provisioning.nodepool_status import NodePoolStatusController
from controller.settings import Settings
from controller.state.cluster import WATCHED, ClusterState
from controller.state.writer import NodeClaimWriter
from tests.unit.fakeapi import FakeKube


def pool(kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": f"pool-{kind.lower()}"},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": kind, "name": "gpu"}}}},
    }


def condition(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    assert obj is not None
    return next(c for c in obj["status"]["conditions"] if c["type"] == ctype)


async def test_ec2nodeclass_refs_are_found_when_the_aws_provider_watches_them() -> None:
    clock = FakeClock()
    kube = FakeKube(clock=clock)
    cluster = ClusterState(source=kube, clock=clock, watched=(*WATCHED, EC2NODECLASSES))
    await kube.create(
        EC2NODECLASSES, {"apiVersion": "joiner.sh/v1", "kind": "EC2NodeClass", "metadata": {"name": "gpu"}}
    )
    for kind in ("EC2NodeClass", "KWOKNodeClass"):
        await kube.create(NODEPOOLS, pool(kind))
    task = asyncio.create_task(cluster.run())
    await cluster.wait_synced()
    ctx = Context(
        client=kube,
        cluster=cluster,
        clock=clock,
        events=EventRecorder(client=kube, clock=clock),
        cloud=None,  # type: ignore[arg-type]  # the status controller never calls the cloud
        unavailable=UnavailableOfferings(clock=clock, ttl_seconds=180),
        settings=Settings(),
        writer=NodeClaimWriter(client=kube, cluster=cluster, clock=clock),
    )
    controller = NodePoolStatusController(ctx)
    try:
        for name in ("pool-ec2nodeclass", "pool-kwoknodeclass"):
            await controller.reconcile(name)
        assert condition(kube.obj(NODEPOOLS, "pool-ec2nodeclass"), "NodeClassReady")["status"] == "True"
        missing = condition(kube.obj(NODEPOOLS, "pool-kwoknodeclass"), "NodeClassReady")
        assert missing["status"] == "False"
        assert "KWOKNodeClass 'gpu' does not exist" in missing["message"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_ec2nodeclass_that_is_not_ready_makes_its_pools_not_ready_with_its_reason() -> None:
    clock = FakeClock()
    kube = FakeKube(clock=clock)
    cluster = ClusterState(source=kube, clock=clock, watched=(*WATCHED, EC2NODECLASSES))
    refused = "CreateFleet (DryRun): refused: UnauthorizedOperation: not authorized"
    await kube.create(
        EC2NODECLASSES,
        {
            "apiVersion": "joiner.sh/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "gpu"},
            "status": {
                "conditions": [{"type": "Ready", "status": "False", "reason": "ValidationFailed", "message": refused}]
            },
        },
    )
    await kube.create(NODEPOOLS, pool("EC2NodeClass"))
    task = asyncio.create_task(cluster.run())
    await cluster.wait_synced()
    ctx = Context(
        client=kube,
        cluster=cluster,
        clock=clock,
        events=EventRecorder(client=kube, clock=clock),
        cloud=None,  # type: ignore[arg-type]  # the status controller never calls the cloud
        unavailable=UnavailableOfferings(clock=clock, ttl_seconds=180),
        settings=Settings(),
        writer=NodeClaimWriter(client=kube, cluster=cluster, clock=clock),
    )
    try:
        await NodePoolStatusController(ctx).reconcile("pool-ec2nodeclass")
        got = condition(kube.obj(NODEPOOLS, "pool-ec2nodeclass"), "NodeClassReady")
        assert (got["status"], got["reason"]) == ("False", "NodeClassNotReady")
        assert refused in got["message"]
        assert condition(kube.obj(NODEPOOLS, "pool-ec2nodeclass"), "Ready")["status"] == "False"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
