"""The azure provider through the real azure-mgmt-compute aio client against the fake ARM server:
catalog, launch, named retries, capacity fallback (the Failed VM removed), throttling, garbage
collection, drift and capacity reservations."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from controller.clock import FakeClock
from controller.cloudprovider.azure.api import RETRIES, AzureApi, RetryPolicy
from controller.cloudprovider.azure.provider import AzureCloudProvider, parse_provider_id
from controller.cloudprovider.types import InsufficientCapacityError, NodeClaimNotFoundError, OfferingId
from controller.nodeclaim.gc import orphaned_instances
from controller.state.views import NodeClaimView
from tests.azure.conftest import CLUSTER, GPU_IMAGE, IMAGE, SUBNET, nodeclaim, nodeclass
from tests.azure.fake_arm import GROUP_ID, RG, SUBSCRIPTION, FakeARM

Obj = dict[str, Any]
POOL = {"metadata": {"name": "gpu"}, "spec": {"template": {"spec": {"nodeClassRef": {"name": "gpu"}}}}}


def puts(arm: FakeARM) -> list[Obj]:
    return [body for path, body in arm.bodies if "/virtualMachines/" in path]


async def test_vm_sizes_from_resource_skus_with_retail_prices(provider: AzureCloudProvider) -> None:
    types = {it.name: it for it in await provider.instance_types(POOL)}
    h100, a100, t4 = types["Standard_ND96isr_H100_v5"], types["Standard_NC24ads_A100_v4"], types["Standard_NC4as_T4_v3"]
    assert (h100.labels["joiner.sh/gpu-name"], h100.labels["joiner.sh/gpu-count"]) == ("H100", "8")
    assert h100.capacity.to_quantities()["nvidia.com/gpu"] == "8"
    assert {o.zone for o in h100.offerings} == {"eastus-1", "eastus-2"}
    # zone 3 of the A100 size is restricted for the subscription (NotAvailableForSubscription)
    assert {o.zone for o in a100.offerings} == {"eastus-1", "eastus-2"}
    assert (t4.labels["joiner.sh/gpu-name"], t4.labels["joiner.sh/gpu-memory"]) == ("T4", "16384")
    assert "Standard_NV6ads_A10_v5" not in types  # a sixth of a GPU is not a GPU the scheduler can count
    od = next(o.price for o in a100.offerings if o.capacity_type == "on-demand")
    spot = next(o.price for o in a100.offerings if o.capacity_type == "spot")
    assert od == pytest.approx(3.673)  # Linux, not the Windows price
    assert spot == pytest.approx(1.1019)
    assert a100.capacity.to_quantities()["ephemeral-storage"] == "256Gi"


async def test_launch_names_the_vm_after_the_nodeclaim(provider: AzureCloudProvider, arm: FakeARM) -> None:
    claim = nodeclaim("nc-1", types=["Standard_NC4as_T4_v3"], capacity_types=["on-demand"], zones=["eastus-2"])
    inst = await provider.create(claim)
    vm_id = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/nc-1"
    assert inst.provider_id == f"azure://{vm_id}"
    assert parse_provider_id(inst.provider_id) == (SUBSCRIPTION, RG, "nc-1")
    assert (inst.instance_type, inst.zone, inst.capacity_type) == ("Standard_NC4as_T4_v3", "eastus-2", "on-demand")
    assert inst.labels["joiner.sh/gpu-name"] == "T4"
    [body] = puts(arm)
    props = body["properties"]
    assert body["zones"] == ["2"]
    assert body["tags"] == {
        "team": "ml",
        "joiner-cluster": CLUSTER,
        "joiner-nodeclaim": "nc-1",
        "joiner-nodepool": "gpu",
        "joiner-nodeclaim-uid": "uid-nc-1",
    }
    assert props["priority"] == "Regular"
    assert props["storageProfile"]["imageReference"] == {"communityGalleryImageId": GPU_IMAGE}  # a GPU size
    assert props["storageProfile"]["osDisk"]["diskSizeGB"] == 256
    nic = props["networkProfile"]["networkInterfaceConfigurations"][0]["properties"]
    assert nic["ipConfigurations"][0]["properties"]["subnet"]["id"] == SUBNET
    assert nic["deleteOption"] == "Delete"
    assert props["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True
    assert "customData" in props["osProfile"]
    assert list(body["identity"]["userAssignedIdentities"]) == nodeclass()["spec"]["managedIdentities"]

    assert [i.provider_id for i in await provider.list()] == [inst.provider_id]
    assert (await provider.get(inst.provider_id)).nodeclaim == "nc-1"
    claim["status"] = {"providerID": inst.provider_id}
    await provider.delete(claim)
    await asyncio.sleep(0.1)
    assert await provider.list() == []
    with pytest.raises(NodeClaimNotFoundError):
        await provider.get(inst.provider_id)


async def test_spot_vms_are_evicted_by_delete_at_the_max_price(provider: AzureCloudProvider, arm: FakeARM) -> None:
    inst = await provider.create(nodeclaim("nc-spot", types=["Standard_D2s_v5"], capacity_types=["spot", "on-demand"]))
    assert inst.capacity_type == "spot"
    [body] = puts(arm)
    assert body["properties"]["priority"] == "Spot"
    assert body["properties"]["evictionPolicy"] == "Delete"
    assert body["properties"]["billingProfile"] == {"maxPrice": -1.0}
    assert body["properties"]["storageProfile"]["imageReference"] == {"communityGalleryImageId": IMAGE}


async def test_a_retried_create_finds_the_named_vm_and_buys_once(provider: AzureCloudProvider, arm: FakeARM) -> None:
    claim = nodeclaim("nc-retry", types=["Standard_D2s_v5"], capacity_types=["on-demand"])
    first = await provider.create(claim)
    again = await provider.create(claim)
    assert again.provider_id == first.provider_id
    assert len(puts(arm)) == 1
    assert len(arm.vms) == 1


@pytest.mark.parametrize(
    "code",
    [
        "AllocationFailed",
        "ZonalAllocationFailed",
        "SkuNotAvailable",
        "OperationNotAllowed",
        "OverconstrainedAllocationRequest",
    ],
)
async def test_each_capacity_error_removes_the_failed_vm_and_falls_back(
    provider: AzureCloudProvider, arm: FakeARM, code: str
) -> None:
    arm.refuse("1", "Standard_NC24ads_A100_v4", code)
    claim = nodeclaim("nc-fb", types=["Standard_NC24ads_A100_v4"], capacity_types=["on-demand"])
    inst = await provider.create(claim)
    assert inst.zone == "eastus-2"
    assert inst.refused == (OfferingId("Standard_NC24ads_A100_v4", "eastus-1", "on-demand"),)
    assert [b["zones"] for b in puts(arm)] == [["1"], ["2"]]
    assert [v["properties"]["provisioningState"] for v in arm.vms.values()] == ["Succeeded"]


async def test_the_planned_zone_is_tried_first_among_equal_prices(provider: AzureCloudProvider, arm: FakeARM) -> None:
    """The solver spreads equally priced NodeClaims over the zones (joiner.sh/planned-zone)."""
    claim = nodeclaim("nc-plan", types=["Standard_NC24ads_A100_v4"], capacity_types=["on-demand"])
    claim["metadata"].setdefault("annotations", {})["joiner.sh/planned-zone"] = "eastus-2"
    assert (await provider.create(claim)).zone == "eastus-2"
    unplanned = nodeclaim("nc-unplanned", types=["Standard_NC24ads_A100_v4"], capacity_types=["on-demand"])
    assert (await provider.create(unplanned)).zone == "eastus-1"
    assert [b["zones"] for b in puts(arm)] == [["2"], ["1"]]


async def test_no_capacity_anywhere_is_insufficient_capacity(provider: AzureCloudProvider, arm: FakeARM) -> None:
    for zone in ("1", "2"):
        arm.set_capacity(zone, "Standard_NC24ads_A100_v4", 0)
    with pytest.raises(InsufficientCapacityError) as err:
        await provider.create(nodeclaim("nc-none", types=["Standard_NC24ads_A100_v4"], capacity_types=["on-demand"]))
    assert {o.zone for o in err.value.offerings} == {"eastus-1", "eastus-2"}
    assert arm.vms == {}  # the failed VMs were deleted


async def test_throttling_is_retried_after_the_retry_after_arm_asks_for(arm: FakeARM, api: AzureApi) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    throttled = AzureApi(
        endpoint=api.endpoint,
        prices_endpoint=api.prices_endpoint,
        anonymous=True,
        retry=RetryPolicy(attempts=4, base_seconds=0.001, cap_seconds=5.0),
        sleep=sleep,
        polling_interval=0,
    )
    provider = AzureCloudProvider(
        api=throttled, cluster_name=CLUSTER, nodeclasses=lambda: {"gpu": nodeclass()}, clock=FakeClock()
    )
    await provider.instance_types(POOL)
    before = RETRIES.labels("virtualMachines.get", "TooManyRequests")._value.get()
    arm.throttle = 2
    inst = await provider.create(nodeclaim("nc-thr", types=["Standard_D2s_v5"], capacity_types=["on-demand"]))
    assert inst.nodeclaim == "nc-thr"
    assert RETRIES.labels("virtualMachines.get", "TooManyRequests")._value.get() == before + 2
    assert slept == [1.0, 1.0]  # the fake's Retry-After: 1
    await throttled.close()


async def test_an_orphan_is_listed_for_garbage_collection(provider: AzureCloudProvider, arm: FakeARM) -> None:
    kept = await provider.create(nodeclaim("nc-kept", types=["Standard_D2s_v5"], capacity_types=["on-demand"]))
    orphan = await provider.create(nodeclaim("nc-orphan", types=["Standard_D2s_v5"], capacity_types=["on-demand"]))
    stranger = dict(arm.vms[(RG.lower(), "nc-kept")], name="other", tags={"joiner-cluster": "someone-else"})
    arm.vms[(RG.lower(), "other")] = stranger
    listed = await provider.list()
    assert sorted(i.nodeclaim for i in listed) == ["nc-kept", "nc-orphan"]
    recorded = {"metadata": {"name": "nc-kept"}, "status": {"providerID": kept.provider_id}}
    [found] = orphaned_instances(instances=listed, claims={"nc-kept": NodeClaimView.of(recorded)})
    assert found.provider_id == orphan.provider_id


async def test_drift_on_image_subnet_and_identities(provider: AzureCloudProvider, nodeclasses: dict[str, Obj]) -> None:
    claim = nodeclaim("nc-d", types=["Standard_D2s_v5"], capacity_types=["on-demand"])
    inst = await provider.create(claim)
    claim["status"] = {"providerID": inst.provider_id}
    assert await provider.is_drifted(claim) is None
    nodeclasses["gpu"] = nodeclass(imageID=IMAGE.replace("202601.01.0", "202602.01.0"))
    assert (await provider.is_drifted(claim) or "").startswith("ImageDrift")
    nodeclasses["gpu"] = nodeclass(vnetSubnetID=SUBNET.replace("/nodes", "/other"))
    assert (await provider.is_drifted(claim) or "").startswith("SubnetDrift")
    nodeclasses["gpu"] = nodeclass(managedIdentities=[])
    assert (await provider.is_drifted(claim) or "").startswith("IdentityDrift")


async def test_capacity_reservations_are_used_first(
    provider: AzureCloudProvider, arm: FakeARM, nodeclasses: dict[str, Obj]
) -> None:
    arm.add_reservation("a100-block", "Standard_NC24ads_A100_v4", "2", 1)
    group = GROUP_ID
    nodeclasses["gpu"] = nodeclass(capacityReservationGroupID=group)
    everything = ["reserved", "spot", "on-demand"]
    first = await provider.create(nodeclaim("nc-r1", types=["Standard_NC24ads_A100_v4"], capacity_types=everything))
    assert (first.capacity_type, first.zone) == ("reserved", "eastus-2")
    assert puts(arm)[0]["properties"]["capacityReservation"] == {"capacityReservationGroup": {"id": group}}
    second = await provider.create(nodeclaim("nc-r2", types=["Standard_NC24ads_A100_v4"], capacity_types=everything))
    assert second.capacity_type == "spot"  # the reservation is full: the next cheapest


def test_the_aks_nodeclass_model_refuses_a_zero_spot_price() -> None:
    from pydantic import ValidationError

    from api.v1.aksnodeclass import AKSNodeClass

    assert AKSNodeClass.model_validate(nodeclass(spotMaxPrice=2.5)).spec.spot_max_price == 2.5
    with pytest.raises(ValidationError, match="spotMaxPrice is -1"):
        AKSNodeClass.model_validate(nodeclass(spotMaxPrice=0))


async def test_the_status_says_whether_the_class_can_launch(
    provider: AzureCloudProvider, nodeclasses: dict[str, Obj]
) -> None:
    ready, message = await provider.check("gpu")
    assert ready
    assert message == "5 VM sizes offered in eastus"
    nodeclasses["bad"] = nodeclass("bad", location="westeurope", zones=["9"])
    ready, message = await provider.check("bad")
    assert not ready
    assert "no VM size" in message
    ready, message = await provider.check("missing")
    assert not ready
    assert "does not exist" in message
