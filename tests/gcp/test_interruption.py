"""Spot preemption and host events: audit log entries the fake publishes to its Pub/Sub subscription,
pulled by PubSubSource and handled by the same interruption controller as AWS's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.cloudprovider.gcp.api import GCPApi
from controller.cloudprovider.gcp.provider import GCPCloudProvider
from controller.cloudprovider.gcp.pubsub import PubSubSource, parse
from controller.cloudprovider.notices import SCHEDULED_CHANGE, SPOT_INTERRUPTION, MalformedMessage, Notice
from controller.cloudprovider.types import OfferingId
from controller.interruption.controller import InterruptionController
from controller.kube.resources import NODECLAIMS
from tests.gcp.conftest import nodeclaim
from tests.gcp.fake_gce import PROJECT, FakeGCE
from tests.unit.harness import Harness, make_harness

Obj = dict[str, Any]
SUBSCRIPTION = f"projects/{PROJECT}/subscriptions/interruptions"


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = await make_harness()
    try:
        yield harness
    finally:
        await harness.close()


@pytest.fixture
def controller(h: Harness, api: GCPApi) -> InterruptionController:
    return InterruptionController(h.ctx, source=PubSubSource(api=api, subscription=SUBSCRIPTION), parse=parse)


async def launched(h: Harness, provider: GCPCloudProvider, name: str, *, capacity_type: str) -> str:
    """A NodeClaim whose instance the provider launched on the fake, recorded as the lifecycle does."""
    inst = await provider.create(nodeclaim(name, types=["g2-standard-8"], capacity_types=[capacity_type]))
    await h.create_claim(name, instance_types=["g2-standard-8"])
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


async def test_a_spot_preemption_deletes_the_nodeclaim_and_marks_the_offering(
    h: Harness, provider: GCPCloudProvider, gce: FakeGCE, controller: InterruptionController
) -> None:
    zone = await launched(h, provider, "nc-spot", capacity_type="spot")
    gce.preempt(zone, "nc-spot")
    assert await controller.poll_once() == 1
    await h.settle()
    assert h.claim("nc-spot") is None
    assert OfferingId("g2-standard-8", zone, "spot") in h.ctx.unavailable.current()
    assert gce.subscriptions[SUBSCRIPTION].messages == []  # acknowledged


@pytest.mark.parametrize("method", ["compute.instances.hostError", "compute.instances.terminateOnHostMaintenance"])
async def test_host_events_drain_and_replace_without_marking_offerings(
    h: Harness, provider: GCPCloudProvider, gce: FakeGCE, controller: InterruptionController, method: str
) -> None:
    zone = await launched(h, provider, "nc-host", capacity_type="on-demand")
    gce.host_event(zone, "nc-host", method)
    assert await controller.poll_once() == 1
    await h.settle()
    assert h.claim("nc-host") is None
    assert h.ctx.unavailable.current() == frozenset()
    assert gce.subscriptions[SUBSCRIPTION].messages == []


async def test_other_audit_entries_are_ignored_and_garbage_is_dropped(
    h: Harness, provider: GCPCloudProvider, gce: FakeGCE, controller: InterruptionController
) -> None:
    zone = await launched(h, provider, "nc-keep", capacity_type="on-demand")
    gce.publish(PROJECT, zone, "nc-keep", "compute.instances.setLabels", "labels set")
    gce.publish(PROJECT, zone, "unknown-vm", "compute.instances.preempted", "Instance was preempted.")
    assert await controller.poll_once() == 2
    await h.settle()
    assert h.claim("nc-keep") is not None
    assert gce.subscriptions[SUBSCRIPTION].messages == []


def test_parse_reads_the_audit_log_entry() -> None:
    entry = {
        "protoPayload": {
            "methodName": "compute.instances.preempted",
            "resourceName": "projects/p/zones/us-central1-a/instances/nc-1",
        }
    }
    assert parse(json.dumps(entry)) == [Notice(SPOT_INTERRUPTION, "nc-1", "preempted")]
    entry["protoPayload"]["methodName"] = "compute.instances.hostError"
    assert parse(json.dumps(entry)) == [Notice(SCHEDULED_CHANGE, "nc-1", "hostError")]
    entry["protoPayload"]["methodName"] = "v1.compute.instances.insert"
    assert parse(json.dumps(entry)) == []
    with pytest.raises(MalformedMessage):
        parse("not json")
    with pytest.raises(MalformedMessage):
        parse(json.dumps({"jsonPayload": {}}))
    with pytest.raises(MalformedMessage):
        parse(json.dumps({"protoPayload": {"methodName": "compute.instances.preempted", "resourceName": "x"}}))
