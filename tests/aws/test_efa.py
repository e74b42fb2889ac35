"""EFA for distributed training: EFA-capable types offer vpc.amazonaws.com/efa, and a NodeClaim that
requests it launches with every EFA interface of its type, one per network card."""

from __future__ import annotations

from controller.cloudprovider.aws.provider import AWSCloudProvider
from tests.aws.conftest import FaultProxy, World, nodeclaim

POOL = {"metadata": {"name": "gpu"}, "spec": {"template": {"spec": {"nodeClassRef": {"name": "gpu"}}}}}


async def test_efa_capable_types_offer_their_interfaces_as_a_resource(provider: AWSCloudProvider) -> None:
    types = {it.name: it for it in await provider.instance_types(POOL)}
    assert types["p5.48xlarge"].capacity.to_quantities()["vpc.amazonaws.com/efa"] == "32"
    assert "vpc.amazonaws.com/efa" not in types["g6.xlarge"].capacity.to_quantities()


async def test_a_claim_that_requests_efa_launches_with_an_efa_interface_on_every_card(
    provider: AWSCloudProvider, proxy: FaultProxy, world: World
) -> None:
    claim = nodeclaim("nc-efa", types=["p5.48xlarge"], capacity_types=["on-demand"])
    claim["spec"]["resources"]["requests"]["vpc.amazonaws.com/efa"] = "32"
    await provider.create(claim)
    template = next(p for a, p in proxy.requests if a == "CreateLaunchTemplate")
    eni = "LaunchTemplateData.NetworkInterface."
    types = {v for k, v in template.items() if k.startswith(eni) and k.endswith(".InterfaceType")}
    cards = sorted(int(v) for k, v in template.items() if k.startswith(eni) and k.endswith(".NetworkCardIndex"))
    assert types == {"efa"}
    assert cards == list(range(32))
    assert template[eni + "1.DeviceIndex"] == "0"
    assert template[eni + "2.DeviceIndex"] == "1"
    assert template[eni + "2.SecurityGroupId.1"] == world.security_group
    assert not any(k.startswith("LaunchTemplateData.SecurityGroupId") for k in template)
    # a p5 without EFA asked for: a plain primary interface, another launch template
    await provider.create(nodeclaim("nc-plain", types=["p5.48xlarge"], capacity_types=["on-demand"]))
    plain = [p for a, p in proxy.requests if a == "CreateLaunchTemplate"][1]
    assert not any(k.startswith(eni) for k in plain)
