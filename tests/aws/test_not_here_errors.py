"""Answers that mean "not here": quotas, unsupported types, full subnets, a missing Spot service-linked
role. Each marks what it refuses unavailable for the TTL, so the next NodeClaim goes elsewhere."""

from __future__ import annotations

import pytest

from controller.clock import FakeClock
from controller.cloudprovider.aws.fleet import quota_group
from controller.cloudprovider.aws.provider import AWSCloudProvider
from controller.cloudprovider.types import InsufficientCapacityError, OfferingId
from controller.cloudprovider.unavailable import UnavailableOfferings
from tests.aws.conftest import FaultProxy, Params, ice_answer, nodeclaim, overrides_of

POOL = {"metadata": {"name": "gpu"}, "spec": {"template": {"spec": {"nodeClassRef": {"name": "gpu"}}}}}


def refuse_once(
    proxy: FaultProxy, *, code: str, types: set[str], lifecycle: str = "on-demand", message: str = ""
) -> None:
    """The next CreateFleet fails with ``code`` for every override of ``types``."""
    answered = [False]

    def rule(action: str, params: Params) -> tuple[int, str] | None:
        if action != "CreateFleet" or answered[0]:
            return None
        answered[0] = True
        failed = [o for o in overrides_of(params) if o[1] in types]
        return 200, ice_answer(failed, code=code, lifecycle=lifecycle, message=message or f"injected {code}")

    proxy.rules.append(rule)


@pytest.fixture
def unavailable(provider: AWSCloudProvider, clock: FakeClock) -> UnavailableOfferings:
    marks = UnavailableOfferings(clock=clock, ttl_seconds=180)
    provider._unavailable = marks
    return marks


@pytest.mark.parametrize("code", ["Unsupported", "InsufficientFreeAddressesInSubnet"])
async def test_an_offering_that_is_not_here_is_avoided_and_the_next_try_goes_elsewhere(
    provider: AWSCloudProvider, proxy: FaultProxy, unavailable: UnavailableOfferings, code: str
) -> None:
    refuse_once(proxy, code=code, types={"g6.xlarge", "g6.2xlarge"})
    claim = nodeclaim("nc-not-here", types=["g6.xlarge", "g6.2xlarge"], capacity_types=["on-demand"])
    with pytest.raises(InsufficientCapacityError) as err:
        await provider.create(claim)
    assert err.value.reason == code
    assert not err.value.quota
    assert len(err.value.offerings) == 6  # 2 types x 3 zones
    assert OfferingId("g6.xlarge", "us-east-1b", "on-demand") in unavailable.current()


async def test_a_vcpu_quota_refuses_every_tried_type_under_that_quota_and_says_so(
    provider: AWSCloudProvider, proxy: FaultProxy, unavailable: UnavailableOfferings
) -> None:
    # the G quota is hit on g6.xlarge in one zone: the other zones and g6.2xlarge are under the same
    # quota, m5 is not
    answered = [False]

    def rule(action: str, params: Params) -> tuple[int, str] | None:
        if action != "CreateFleet" or answered[0]:
            return None
        answered[0] = True
        first_g6 = next(o for o in overrides_of(params) if o[1] == "g6.xlarge")
        return 200, ice_answer([first_g6], code="VcpuLimitExceeded", message="You have requested more vCPU capacity")

    proxy.rules.append(rule)
    claim = nodeclaim("nc-quota", types=["g6.xlarge", "g6.2xlarge", "m5.xlarge"], capacity_types=["on-demand"])
    with pytest.raises(InsufficientCapacityError) as err:
        await provider.create(claim)
    assert err.value.quota
    assert err.value.reason == "VcpuLimitExceeded"
    assert "raise the quota" in str(err.value)
    refused = {(o.instance_type, o.zone) for o in err.value.offerings}
    assert {t for t, _ in refused} == {"g6.xlarge", "g6.2xlarge"}
    assert len(refused) == 6
    assert (quota_group("g6.xlarge"), quota_group("p5.48xlarge"), quota_group("m5.large")) == ("G", "P", "Standard")


async def test_a_fleet_count_quota_refused_as_a_whole_call_is_capacity_not_a_loop(
    provider: AWSCloudProvider, proxy: FaultProxy, unavailable: UnavailableOfferings
) -> None:
    proxy.fail("CreateFleet", code="MaxFleetCountExceeded", status=400)
    with pytest.raises(InsufficientCapacityError) as err:
        await provider.create(nodeclaim("nc-fleets", types=["m5.large"], capacity_types=["on-demand"]))
    assert err.value.quota
    assert err.value.reason == "MaxFleetCountExceeded"
    assert len(err.value.offerings) == 3


async def test_a_missing_spot_service_linked_role_makes_all_spot_unavailable_and_on_demand_follows(
    provider: AWSCloudProvider, proxy: FaultProxy, unavailable: UnavailableOfferings
) -> None:
    await provider.instance_types(POOL)
    refuse_once(
        proxy,
        code="AuthFailure.ServiceLinkedRoleCreationNotPermitted",
        types={"g6.xlarge"},
        lifecycle="spot",
        message="The provided credentials do not have permission to create the service-linked role for EC2 Spot",
    )
    claim = nodeclaim("nc-spot", types=["g6.xlarge"], capacity_types=["spot", "on-demand"])
    with pytest.raises(InsufficientCapacityError) as err:
        await provider.create(claim)
    assert err.value.reason == "SpotServiceLinkedRoleMissing"
    assert "create-service-linked-role" in str(err.value)
    marked = unavailable.current()
    assert OfferingId("m5.large", "us-east-1c", "spot") in marked  # not only the claim's types: all spot
    assert all(o.capacity_type == "spot" for o in marked)
    inst = await provider.create(claim)
    assert inst.capacity_type == "on-demand"
