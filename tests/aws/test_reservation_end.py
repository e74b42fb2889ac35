"""A reserved instance whose capacity reservation ends runs on as on-demand: the provider lists it
so, and the garbage collector's pass relabels its NodeClaim and Node ``on-demand`` with the
on-demand price. moto has no capacity reservations, so the proxy answers DescribeCapacityReservations
from a table the test changes (CancelCapacityReservation in EC2 terms)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.clock import FakeClock
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.instances import capacity_type_of
from controller.cloudprovider.aws.provider import AWSCloudProvider
from controller.cloudprovider.types import Instance
from controller.kube.resources import NODECLAIMS, NODES
from controller.nodeclaim.gc import GarbageCollector, claims_out_of_reservation
from controller.state.views import NodeClaimView
from tests.aws.conftest import TEST_PRICES, FaultProxy, Params, World, nodeclaim, resolve_into
from tests.unit.harness import Harness, make_harness

Obj = dict[str, Any]
RID = "cr-0ending"
ZONE = "us-east-1b"


def serve_reservations(proxy: FaultProxy, states: dict[str, str]) -> None:
    """DescribeCapacityReservations over ``states`` (id -> state): by id, and by the ``state`` filter
    the status controller sends; an unknown id is refused as EC2 refuses it."""

    def item(rid: str, state: str) -> str:
        return (
            f"<item><capacityReservationId>{rid}</capacityReservationId><instanceType>g6.xlarge</instanceType>"
            f"<availabilityZone>{ZONE}</availabilityZone><availableInstanceCount>1</availableInstanceCount>"
            f"<totalInstanceCount>1</totalInstanceCount><state>{state}</state>"
            "<reservationType>default</reservationType></item>"
        )

    def rule(action: str, params: Params) -> tuple[int, str] | None:
        if action != "DescribeCapacityReservations":
            return None
        ids = [v for k, v in params.items() if k.startswith("CapacityReservationId.")]
        wanted_states = [
            params[k.replace(".Name", ".Value.1")]
            for k, v in params.items()
            if k.startswith("Filter.") and k.endswith(".Name") and v == "state"
        ]
        if any(i not in states for i in ids):
            return 400, (
                '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
                "<Code>InvalidCapacityReservationId.NotFound</Code><Message>not found</Message>"
                "</Error></Errors><RequestID>x</RequestID></Response>"
            )
        rows = "".join(
            item(rid, state)
            for rid, state in sorted(states.items())
            if (not ids or rid in ids) and (not wanted_states or state in wanted_states)
        )
        return 200, (
            '<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
            f"<requestId>injected</requestId><capacityReservationSet>{rows}</capacityReservationSet>"
            "</DescribeCapacityReservationsResponse>"
        )

    proxy.rules.append(rule)


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = await make_harness()
    try:
        yield harness
    finally:
        await harness.close()


async def record(h: Harness, name: str, inst: Instance, *, price: float) -> None:
    """The NodeClaim and Node the lifecycle controller would have written for ``inst``."""
    labels = {
        "joiner.sh/nodepool": "gpu",
        "node.kubernetes.io/instance-type": inst.instance_type,
        "topology.kubernetes.io/zone": inst.zone,
        "joiner.sh/capacity-type": inst.capacity_type,
    }
    claim = nodeclaim(name, types=[inst.instance_type])
    claim["metadata"]["labels"] = labels
    claim["metadata"]["annotations"] = {"joiner.sh/planned-price": f"{price:.4f}"}
    await h.kube.create(NODECLAIMS, claim)
    await h.kube.patch(NODECLAIMS, name, {"status": {"providerID": inst.provider_id}}, subresource="status")
    await h.kube.create(
        NODES, {"metadata": {"name": f"node-{name}", "labels": dict(labels)}, "spec": {"providerID": inst.provider_id}}
    )
    await h.cached("NodeClaim", name)
    await h.cached("Node", f"node-{name}")


def labels_of(h: Harness, name: str) -> tuple[str, str, str]:
    claim = h.kube.obj(NODECLAIMS, name)
    node = h.kube.obj(NODES, f"node-{name}")
    assert claim is not None
    assert node is not None
    return (
        claim["metadata"]["labels"]["joiner.sh/capacity-type"],
        node["metadata"]["labels"]["joiner.sh/capacity-type"],
        claim["metadata"]["annotations"]["joiner.sh/planned-price"],
    )


async def test_a_cancelled_reservation_relabels_its_nodeclaim_and_node_on_demand(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock, proxy: FaultProxy, h: Harness
) -> None:
    states = {RID: "active"}
    serve_reservations(proxy, states)
    spec: Obj = {"capacityReservationSelectorTerms": [{"id": RID}]}
    await resolve_into(world, world.nodeclass(**spec), api=api, clock=clock)
    reserved = await provider.create(nodeclaim("nc-res", types=["g6.xlarge"], capacity_types=["reserved"]))
    spot = await provider.create(nodeclaim("nc-spot", types=["g6.xlarge"], capacity_types=["spot"]))
    assert (reserved.capacity_type, reserved.zone, spot.capacity_type) == ("reserved", ZONE, "spot")
    await record(h, "nc-res", reserved, price=reserved.price)
    await record(h, "nc-spot", spot, price=spot.price)
    gc = GarbageCollector(dataclasses.replace(h.ctx, cloud=provider))

    await gc.collect()  # the reservation is active: nothing changes
    assert labels_of(h, "nc-res") == ("reserved", "reserved", f"{reserved.price:.4f}")
    assert (await provider.get(reserved.provider_id)).capacity_type == "reserved"

    states[RID] = "cancelled"  # CancelCapacityReservation; the instance keeps running
    await resolve_into(world, world.nodeclass(**spec), api=api, clock=clock)  # the status refresh drops it
    await gc.collect()
    on_demand = TEST_PRICES["g6.xlarge"]
    assert labels_of(h, "nc-res") == ("on-demand", "on-demand", f"{on_demand:.4f}")
    assert labels_of(h, "nc-spot") == ("spot", "spot", f"{spot.price:.4f}")
    assert "ReservationEnded" in h.kube.event_reasons("nc-res")
    got = await provider.get(reserved.provider_id)
    assert (got.capacity_type, got.labels["joiner.sh/capacity-type"]) == ("on-demand", "on-demand")


async def test_an_expired_reservation_is_asked_about_by_id_and_a_refused_question_changes_nothing(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock, proxy: FaultProxy, h: Harness
) -> None:
    states = {RID: "active"}
    serve_reservations(proxy, states)
    spec: Obj = {"capacityReservationSelectorTerms": [{"id": RID}]}
    await resolve_into(world, world.nodeclass(**spec), api=api, clock=clock)
    inst = await provider.create(nodeclaim("nc-exp", types=["g6.xlarge"], capacity_types=["reserved"]))
    await record(h, "nc-exp", inst, price=inst.price)
    gc = GarbageCollector(dataclasses.replace(h.ctx, cloud=provider))

    # the NodeClass stops selecting the reservation while it is active: the instance is still in it
    await resolve_into(world, world.nodeclass(), api=api, clock=clock)
    await gc.collect()
    assert labels_of(h, "nc-exp")[:2] == ("reserved", "reserved")

    states[RID] = "expired"
    proxy.fail("DescribeCapacityReservations", code="UnauthorizedOperation")
    proxy.rules.insert(0, proxy.rules.pop())  # before the table answers
    await clock.advance(61)
    await gc.collect()  # EC2 could not be asked: nothing is taken for ended
    assert labels_of(h, "nc-exp")[:2] == ("reserved", "reserved")
    await clock.advance(61)
    await gc.collect()
    assert labels_of(h, "nc-exp")[:2] == ("on-demand", "on-demand")


def test_capacity_type_of_a_described_instance() -> None:
    tagged = {"Tags": [{"Key": "joiner.sh/capacity-reservation", "Value": RID}]}
    assert capacity_type_of(tagged, ended=()) == "reserved"
    assert capacity_type_of(tagged, ended={RID}) == "on-demand"
    assert capacity_type_of({"CapacityReservationId": "cr-other", **tagged}, ended={RID}) == "reserved"
    assert capacity_type_of({"InstanceLifecycle": "spot", **tagged}, ended={RID}) == "spot"
    assert capacity_type_of({}, ended=()) == "on-demand"


def test_only_reserved_claims_listed_on_demand_leave_their_reservation() -> None:
    def claim(name: str, capacity_type: str, *, deleting: bool = False) -> NodeClaimView:
        meta: Obj = {"name": name, "labels": {"joiner.sh/capacity-type": capacity_type}}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return NodeClaimView.of({"metadata": meta, "status": {"providerID": f"aws:///z/i-{name}"}})

    def inst(name: str, capacity_type: str) -> Instance:
        return Instance(
            provider_id=f"aws:///z/i-{name}", nodeclaim=name, instance_type="t", zone="z", capacity_type=capacity_type
        )

    claims = {
        "a": claim("a", "reserved"),
        "b": claim("b", "reserved"),
        "c": claim("c", "spot"),
        "d": claim("d", "reserved", deleting=True),
        "e": claim("e", "reserved"),
    }
    instances = [inst("a", "on-demand"), inst("b", "reserved"), inst("c", "on-demand"), inst("d", "on-demand")]
    found = claims_out_of_reservation(claims=claims, instances=instances)
    assert [(c.name, i.capacity_type) for c, i in found] == [("a", "on-demand")]
