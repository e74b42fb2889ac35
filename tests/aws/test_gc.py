"""Launch templates and instance profiles are deleted when no EC2NodeClass needs them (and, for a
profile, no live instance still runs with it); those of other clusters are never touched."""

from __future__ import annotations

from datetime import UTC, datetime

from controller.clock import FakeClock
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.provider import AWSCloudProvider
from tests.aws.conftest import TEST_PRICES, FaultProxy, World, nodeclaim, resolve_into, serve_placement_groups


def templates(world: World) -> set[str]:
    found = world.ec2.describe_launch_templates(Filters=[{"Name": "tag:joiner.sh/cluster", "Values": [world.cluster]}])
    return {t["LaunchTemplateName"] for t in found["LaunchTemplates"]}


def profiles(world: World) -> set[str]:
    return {
        p["InstanceProfileName"]
        for p in world.iam.list_instance_profiles()["InstanceProfiles"]
        if p["InstanceProfileName"].startswith(f"joiner-{world.cluster}-")
    }


async def test_what_a_deleted_nodeclass_left_is_collected_once_its_instances_are_gone(
    world: World, api: AWSApi, proxy: FaultProxy
) -> None:
    serve_placement_groups(proxy)  # moto has none; the collector asks for them too
    clock = FakeClock(start=datetime.now(UTC))  # launch templates carry moto's wall-clock CreateTime
    provider = AWSCloudProvider(
        api=api, cluster_name=world.cluster, nodeclasses=lambda: world.classes, clock=clock, prices=TEST_PRICES
    )
    await resolve_into(world, world.nodeclass("gpu"), api=api, clock=clock)
    await resolve_into(world, world.nodeclass("old", tags={"team": "old"}), api=api, clock=clock)
    await provider.create(nodeclaim("nc-gpu", types=["m5.large"], capacity_types=["on-demand"], nodeclass="gpu"))
    old = await provider.create(nodeclaim("nc-old", types=["m5.large"], capacity_types=["on-demand"], nodeclass="old"))
    assert len(templates(world)) == 2
    assert len(profiles(world)) == 2
    other = AWSCloudProvider(  # another cluster's launch template, same account
        api=api, cluster_name=world.cluster + "-x", nodeclasses=lambda: world.classes, clock=clock, prices=TEST_PRICES
    )
    await other.create(nodeclaim("nc-x", types=["m5.large"], capacity_types=["on-demand"], nodeclass="gpu"))

    assert await provider.collect_garbage() == type(await provider.collect_garbage())()  # all still needed
    del world.classes["old"]
    found = await provider.collect_garbage()
    assert [n.split("-old-")[0] for n in found.launch_templates] == [f"joiner-{world.cluster}"]
    assert found.instance_profiles == ()  # nc-old's instance still runs with it
    await provider.delete({"metadata": {"name": "nc-old"}, "status": {"providerID": old.provider_id}})
    found = await provider.collect_garbage()
    assert len(found.instance_profiles) == 1
    assert len(profiles(world)) == 1
    assert len(templates(world)) == 1
    gone = world.ec2.describe_launch_templates(
        Filters=[{"Name": "tag:joiner.sh/cluster", "Values": [world.cluster + "-x"]}]
    )["LaunchTemplates"]
    assert len(gone) == 1  # the other cluster's is not ours to delete


async def test_a_launch_template_unused_for_an_hour_is_collected(world: World, api: AWSApi, proxy: FaultProxy) -> None:
    serve_placement_groups(proxy)
    clock = FakeClock(start=datetime.now(UTC))
    provider = AWSCloudProvider(
        api=api, cluster_name=world.cluster, nodeclasses=lambda: world.classes, clock=clock, prices=TEST_PRICES
    )
    await resolve_into(world, world.nodeclass("gpu"), api=api, clock=clock)
    await provider.create(nodeclaim("nc-1", types=["m5.large"], capacity_types=["on-demand"], nodeclass="gpu"))
    await clock.advance(1800)
    assert (await provider.collect_garbage()).launch_templates == ()
    await clock.advance(1900)  # moto's CreateTime is a few seconds after the clock's start
    assert len((await provider.collect_garbage()).launch_templates) == 1
    assert templates(world) == set()
    # the next launch makes it again
    await provider.create(nodeclaim("nc-2", types=["m5.large"], capacity_types=["on-demand"], nodeclass="gpu"))
    assert len(templates(world)) == 1
