"""What the launch requests say beyond the instance: metadata options, public IPs, capacity blocks,
and the tags EKS and the cloud controller know a cluster's machines by."""

from __future__ import annotations

from typing import Any

from api.v1.ec2nodeclass import EC2NodeClass
from controller.clock import FakeClock
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.fleet import fleet_request, template_data
from controller.cloudprovider.aws.instancetypes import Reservation
from controller.cloudprovider.aws.nodeclass import ResolvedNodeClass
from controller.cloudprovider.aws.provider import AWSCloudProvider
from tests.aws.conftest import FaultProxy, World, nodeclaim, resolve_into


def resolved(**spec: Any) -> ResolvedNodeClass:
    body = {
        "subnetSelectorTerms": [{"id": "subnet-0123456789abcdef0"}],
        "securityGroupSelectorTerms": [{"id": "sg-0123456789abcdef0"}],
        "role": "nodes",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        **spec,
    }
    model = EC2NodeClass.model_validate({"metadata": {"name": "gpu"}, "spec": body})
    return ResolvedNodeClass(
        name="gpu",
        model=model,
        subnets=({"id": "subnet-0123456789abcdef0", "zone": "us-east-1a"},),
        security_group_ids=("sg-0123456789abcdef0",),
        amis=({"id": "ami-0123456789abcdef0", "name": "al2023", "architecture": "amd64"},),
        ready=True,
        zones=("us-east-1a",),
    )


async def test_metadata_tags_are_disabled_and_imdsv2_required(
    provider: AWSCloudProvider, proxy: FaultProxy, world: World
) -> None:
    await provider.create(nodeclaim("nc-imds", types=["m5.large"], capacity_types=["on-demand"]))
    template = next(p for a, p in proxy.requests if a == "CreateLaunchTemplate")
    data = "LaunchTemplateData.MetadataOptions."
    assert template[data + "InstanceMetadataTags"] == "disabled"
    assert template[data + "HttpTokens"] == "required"
    assert template[data + "HttpPutResponseHopLimit"] == "1"
    fleet = next(p for a, p in proxy.requests if a == "CreateFleet")
    tags = {fleet[k]: fleet[k.removesuffix("Key") + "Value"] for k in fleet if k.endswith(".Key")}
    assert tags[f"kubernetes.io/cluster/{world.cluster}"] == "owned"


async def test_a_public_ip_is_asked_for_on_the_primary_interface(
    provider: AWSCloudProvider, proxy: FaultProxy, world: World, api: AWSApi, clock: FakeClock
) -> None:
    await resolve_into(world, world.nodeclass(associatePublicIPAddress=False), api=api, clock=clock)
    await provider.create(nodeclaim("nc-ip", types=["m5.large"], capacity_types=["on-demand"]))
    template = next(p for a, p in proxy.requests if a == "CreateLaunchTemplate")
    eni = "LaunchTemplateData.NetworkInterface.1."
    assert template[eni + "AssociatePublicIpAddress"] == "false"
    assert template[eni + "DeviceIndex"] == "0"
    assert template[eni + "SecurityGroupId.1"] == world.security_group
    assert not any(k.startswith("LaunchTemplateData.SecurityGroupId") for k in template)


def test_without_the_field_the_groups_stay_on_the_template() -> None:
    data = template_data(resolved(), image="ami-0123456789abcdef0", reservation=None, user_data=None)
    assert data["SecurityGroupIds"] == ["sg-0123456789abcdef0"]
    assert "NetworkInterfaces" not in data


def test_a_capacity_block_request_carries_no_on_demand_options() -> None:
    block = Reservation(id="cr-0abc", instance_type="p5.48xlarge", zone="us-east-1a", available=1, capacity_block=True)
    claim = nodeclaim("nc-block", types=["p5.48xlarge"], capacity_types=["reserved"])
    request = fleet_request(
        cluster_name="prod",
        nodeclaim=claim,
        nodeclass=resolved(),
        configs=[],
        capacity_type="reserved",
        reservation=block,
    )
    assert request["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "capacity-block"
    assert "OnDemandOptions" not in request
    assert "SpotOptions" not in request
    data = template_data(resolved(), image="ami-0123456789abcdef0", reservation=block, user_data=None)
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    on_demand = fleet_request(
        cluster_name="prod",
        nodeclaim=claim,
        nodeclass=resolved(),
        configs=[],
        capacity_type="on-demand",
        reservation=None,
    )
    assert on_demand["OnDemandOptions"] == {"AllocationStrategy": "prioritized"}
    reserved = fleet_request(
        cluster_name="prod",
        nodeclaim=claim,
        nodeclass=resolved(),
        configs=[],
        capacity_type="reserved",
        reservation=Reservation(id="cr-0od", instance_type="p5.48xlarge", zone="us-east-1a", available=1),
    )
    assert reserved["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
