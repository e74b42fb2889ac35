"""The aws provider against a real moto server: launch, terminate, idempotency, errors, drift, GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from controller.clock import FakeClock
from controller.cloudprovider.aws.api import RETRIES, AWSApi
from controller.cloudprovider.aws.instances import instance_id_of
from controller.cloudprovider.aws.provider import AWSCloudProvider
from controller.cloudprovider.types import (
    CreateError,
    InsufficientCapacityError,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    OfferingId,
)
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.state.views import NodeClaimView
from tests.aws.conftest import TEST_PRICES, FaultProxy, World, ice_answer, nodeclaim, overrides_of, resolve_into


def instance_tags(world: World, instance_id: str) -> dict[str, str]:
    res = world.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in res.get("Tags") or []}


def state_of(world: World, instance_id: str) -> str:
    res = world.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return str(res["State"]["Name"])


async def test_instance_types_carry_the_kwok_gpu_labels_and_offerings_per_zone(provider: AWSCloudProvider) -> None:
    pool = {"metadata": {"name": "gpu"}, "spec": {"template": {"spec": {"nodeClassRef": {"name": "gpu"}}}}}
    types = {it.name: it for it in await provider.instance_types(pool)}
    p5, g6 = types["p5.48xlarge"], types["g6.xlarge"]
    assert (p5.labels["joiner.sh/gpu-name"], p5.labels["joiner.sh/gpu-count"]) == ("H100", "8")
    assert p5.labels["joiner.sh/gpu-memory"] == "81920"
    assert p5.labels["joiner.sh/gpu-manufacturer"] == "nvidia"
    assert p5.capacity.to_quantities()["nvidia.com/gpu"] == "8"
    assert (g6.labels["joiner.sh/gpu-name"], g6.labels["joiner.sh/gpu-count"]) == ("L4", "1")
    assert g6.labels["kubernetes.io/arch"] == "amd64"
    assert "nvidia.com/gpu" not in types["m5.large"].capacity.to_quantities()
    # memory: 16 GiB advertised, minus the 7.5 % VM overhead; pods: ENI-limited (4 ENIs x 14 + 2 = 58)
    assert g6.capacity.to_quantities()["memory"] == "15155Mi"
    assert g6.capacity.to_quantities()["pods"] == "58"
    assert g6.allocatable.to_quantities()["cpu"] < "4"
    zones = {(o.zone, o.capacity_type) for o in g6.offerings}
    assert {z for z, _ in zones} == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert {ct for _, ct in zones} == {"on-demand", "spot"}
    assert next(o.price for o in g6.offerings if o.capacity_type == "on-demand") == pytest.approx(0.8048)


async def test_launch_tags_and_terminate_through_create_fleet(
    provider: AWSCloudProvider, world: World, proxy: FaultProxy
) -> None:
    claim = nodeclaim("nc-1", types=["g6.xlarge", "g6.2xlarge"], capacity_types=["on-demand"])
    inst = await provider.create(claim)
    instance_id = instance_id_of(inst.provider_id)
    assert instance_id is not None
    assert inst.provider_id == f"aws:///{inst.zone}/{instance_id}"
    assert (inst.instance_type, inst.capacity_type) == ("g6.xlarge", "on-demand")
    assert inst.labels["joiner.sh/gpu-name"] == "L4"
    assert inst.zone in world.subnets
    assert proxy.count("CreateFleet") == 1
    tags = instance_tags(world, instance_id)
    assert tags["joiner.sh/cluster"] == world.cluster
    assert tags["joiner.sh/nodeclaim"] == "nc-1"
    assert tags["joiner.sh/nodepool"] == "gpu"
    assert tags["Name"] == f"{world.cluster}/nc-1"

    assert [i.provider_id for i in await provider.list()] == [inst.provider_id]
    assert (await provider.get(inst.provider_id)).nodeclaim == "nc-1"
    claim["status"] = {"providerID": inst.provider_id}
    await provider.delete(claim)
    assert state_of(world, instance_id) in ("shutting-down", "terminated")
    assert await provider.list() == []
    with pytest.raises(NodeClaimNotFoundError):
        await provider.get(inst.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        await provider.delete(claim)


async def test_a_retried_create_buys_once(
    provider: AWSCloudProvider, world: World, api: AWSApi, proxy: FaultProxy, clock: FakeClock
) -> None:
    claim = nodeclaim("nc-retry", types=["m5.large"], capacity_types=["on-demand"])
    first = await provider.create(claim)
    # the same call again, and from a restarted process (a new provider with an empty memory)
    again = await provider.create(claim)
    fresh = AWSCloudProvider(
        api=api, cluster_name=world.cluster, nodeclasses=lambda: world.classes, clock=clock, prices=TEST_PRICES
    )
    after_restart = await fresh.create(claim)
    assert first.provider_id == again.provider_id == after_restart.provider_id
    assert proxy.count("CreateFleet") == 1
    token = next(params["ClientToken"] for action, params in proxy.requests if action == "CreateFleet")
    assert token.startswith("joiner-")
    assert len(token) <= 64
    assert len(await provider.list()) == 1


async def test_insufficient_capacity_marks_offerings_and_the_next_try_falls_back(
    provider: AWSCloudProvider, proxy: FaultProxy, clock: FakeClock
) -> None:
    unavailable = UnavailableOfferings(clock=clock, ttl_seconds=180)
    provider._unavailable = unavailable
    answered = [False]

    def no_g6_xlarge(action: str, params: dict[str, str]) -> tuple[int, str] | None:
        if action != "CreateFleet" or answered[0]:
            return None
        answered[0] = True
        return 200, ice_answer([o for o in overrides_of(params) if o[1] == "g6.xlarge"])

    proxy.rules.append(no_g6_xlarge)
    claim = nodeclaim("nc-ice", types=["g6.xlarge", "g6.2xlarge"], capacity_types=["on-demand"])
    with pytest.raises(InsufficientCapacityError) as err:
        await provider.create(claim)
    assert {o.instance_type for o in err.value.offerings} == {"g6.xlarge"}
    assert len(err.value.offerings) == 3  # one per zone
    assert OfferingId("g6.xlarge", "us-east-1a", "on-demand") in unavailable.current()
    inst = await provider.create(claim)
    assert inst.instance_type == "g6.2xlarge"
    second = [p for a, p in proxy.requests if a == "CreateFleet"][1]
    assert {it for _, it, _ in overrides_of(second)} == {"g6.2xlarge"}


async def test_throttling_is_retried_then_succeeds(provider: AWSCloudProvider, proxy: FaultProxy) -> None:
    before = RETRIES.labels("ec2", "create_fleet", "RequestLimitExceeded")._value.get()
    proxy.fail("CreateFleet", code="RequestLimitExceeded", status=503, times=2)
    inst = await provider.create(nodeclaim("nc-throttle", types=["m5.large"], capacity_types=["on-demand"]))
    assert inst.instance_type == "m5.large"
    assert proxy.count("CreateFleet") == 3
    assert RETRIES.labels("ec2", "create_fleet", "RequestLimitExceeded")._value.get() == before + 2
    assert len(await provider.list()) == 1


async def test_other_errors_fail_fast_with_the_aws_code(provider: AWSCloudProvider, proxy: FaultProxy) -> None:
    proxy.fail("CreateFleet", code="InvalidParameterValue", status=400)
    with pytest.raises(CreateError) as err:
        await provider.create(nodeclaim("nc-bad", types=["m5.large"], capacity_types=["on-demand"]))
    assert err.value.reason == "InvalidParameterValue"
    assert "InvalidParameterValue" in str(err.value)
    assert proxy.count("CreateFleet") == 1


async def test_instances_of_another_cluster_are_never_listed_or_deleted(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock
) -> None:
    other = AWSCloudProvider(
        prices=TEST_PRICES,
        api=api,
        cluster_name=world.cluster + "-other",
        nodeclasses=lambda: world.classes,
        clock=clock,
    )
    theirs = await other.create(nodeclaim("nc-theirs", types=["m5.large"], capacity_types=["on-demand"]))
    ours = await provider.create(nodeclaim("nc-ours", types=["m5.large"], capacity_types=["on-demand"]))
    assert [i.provider_id for i in await provider.list()] == [ours.provider_id]
    with pytest.raises(NodeClaimNotFoundError):
        await provider.get(theirs.provider_id)
    stub = {"metadata": {"name": "nc-theirs"}, "status": {"providerID": theirs.provider_id}}
    with pytest.raises(NodeClaimNotFoundError):
        await provider.delete(stub)
    theirs_id = instance_id_of(theirs.provider_id)
    assert theirs_id is not None
    assert state_of(world, theirs_id) == "running"


async def test_drift_when_the_nodeclass_selects_another_image(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock
) -> None:
    claim = nodeclaim("nc-drift", types=["m5.large"], capacity_types=["on-demand"])
    inst = await provider.create(claim)
    claim["status"] = {"providerID": inst.provider_id}
    assert await provider.is_drifted(claim) is None
    world.tag_image(world.images[0], on=False)
    world.tag_image(world.images[1], on=True)
    await resolve_into(world, world.nodeclass(), api=api, clock=clock)
    reason = await provider.is_drifted(claim)
    assert reason is not None
    assert reason.startswith("AMIDrift")
    assert world.images[0] in reason


async def test_a_nodeclass_that_is_not_ready_stops_the_launch(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock
) -> None:
    broken = world.nodeclass(subnetSelectorTerms=[{"tags": {"joiner.sh/test": "nothing-has-this"}}])
    await resolve_into(world, broken, api=api, clock=clock)
    with pytest.raises(NodeClassNotReadyError, match="no subnet matches"):
        await provider.create(nodeclaim("nc-nr", types=["m5.large"]))


def reservations_answer(*, rid: str, instance_type: str, zone: str, available: int) -> str:
    return (
        '<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        "<requestId>injected</requestId><capacityReservationSet><item>"
        f"<capacityReservationId>{rid}</capacityReservationId><instanceType>{instance_type}</instanceType>"
        f"<availabilityZone>{zone}</availabilityZone><availableInstanceCount>{available}</availableInstanceCount>"
        f"<totalInstanceCount>{available}</totalInstanceCount><state>active</state>"
        "<reservationType>default</reservationType></item></capacityReservationSet>"
        "</DescribeCapacityReservationsResponse>"
    )


async def test_reserved_capacity_is_used_first_and_counted_as_it_fills(
    provider: AWSCloudProvider, world: World, api: AWSApi, proxy: FaultProxy, clock: FakeClock
) -> None:
    # moto has no DescribeCapacityReservations: the proxy answers it like EC2 would
    answer = reservations_answer(rid="cr-0abc", instance_type="g6.xlarge", zone="us-east-1b", available=2)
    proxy.rules.append(lambda action, params: (200, answer) if action == "DescribeCapacityReservations" else None)
    obj = await resolve_into(
        world, world.nodeclass(capacityReservationSelectorTerms=[{"id": "cr-0abc"}]), api=api, clock=clock
    )
    assert [(c["id"], c["availableInstanceCount"]) for c in obj["status"]["capacityReservations"]] == [("cr-0abc", 2)]
    pool = {"metadata": {"name": "gpu"}, "spec": {"template": {"spec": {"nodeClassRef": {"name": "gpu"}}}}}
    g6 = next(it for it in await provider.instance_types(pool) if it.name == "g6.xlarge")
    reserved = [o for o in g6.offerings if o.capacity_type == "reserved"]
    assert [(o.zone, o.available) for o in reserved] == [("us-east-1b", True)]
    assert reserved[0].price < min(o.price for o in g6.offerings if o.capacity_type == "on-demand")

    every = ["reserved", "spot", "on-demand"]
    launched = [
        await provider.create(nodeclaim(f"nc-r{i}", types=["g6.xlarge"], capacity_types=every)) for i in range(3)
    ]
    assert [(i.capacity_type, i.zone) for i in launched[:2]] == [("reserved", "us-east-1b")] * 2
    assert launched[2].capacity_type == "spot"
    g6 = next(it for it in await provider.instance_types(pool) if it.name == "g6.xlarge")
    assert [o.available for o in g6.offerings if o.capacity_type == "reserved"] == [False]
    fleets = [p for a, p in proxy.requests if a == "CreateFleet"]
    assert fleets[0]["TargetCapacitySpecification.DefaultTargetCapacityType"] == "on-demand"
    assert fleets[2]["TargetCapacitySpecification.DefaultTargetCapacityType"] == "spot"
    assert fleets[2]["SpotOptions.AllocationStrategy"] == "price-capacity-optimized"
    templates = [p for a, p in proxy.requests if a == "CreateLaunchTemplate"]
    targeted = [
        t
        for t in templates
        if "cr-0abc"
        in t.get(
            "LaunchTemplateData.CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId", ""
        )
    ]
    assert len(targeted) == 1


async def test_a_crash_between_create_fleet_and_the_status_write_leaves_no_orphan(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock
) -> None:
    from controller.nodeclaim.gc import orphaned_instances

    claim = nodeclaim("nc-crash", types=["m5.large"], capacity_types=["on-demand"])
    launched = await provider.create(claim)
    # the process dies here: the NodeClaim never records the providerID. After the restart ...
    restarted = AWSCloudProvider(
        api=api, cluster_name=world.cluster, nodeclasses=lambda: world.classes, clock=clock, prices=TEST_PRICES
    )
    instances = await restarted.list()
    assert [(i.provider_id, i.nodeclaim) for i in instances] == [(launched.provider_id, "nc-crash")]
    # ... while the NodeClaim lives, it accounts for the instance and a new create returns it
    assert orphaned_instances(instances=instances, claims={"nc-crash": NodeClaimView.of(claim)}) == []
    assert (await restarted.create(claim)).provider_id == launched.provider_id
    # once the NodeClaim is gone, garbage collection terminates the instance through the provider
    orphans = orphaned_instances(instances=instances, claims={})
    assert [o.provider_id for o in orphans] == [launched.provider_id]
    await restarted.delete({"metadata": {"name": "nc-crash"}, "status": {"providerID": orphans[0].provider_id}})
    assert await restarted.list() == []


async def test_gpu_launch_uses_the_nodeclass_launch_template(
    provider: AWSCloudProvider, world: World, proxy: FaultProxy
) -> None:
    inst = await provider.create(nodeclaim("nc-p5", types=["p5.48xlarge"], capacity_types=["spot"]))
    assert (inst.instance_type, inst.capacity_type) == ("p5.48xlarge", "spot")
    assert inst.capacity["nvidia.com/gpu"] == "8"
    assert inst.labels["joiner.sh/gpu-name"] == "H100"
    assert inst.labels["topology.kubernetes.io/region"] == "us-east-1"
    template = next(p for a, p in proxy.requests if a == "CreateLaunchTemplate")
    data = "LaunchTemplateData."
    assert template[data + "BlockDeviceMapping.1.Ebs.VolumeSize"] == "200"
    assert template[data + "BlockDeviceMapping.1.Ebs.VolumeType"] == "gp3"
    assert template[data + "MetadataOptions.HttpTokens"] == "required"
    assert template[data + "SecurityGroupId.1"] == world.security_group
    assert template[data + "IamInstanceProfile.Name"].startswith(f"joiner-{world.cluster}-")


async def test_drift_when_the_security_groups_change(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock
) -> None:
    claim = nodeclaim("nc-sg", types=["m5.large"], capacity_types=["on-demand"])
    inst = await provider.create(claim)
    claim["status"] = {"providerID": inst.provider_id}
    assert await provider.is_drifted(claim) is None
    both: dict[str, Any] = {"securityGroupSelectorTerms": [{"id": world.security_group}, {"id": world.named_group}]}
    await resolve_into(world, world.nodeclass(**both), api=api, clock=clock)
    reason = await provider.is_drifted(claim)
    assert reason is not None
    assert reason.startswith("SecurityGroupDrift")


async def test_an_instance_found_after_a_restart_is_described_in_full(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock
) -> None:
    claim = nodeclaim("nc-full", types=["g6.xlarge"], capacity_types=["on-demand"])
    first = await provider.create(claim)
    restarted = AWSCloudProvider(
        api=api, cluster_name=world.cluster, nodeclasses=lambda: world.classes, clock=clock, prices=TEST_PRICES
    )
    again = await restarted.create(claim)
    assert again.provider_id == first.provider_id
    assert again.capacity == first.capacity
    assert again.allocatable == first.allocatable
    assert again.labels == first.labels


async def test_no_fitting_instance_type_is_a_create_error(provider: AWSCloudProvider) -> None:
    with pytest.raises(CreateError) as err:
        await provider.create(nodeclaim("nc-none", types=["x9.nonexistent"]))
    assert err.value.reason == "NoCompatibleInstanceType"


async def test_drift_checks_of_many_nodeclaims_share_one_describe(
    provider: AWSCloudProvider, proxy: FaultProxy, clock: FakeClock
) -> None:
    claims = []
    for i in range(3):
        claim = nodeclaim(f"nc-many-{i}", types=["m5.large"], capacity_types=["on-demand"])
        claim["status"] = {"providerID": (await provider.create(claim)).provider_id}
        claims.append(claim)
    before = proxy.count("DescribeInstances")
    assert [await provider.is_drifted(c) for c in claims] == [None, None, None]
    assert proxy.count("DescribeInstances") == before + 1
    await clock.advance(31)
    await provider.is_drifted(claims[0])
    assert proxy.count("DescribeInstances") == before + 2
