"""Spot evictions and maintenance: Resource Health annotations the fake delivers on its Service Bus
queue, read by ServiceBusSource and handled by the same interruption controller as AWS's and GCP's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.cloudprovider.azure.provider import AzureCloudProvider
from controller.cloudprovider.azure.servicebus import ServiceBusSource, parse
from controller.cloudprovider.notices import SCHEDULED_CHANGE, SPOT_INTERRUPTION, MalformedMessage, Notice
from controller.cloudprovider.types import OfferingId
from controller.interruption.controller import InterruptionController
from controller.kube.resources import NODECLAIMS
from tests.azure.conftest import nodeclaim
from tests.azure.fake_arm import FakeARM
from tests.unit.harness import Harness, make_harness


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = await make_harness()
    try:
        yield harness
    finally:
        await harness.close()


@pytest.fixture
async def controller(h: Harness, fake: tuple[FakeARM, str]) -> AsyncIterator[InterruptionController]:
    async def no_token() -> str | None:
        return None

    source = ServiceBusSource(queue_url=f"{fake[1]}/servicebus/interruptions", token=no_token, wait_seconds=0)
    try:
        yield InterruptionController(h.ctx, source=source, parse=parse)
    finally:
        await source.close()


async def launched(h: Harness, provider: AzureCloudProvider, name: str, *, capacity_type: str) -> str:
    inst = await provider.create(nodeclaim(name, types=["Standard_D2s_v5"], capacity_types=[capacity_type]))
    await h.create_claim(name, instance_types=["Standard_D2s_v5"])
    labels = {
        "node.kubernetes.io/instance-type": inst.instance_type,
        "topology.kubernetes.io/zone": inst.zone,
        "joiner.sh/capacity-type": inst.capacity_type,
    }
    await h.kube.patch(NODECLAIMS, name, {"metadata": {"labels": labels}})
    await h.kube.patch(NODECLAIMS, name, {"status": {"providerID": inst.provider_id}}, subresource="status")
    await h.eventually(
        lambda: (view := h.cluster.claim_views().get(name)) is not None and view.provider_id is not None,
        what=f"{name} cached with its providerID",
    )
    return inst.zone


async def test_a_spot_eviction_deletes_the_nodeclaim_and_marks_the_offering(
    h: Harness, provider: AzureCloudProvider, arm: FakeARM, controller: InterruptionController
) -> None:
    zone = await launched(h, provider, "nc-spot", capacity_type="spot")
    arm.evict("nc-spot")
    assert await controller.poll_once() == 1
    await h.settle()
    assert h.claim("nc-spot") is None
    assert OfferingId("Standard_D2s_v5", zone, "spot") in h.ctx.unavailable.current()
    assert arm.queue == []  # completed


@pytest.mark.parametrize(
    "annotation",
    ["VirtualMachineRebootInitiatedForPlannedMaintenance", "VirtualMachineScheduledForServiceHealing"],
)
async def test_maintenance_drains_and_replaces_without_marking_offerings(
    h: Harness, provider: AzureCloudProvider, arm: FakeARM, controller: InterruptionController, annotation: str
) -> None:
    await launched(h, provider, "nc-host", capacity_type="on-demand")
    arm.annotate("nc-host", annotation)
    assert await controller.poll_once() == 1
    await h.settle()
    assert h.claim("nc-host") is None
    assert h.ctx.unavailable.current() == frozenset()


async def test_customer_initiated_annotations_are_ignored(
    h: Harness, provider: AzureCloudProvider, arm: FakeARM, controller: InterruptionController
) -> None:
    await launched(h, provider, "nc-keep", capacity_type="on-demand")
    arm.annotate("nc-keep", "VirtualMachineRestarted", context="Customer Initiated")
    assert await controller.poll_once() == 1
    await h.settle()
    assert h.claim("nc-keep") is not None
    assert arm.queue == []


def test_parse_reads_resource_health_events() -> None:
    vm = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/nc-1"
    event: dict[str, Any] = {
        "eventType": "Microsoft.ResourceNotifications.HealthResources.ResourceAnnotated",
        "subject": vm,
        "data": {"resourceInfo": {"properties": {"targetResourceId": vm, "annotationName": "VirtualMachinePreempted"}}},
    }
    assert parse(json.dumps(event)) == [Notice(SPOT_INTERRUPTION, "nc-1", "VirtualMachinePreempted")]
    event["data"]["resourceInfo"]["properties"]["annotationName"] = "VirtualMachineHostCrashed"
    cloud_event = {**{k: v for k, v in event.items() if k != "eventType"}, "type": event["eventType"]}
    assert parse(json.dumps([cloud_event])) == [Notice(SCHEDULED_CHANGE, "nc-1", "VirtualMachineHostCrashed")]
    event["eventType"] = "Microsoft.ResourceNotifications.HealthResources.AvailabilityStatusChanged"
    assert parse(json.dumps(event)) == []
    with pytest.raises(MalformedMessage):
        parse("{")
    with pytest.raises(MalformedMessage):
        parse(json.dumps({"eventType": "x"}))
