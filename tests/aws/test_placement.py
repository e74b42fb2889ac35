"""Cluster placement groups: a named one for every instance of the class, or one per gang that joiner
creates on the gang's first launch and deletes when the gang's instances are gone (moto has no
placement groups: the proxy serves EC2's three calls)."""

from __future__ import annotations

from controller.clock import FakeClock
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.fleet import gang_placement_group
from controller.cloudprovider.aws.provider import AWSCloudProvider
from tests.aws.conftest import FaultProxy, World, nodeclaim, resolve_into, serve_placement_groups


def placed(proxy: FaultProxy) -> list[str]:
    """The placement group of each launch template created, in order ('' for none)."""
    return [
        p.get("LaunchTemplateData.Placement.GroupName", "") for a, p in proxy.requests if a == "CreateLaunchTemplate"
    ]


async def test_a_gang_launches_into_its_own_placement_group_which_goes_with_it(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock, proxy: FaultProxy
) -> None:
    groups = serve_placement_groups(proxy)
    await resolve_into(world, world.nodeclass(placementGroup={"perGang": True}), api=api, clock=clock)
    members = []
    for i in range(2):
        claim = nodeclaim(f"nc-g{i}", types=["p5.48xlarge"], capacity_types=["on-demand"])
        claim["metadata"]["labels"]["joiner.sh/gang"] = "ml.train"
        inst = await provider.create(claim)
        claim["status"] = {"providerID": inst.provider_id}
        members.append(claim)
    await provider.create(nodeclaim("nc-alone", types=["m5.large"], capacity_types=["on-demand"]))
    name = gang_placement_group(cluster_name=world.cluster, gang="ml.train")
    assert list(groups) == [name]
    assert groups[name] == {"joiner.sh/cluster": world.cluster, "joiner.sh/gang": "ml.train"}
    assert proxy.count("CreatePlacementGroup") == 2  # the second member found it made
    assert sorted(placed(proxy)) == ["", name]  # one template for the gang, one without a group
    first = members[0]["status"]["providerID"].rsplit("/", 1)[-1]
    described = world.ec2.describe_instances(InstanceIds=[first])["Reservations"][0]["Instances"][0]
    assert {t["Key"]: t["Value"] for t in described["Tags"]}["joiner.sh/gang"] == "ml.train"
    assert (await provider.collect_garbage()).placement_groups == ()  # the gang's instances run
    for claim in members:
        await provider.delete(claim)
    assert (await provider.collect_garbage()).placement_groups == ()  # a launch used it just now
    await clock.advance(601)
    assert (await provider.collect_garbage()).placement_groups == (name,)
    assert groups == {}


async def test_a_named_placement_group_takes_every_instance(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock, proxy: FaultProxy
) -> None:
    serve_placement_groups(proxy)
    await resolve_into(world, world.nodeclass(placementGroup={"name": "spine-a"}), api=api, clock=clock)
    await provider.create(nodeclaim("nc-1", types=["m5.large"], capacity_types=["on-demand"]))
    assert placed(proxy) == ["spine-a"]
    assert proxy.count("CreatePlacementGroup") == 0
