"""Drift beyond image, subnet and security groups: a changed EC2NodeClass spec (its hash, tagged on
the instance at launch), and a Capacity Block about to end (replaced 40 minutes before)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from controller.clock import FakeClock
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.provider import AWSCloudProvider
from tests.aws.conftest import FaultProxy, World, nodeclaim, resolve_into


async def test_a_changed_nodeclass_spec_is_drift_and_an_unchanged_one_is_not(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock
) -> None:
    claim = nodeclaim("nc-hash", types=["m5.large"], capacity_types=["on-demand"])
    inst = await provider.create(claim)
    claim["status"] = {"providerID": inst.provider_id}
    assert await provider.is_drifted(claim) is None
    # another selector that resolves to the same subnets: nothing the instance has changed
    same = [{"id": s} for s in world.subnets.values()]
    await resolve_into(world, world.nodeclass(subnetSelectorTerms=same), api=api, clock=clock)
    assert await provider.is_drifted(claim) is None
    await resolve_into(world, world.nodeclass(userData="#!/bin/bash\necho changed\n"), api=api, clock=clock)
    reason = await provider.is_drifted(claim)
    assert reason is not None
    assert reason.startswith("NodeClassDrift: EC2NodeClass gpu changed")


def block_answer(*, rid: str, zone: str, end: str, kind: str) -> str:
    return (
        '<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        "<requestId>injected</requestId><capacityReservationSet><item>"
        f"<capacityReservationId>{rid}</capacityReservationId><instanceType>g6.xlarge</instanceType>"
        f"<availabilityZone>{zone}</availabilityZone><availableInstanceCount>1</availableInstanceCount>"
        f"<totalInstanceCount>1</totalInstanceCount><state>active</state><endDate>{end}</endDate>"
        f"<reservationType>{kind}</reservationType></item></capacityReservationSet>"
        "</DescribeCapacityReservationsResponse>"
    )


async def test_an_instance_in_a_capacity_block_is_replaced_40_minutes_before_the_block_ends(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock, proxy: FaultProxy
) -> None:
    end = (clock.now() + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    # moto launches nothing for a capacity-block fleet: the instance goes into the reservation as a
    # default one, and the status then reads it back as the Capacity Block it is
    kind = ["default"]
    proxy.rules.append(
        lambda action, params: (
            (200, block_answer(rid="cr-0block", zone="us-east-1a", end=end, kind=kind[0]))
            if action == "DescribeCapacityReservations"
            else None
        )
    )
    spec: dict[str, Any] = {"capacityReservationSelectorTerms": [{"id": "cr-0block"}]}
    await resolve_into(world, world.nodeclass(**spec), api=api, clock=clock)
    claim = nodeclaim("nc-block", types=["g6.xlarge"], capacity_types=["reserved"])
    inst = await provider.create(claim)
    assert inst.capacity_type == "reserved"
    claim["status"] = {"providerID": inst.provider_id}
    kind[0] = "capacity-block"
    await resolve_into(world, world.nodeclass(**spec), api=api, clock=clock)
    assert await provider.is_drifted(claim) is None  # two hours left
    await clock.advance(timedelta(minutes=79).total_seconds())
    assert await provider.is_drifted(claim) is None  # 41 minutes left
    await clock.advance(timedelta(minutes=2).total_seconds())
    reason = await provider.is_drifted(claim)
    assert reason is not None
    assert reason.startswith("CapacityBlockExpiring: Capacity Block cr-0block ends at")
