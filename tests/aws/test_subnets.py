"""Which subnet of a zone a launch uses: the one with the most free addresses, less those already
launched into it and not yet counted by EC2; a zone whose subnets are full is tried last."""

from __future__ import annotations

from controller.clock import FakeClock
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.provider import AWSCloudProvider
from tests.aws.conftest import FaultProxy, World, nodeclaim, overrides_of, resolve_into


def add_subnet(world: World, *, zone: str, cidr: str) -> str:
    subnet = world.ec2.create_subnet(VpcId=world.vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]
    world.ec2.create_tags(Resources=[subnet], Tags=[{"Key": "joiner.sh/test", "Value": world.tag}])
    return str(subnet)


def subnets_used(proxy: FaultProxy) -> list[set[str]]:
    return [{s for _, _, s in overrides_of(p)} for a, p in proxy.requests if a == "CreateFleet"]


async def test_the_subnet_with_the_most_free_addresses_less_those_in_flight(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock, proxy: FaultProxy
) -> None:
    cidr = world.ec2.describe_vpcs(VpcIds=[world.vpc])["Vpcs"][0]["CidrBlock"]  # 10.N.0.0/16
    base = cidr.rsplit(".", 2)[0]
    # zone a: the world's /24 (251 free), a /26 (59 free) and a /27 (27 free)
    small = add_subnet(world, zone="us-east-1a", cidr=f"{base}.10.0/27")
    medium = add_subnet(world, zone="us-east-1a", cidr=f"{base}.11.0/26")
    await resolve_into(world, world.nodeclass(), api=api, clock=clock)
    only_a = ["us-east-1a"]

    def claim(name: str) -> dict[str, object]:
        c = nodeclaim(name, types=["g6.xlarge"], capacity_types=["on-demand"])
        c["spec"]["requirements"].append({"key": "topology.kubernetes.io/zone", "operator": "In", "values": only_a})
        return c

    big = world.subnets["us-east-1a"]
    for i in range(4):  # 251 free: each launch takes the instance's address and its 58 pods' (59)
        await provider.create(claim(f"nc-{i}"))
    used = subnets_used(proxy)
    assert used[:4] == [{big}] * 4  # 251, 192, 133, 74 left when chosen
    # 15 left in the big one now: the /26 (59) is the roomiest, then the /27 (27)
    await provider.create(claim("nc-4"))
    await provider.create(claim("nc-5"))
    assert subnets_used(proxy)[4:] == [{medium}, {small}]


async def test_a_zone_whose_subnets_are_full_is_tried_last(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock, proxy: FaultProxy
) -> None:
    base = world.ec2.describe_vpcs(VpcIds=[world.vpc])["Vpcs"][0]["CidrBlock"].rsplit(".", 2)[0]
    tiny = add_subnet(world, zone="us-east-1a", cidr=f"{base}.20.0/28")  # 11 free
    terms = [{"id": tiny}, {"id": world.subnets["us-east-1b"]}, {"id": world.subnets["us-east-1c"]}]
    await resolve_into(world, world.nodeclass(subnetSelectorTerms=terms), api=api, clock=clock)
    first = nodeclaim("nc-a", types=["g6.xlarge"], capacity_types=["on-demand"])
    first["spec"]["requirements"].append(
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}
    )
    await provider.create(first)  # 11 free, 59 now in flight: zone a is full
    await provider.create(nodeclaim("nc-any", types=["g6.xlarge"], capacity_types=["on-demand"]))
    fleet = [p for a, p in proxy.requests if a == "CreateFleet"][-1]
    by_priority = sorted(
        (float(fleet[k]), fleet[k.removesuffix("Priority") + "SubnetId"]) for k in fleet if k.endswith(".Priority")
    )
    assert [subnet for _, subnet in by_priority][-1] == tiny
    assert len(by_priority) == 3


async def test_an_on_demand_launch_tries_the_planned_zone_first_among_equal_prices(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock, proxy: FaultProxy
) -> None:
    """On-demand costs the same in every zone: the solver spreads such ties over the zones and
    writes its choice as joiner.sh/planned-zone; EC2 follows joiner's order (prioritized)."""
    await resolve_into(world, world.nodeclass(), api=api, clock=clock)

    def first_zone() -> str:
        fleet = [p for a, p in proxy.requests if a == "CreateFleet"][-1]
        assert fleet["OnDemandOptions.AllocationStrategy"] == "prioritized"
        by_priority = sorted(
            (float(fleet[k]), fleet[k.removesuffix("Priority") + "SubnetId"]) for k in fleet if k.endswith(".Priority")
        )
        assert len(by_priority) == len(world.subnets)  # every zone stays a fallback
        zone_of = {subnet: zone for zone, subnet in world.subnets.items()}
        return zone_of[by_priority[0][1]]

    for planned in ("us-east-1b", "us-east-1c", "us-east-1a"):
        claim = nodeclaim(f"nc-{planned}", types=["g6.xlarge"], capacity_types=["on-demand"])
        claim["metadata"]["annotations"] = {"joiner.sh/planned-zone": planned}
        await provider.create(claim)
        assert first_zone() == planned
    await provider.create(nodeclaim("nc-unplanned", types=["g6.xlarge"], capacity_types=["on-demand"]))
    assert first_zone() == "us-east-1a"  # no plan: the catalog's order
