"""The gcp provider against the fake Compute Engine server: catalog, launch, named retries, gangs by
bulkInsert, capacity fallback, throttling, garbage collection, drift and reservations."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from controller.cloudprovider.gcp.api import RETRIES
from controller.cloudprovider.gcp.instance import parse_provider_id
from controller.cloudprovider.gcp.provider import GCPCloudProvider
from controller.cloudprovider.types import (
    CreateError,
    InsufficientCapacityError,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    OfferingId,
)
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.nodeclaim.gc import orphaned_instances
from controller.state.views import NodeClaimView
from tests.gcp.conftest import CLUSTER, gang, nodeclaim, nodeclass
from tests.gcp.fake_gce import PROJECT, FakeGCE

Obj = dict[str, Any]
POOL = {"metadata": {"name": "gpu"}, "spec": {"template": {"spec": {"nodeClassRef": {"name": "gpu"}}}}}


def posts(gce: FakeGCE, suffix: str) -> list[Obj]:
    return [body for path, body in gce.bodies if path.endswith(suffix)]


def inserts(gce: FakeGCE) -> list[Obj]:
    return posts(gce, "/instances")


def instance(gce: FakeGCE, name: str) -> Obj:
    return next(i for (_, _, n), i in gce.instances.items() if n == name)


async def test_instance_types_from_machine_and_accelerator_types_with_prices(provider: GCPCloudProvider) -> None:
    types = {it.name: it for it in await provider.instance_types(POOL)}
    a3, a2, g2 = types["a3-highgpu-8g"], types["a2-highgpu-1g"], types["g2-standard-8"]
    assert (a3.labels["joiner.sh/gpu-name"], a3.labels["joiner.sh/gpu-count"]) == ("H100", "8")
    assert a3.labels["joiner.sh/gpu-memory"] == "81920"
    assert a3.capacity.to_quantities()["nvidia.com/gpu"] == "8"
    assert {o.zone for o in a3.offerings} == {"us-central1-a", "us-central1-c"}  # where the fake offers A3
    assert (a2.labels["joiner.sh/gpu-name"], g2.labels["joiner.sh/gpu-name"]) == ("A100", "L4")
    assert g2.labels["joiner.sh/instance-family"] == "g2"
    # N1 takes T4s by guestAccelerators, in the zones that have them, up to maximumCardsPerInstance (4)
    t4 = types["n1-standard-8_nvidia-tesla-t4_2"]
    assert t4.capacity.to_quantities()["nvidia.com/gpu"] == "2"
    assert t4.labels["joiner.sh/gpu-name"] == "T4"
    assert {o.zone for o in t4.offerings} == {"us-central1-a", "us-central1-b"}
    assert "n1-standard-8_nvidia-tesla-t4_8" not in types
    assert "nvidia.com/gpu" not in types["e2-standard-4"].capacity.to_quantities()
    # prices: the shipped table, spot below on-demand; the boot disk (200 GiB) is the ephemeral storage
    od = next(o.price for o in a2.offerings if o.capacity_type == "on-demand")
    spot = next(o.price for o in a2.offerings if o.capacity_type == "spot")
    assert od == pytest.approx(3.6733)
    assert 0 < spot < od
    n1 = next(o.price for o in types["n1-standard-8"].offerings if o.capacity_type == "on-demand")
    assert next(o.price for o in t4.offerings if o.capacity_type == "on-demand") == pytest.approx(n1 + 2 * 0.35)
    assert a2.capacity.to_quantities()["ephemeral-storage"] == "200Gi"


async def test_launch_names_the_instance_after_the_nodeclaim_and_describes_it(
    provider: GCPCloudProvider, gce: FakeGCE
) -> None:
    claim = nodeclaim("nc-1", types=["g2-standard-8"], capacity_types=["on-demand"], zones=["us-central1-b"])
    inst = await provider.create(claim)
    assert inst.provider_id == f"gce://{PROJECT}/us-central1-b/nc-1"
    assert (inst.instance_type, inst.zone, inst.capacity_type) == ("g2-standard-8", "us-central1-b", "on-demand")
    assert inst.labels["joiner.sh/gpu-name"] == "L4"
    assert inst.labels["topology.kubernetes.io/region"] == "us-central1"
    assert inst.image_id == "projects/cos-cloud/global/images/cos-109-17800-66"  # the family's newest
    [body] = inserts(gce)
    assert body["name"] == "nc-1"
    assert body["machineType"] == "zones/us-central1-b/machineTypes/g2-standard-8"
    assert body["labels"] == {
        "team": "ml",
        "joiner-cluster": CLUSTER,
        "joiner-nodeclass": "gpu",
        "joiner-nodepool": "gpu",
        "joiner-nodeclaim-uid": "uid-nc-1",
    }
    assert body["serviceAccounts"][0]["email"] == "nodes@joiner-test.iam.gserviceaccount.com"
    assert body["tags"] == {"items": ["joiner-nodes"]}
    assert body["scheduling"] == {
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
        "provisioningModel": "STANDARD",
    }
    boot = body["disks"][0]
    assert boot["initializeParams"]["diskSizeGb"] == "200"
    assert boot["initializeParams"]["diskType"] == "zones/us-central1-b/diskTypes/pd-ssd"
    subnetwork = f"projects/{PROJECT}/regions/us-central1/subnetworks/gpu-nodes"
    assert body["networkInterfaces"] == [{"subnetwork": subnetwork}]
    assert instance(gce, "nc-1")["status"] == "RUNNING"

    assert [i.provider_id for i in await provider.list()] == [inst.provider_id]
    assert (await provider.get(inst.provider_id)).nodeclaim == "nc-1"
    claim["status"] = {"providerID": inst.provider_id}
    await provider.delete(claim)
    await asyncio.sleep(0.1)  # the delete operation finishes
    assert await provider.list() == []
    with pytest.raises(NodeClaimNotFoundError):
        await provider.get(inst.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        await provider.delete(claim)


async def test_spot_launches_with_the_spot_provisioning_model(provider: GCPCloudProvider, gce: FakeGCE) -> None:
    inst = await provider.create(nodeclaim("nc-spot", types=["a2-highgpu-1g"], capacity_types=["spot", "on-demand"]))
    assert inst.capacity_type == "spot"
    [body] = inserts(gce)
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"


async def test_n1_machines_get_their_gpus_as_guest_accelerators(provider: GCPCloudProvider, gce: FakeGCE) -> None:
    inst = await provider.create(
        nodeclaim("nc-t4", types=["n1-standard-8_nvidia-tesla-t4_2"], capacity_types=["on-demand"])
    )
    [body] = inserts(gce)
    assert body["machineType"].endswith("/machineTypes/n1-standard-8")
    zone = inst.zone
    assert body["guestAccelerators"] == [
        {"acceleratorType": f"zones/{zone}/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 2}
    ]
    assert inst.instance_type == "n1-standard-8_nvidia-tesla-t4_2"  # read back from the instance
    assert inst.capacity["nvidia.com/gpu"] == "2"


async def test_a_retried_create_finds_the_named_instance_and_buys_once(
    provider: GCPCloudProvider, gce: FakeGCE
) -> None:
    claim = nodeclaim("nc-retry", types=["e2-standard-4"], capacity_types=["on-demand"])
    first = await provider.create(claim)
    again = await provider.create(claim)
    assert again.provider_id == first.provider_id
    assert len(inserts(gce)) == 1
    # two calls at once (a restart racing the old leader): the loser's insert answers alreadyExists
    # (409), and it returns the winner's instance
    racing = nodeclaim("nc-race", types=["e2-standard-4"], capacity_types=["on-demand"], zones=["us-central1-a"])
    one, two = await asyncio.gather(provider.create(racing), provider.create(racing))
    assert one.provider_id == two.provider_id
    assert sum(1 for (_, _, n) in gce.instances if n == "nc-race") == 1


@pytest.mark.parametrize(
    "code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "QUOTA_EXCEEDED", "STOCKOUT"]
)
async def test_each_capacity_error_falls_back_to_the_next_offering_and_reports_it(
    provider: GCPCloudProvider, gce: FakeGCE, code: str
) -> None:
    gce.refuse("us-central1-a", "a2-highgpu-1g", code)
    claim = nodeclaim(
        "nc-fb", types=["a2-highgpu-1g"], capacity_types=["on-demand"], zones=["us-central1-a", "us-central1-b"]
    )
    inst = await provider.create(claim)
    assert inst.zone == "us-central1-b"
    assert inst.refused == (OfferingId("a2-highgpu-1g", "us-central1-a", "on-demand"),)
    assert [b["machineType"] for b in inserts(gce)] == [
        "zones/us-central1-a/machineTypes/a2-highgpu-1g",
        "zones/us-central1-b/machineTypes/a2-highgpu-1g",
    ]


async def test_the_planned_zone_is_tried_first_among_equal_prices(provider: GCPCloudProvider, gce: FakeGCE) -> None:
    """The solver spreads equally priced NodeClaims over the zones (joiner.sh/planned-zone); the
    other zones stay the fallback."""
    zones = ["us-central1-a", "us-central1-b"]
    claim = nodeclaim("nc-plan", types=["a2-highgpu-1g"], capacity_types=["on-demand"], zones=zones)
    claim["metadata"].setdefault("annotations", {})["joiner.sh/planned-zone"] = "us-central1-b"
    assert (await provider.create(claim)).zone == "us-central1-b"
    gce.refuse("us-central1-b", "a2-highgpu-1g", "ZONE_RESOURCE_POOL_EXHAUSTED")
    claim = nodeclaim("nc-plan2", types=["a2-highgpu-1g"], capacity_types=["on-demand"], zones=zones)
    claim["metadata"].setdefault("annotations", {})["joiner.sh/planned-zone"] = "us-central1-b"
    assert (await provider.create(claim)).zone == "us-central1-a"
    assert [b["machineType"] for b in inserts(gce)] == [
        "zones/us-central1-b/machineTypes/a2-highgpu-1g",
        "zones/us-central1-b/machineTypes/a2-highgpu-1g",
        "zones/us-central1-a/machineTypes/a2-highgpu-1g",
    ]


async def test_no_capacity_anywhere_is_insufficient_capacity_naming_every_offering(
    provider: GCPCloudProvider, gce: FakeGCE
) -> None:
    for zone in ("us-central1-a", "us-central1-b"):
        gce.set_capacity(zone, "a2-highgpu-1g", 0)
    claim = nodeclaim(
        "nc-none", types=["a2-highgpu-1g"], capacity_types=["on-demand"], zones=["us-central1-a", "us-central1-b"]
    )
    with pytest.raises(InsufficientCapacityError) as err:
        await provider.create(claim)
    assert set(err.value.offerings) == {
        OfferingId("a2-highgpu-1g", "us-central1-a", "on-demand"),
        OfferingId("a2-highgpu-1g", "us-central1-b", "on-demand"),
    }
    assert gce.instances == {}


async def test_offerings_marked_unavailable_are_not_tried(
    provider: GCPCloudProvider, gce: FakeGCE, unavailable: UnavailableOfferings
) -> None:
    unavailable.mark(OfferingId("e2-standard-4", "us-central1-a", "on-demand"))
    inst = await provider.create(nodeclaim("nc-u", types=["e2-standard-4"], capacity_types=["on-demand"]))
    assert inst.zone != "us-central1-a"
    assert len(inserts(gce)) == 1


async def test_a_gang_launches_in_one_bulk_insert_with_min_count(provider: GCPCloudProvider, gce: FakeGCE) -> None:
    claims = gang(["gpu-ga1-0", "gpu-ga1-1"], "a2-highgpu-2g/us-central1-c/on-demand")
    first, second = await asyncio.gather(*(provider.create(c) for c in claims))
    [bulk] = posts(gce, "/instances/bulkInsert")
    assert (bulk["count"], bulk["minCount"]) == (2, 2)
    assert sorted(bulk["perInstanceProperties"]) == ["gpu-ga1-0", "gpu-ga1-1"]
    assert bulk["instanceProperties"]["machineType"] == "a2-highgpu-2g"
    assert bulk["instanceProperties"]["labels"]["joiner-gang-attempt"] == "a1"
    assert inserts(gce) == []
    assert (first.nodeclaim, second.nodeclaim) == ("gpu-ga1-0", "gpu-ga1-1")
    assert {first.zone, second.zone} == {"us-central1-c"}
    assert first.capacity["nvidia.com/gpu"] == "2"
    # a member's retried create finds its instance: nothing more is bought
    assert (await provider.create(claims[1])).provider_id == second.provider_id
    assert len(posts(gce, "/instances/bulkInsert")) == 1


async def test_a_zone_short_of_one_machine_refuses_the_whole_gang(provider: GCPCloudProvider, gce: FakeGCE) -> None:
    gce.set_capacity("us-central1-c", "a2-highgpu-2g", 1)  # room for one of the two
    claims = gang(["gpu-gb1-0", "gpu-gb1-1"], "a2-highgpu-2g/us-central1-c/on-demand", attempt="b1")
    results = await asyncio.gather(*(provider.create(c) for c in claims), return_exceptions=True)
    assert all(isinstance(r, InsufficientCapacityError) for r in results)
    assert all(
        r.offerings == (OfferingId("a2-highgpu-2g", "us-central1-c", "on-demand"),)
        for r in results
        if isinstance(r, InsufficientCapacityError)
    )
    assert gce.instances == {}  # all-or-nothing: not one machine to roll back
    assert len(posts(gce, "/instances/bulkInsert")) == 1
    assert gce.capacity[("us-central1-c", "a2-highgpu-2g", "STANDARD")] == 1


async def test_rate_limits_are_retried_with_backoff(provider: GCPCloudProvider, gce: FakeGCE) -> None:
    before = RETRIES.labels("compute", "instances", "rateLimitExceeded")._value.get()
    await provider.instance_types(POOL)
    gce.throttle = [(403, "rateLimitExceeded"), (429, "rateLimitExceeded")]
    inst = await provider.create(nodeclaim("nc-thr", types=["e2-standard-2"], capacity_types=["on-demand"]))
    assert inst.nodeclaim == "nc-thr"
    assert gce.throttle == []
    assert RETRIES.labels("compute", "instances", "rateLimitExceeded")._value.get() == before + 2
    assert len(inserts(gce)) == 1


async def test_other_errors_are_create_errors_with_the_reason(provider: GCPCloudProvider, gce: FakeGCE) -> None:
    await provider.instance_types(POOL)  # the family resolves (and stays cached) ...
    gce.images.clear()  # ... then the image is deleted: the insert names an image GCE no longer has
    with pytest.raises(NodeClassNotReadyError):
        await provider.create(
            nodeclaim("nc-err", types=["e2-standard-2"], capacity_types=["on-demand"], nodeclass_name="missing")
        )
    with pytest.raises(CreateError) as err:
        await provider.create(nodeclaim("nc-err", types=["e2-standard-2"], capacity_types=["on-demand"]))
    assert err.value.reason == "invalid"


async def test_an_orphan_of_this_cluster_is_listed_for_garbage_collection(
    provider: GCPCloudProvider, gce: FakeGCE
) -> None:
    kept = await provider.create(nodeclaim("nc-kept", types=["e2-standard-2"], capacity_types=["on-demand"]))
    orphan = await provider.create(nodeclaim("nc-orphan", types=["e2-standard-2"], capacity_types=["on-demand"]))
    other = dict(instance(gce, "nc-kept"), name="other-cluster-vm", labels={"joiner-cluster": "someone-else"})
    gce.instances[(PROJECT, "us-central1-a", "other-cluster-vm")] = other
    listed = await provider.list()
    assert sorted(i.nodeclaim for i in listed) == ["nc-kept", "nc-orphan"]
    recorded = {"metadata": {"name": "nc-kept"}, "status": {"providerID": kept.provider_id}}
    claims = {"nc-kept": NodeClaimView.of(recorded)}
    [found] = orphaned_instances(instances=listed, claims=claims)
    assert found.provider_id == orphan.provider_id
    await provider.delete({"metadata": {"name": "nc-orphan"}, "status": {"providerID": found.provider_id}})
    await asyncio.sleep(0.1)
    assert [i.nodeclaim for i in await provider.list()] == ["nc-kept"]
    assert (PROJECT, "us-central1-a", "other-cluster-vm") in gce.instances


async def test_drift_on_image_subnetwork_and_service_account(
    provider: GCPCloudProvider, gce: FakeGCE, nodeclasses: dict[str, Obj], clock: Any
) -> None:
    claim = nodeclaim("nc-d", types=["e2-standard-2"], capacity_types=["on-demand"])
    inst = await provider.create(claim)
    claim["status"] = {"providerID": inst.provider_id}
    assert await provider.is_drifted(claim) is None
    gce.add_image("cos-cloud", "cos-113-18244-1", family="cos-stable")  # a newer image in the family
    await clock.advance(61)
    reason = await provider.is_drifted(claim)
    assert reason is not None
    assert reason.startswith("ImageDrift")
    nodeclasses["gpu"] = nodeclass(
        imageSelectorTerms=[{"image": "projects/cos-cloud/global/images/cos-109-17800-66"}],
        subnetworkSelectorTerms=[{"name": "nodes"}],
    )
    reason = await provider.is_drifted(claim)
    assert reason is not None
    assert reason.startswith("SubnetworkDrift")
    nodeclasses["gpu"] = nodeclass(
        imageSelectorTerms=[{"image": "projects/cos-cloud/global/images/cos-109-17800-66"}],
        serviceAccount={"email": "other@joiner-test.iam.gserviceaccount.com"},
    )
    reason = await provider.is_drifted(claim)
    assert reason is not None
    assert reason.startswith("ServiceAccountDrift")
    nodeclasses["gpu"] = nodeclass(imageSelectorTerms=[{"image": "projects/cos-cloud/global/images/cos-109-17800-66"}])
    assert await provider.is_drifted(claim) is None


async def test_reserved_offerings_are_used_first_while_the_reservation_has_room(
    provider: GCPCloudProvider, gce: FakeGCE, nodeclasses: dict[str, Obj]
) -> None:
    gce.add_reservation("us-central1-b", "a100-block", "a2-highgpu-1g", 1)
    nodeclasses["gpu"] = nodeclass(reservationSelectorTerms=[{"name": "a100-block"}])
    types = {it.name: it for it in await provider.instance_types(POOL)}
    reserved = [o for o in types["a2-highgpu-1g"].offerings if o.capacity_type == "reserved"]
    assert [(o.zone, o.available) for o in reserved] == [("us-central1-b", True)]
    everything = ["reserved", "spot", "on-demand"]
    first = await provider.create(nodeclaim("nc-r1", types=["a2-highgpu-1g"], capacity_types=everything))
    assert (first.capacity_type, first.zone) == ("reserved", "us-central1-b")
    [body] = inserts(gce)
    assert body["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["a100-block"],
    }
    assert gce.reservations[(PROJECT, "us-central1-b", "a100-block")]["specificReservation"]["inUseCount"] == "1"
    # full now: the next NodeClaim goes to the cheapest other offering (spot), without asking GCE
    second = await provider.create(nodeclaim("nc-r2", types=["a2-highgpu-1g"], capacity_types=everything))
    assert second.capacity_type == "spot"
    assert len(inserts(gce)) == 2


async def test_a_gke_node_pool_template_is_copied(
    provider: GCPCloudProvider, gce: FakeGCE, nodeclasses: dict[str, Obj]
) -> None:
    spec = nodeclass(imageSelectorTerms=[{"instanceTemplate": "gke-gpu-pool"}])["spec"]
    del spec["serviceAccount"]
    nodeclasses["gpu"] = {"apiVersion": "joiner.sh/v1", "kind": "GCENodeClass", "metadata": {"name": "gpu"}}
    nodeclasses["gpu"]["spec"] = spec
    inst = await provider.create(nodeclaim("nc-gke", types=["g2-standard-8"], capacity_types=["on-demand"]))
    [body] = inserts(gce)
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert items["kube-env"].startswith("KUBERNETES_MASTER_NAME")
    assert items["joiner-image"] == f"projects/{PROJECT}/global/images/gpu-node-v1"
    assert body["serviceAccounts"][0]["email"] == "gke-nodes@joiner-test.iam.gserviceaccount.com"
    assert body["tags"]["items"] == ["gke-demo-node", "joiner-nodes"]
    assert body["labels"]["goog-gke-node"] == ""
    assert inst.image_id == f"projects/{PROJECT}/global/images/gpu-node-v1"


async def test_a_nodeclaim_name_gce_cannot_take_is_a_create_error(provider: GCPCloudProvider) -> None:
    with pytest.raises(CreateError) as err:
        await provider.create(nodeclaim("Has.Dots", types=["e2-standard-2"]))
    assert err.value.reason == "InvalidInstanceName"


def test_provider_ids_round_trip() -> None:
    assert parse_provider_id("gce://p/us-central1-a/nc-1") == ("p", "us-central1-a", "nc-1")
    assert parse_provider_id("aws:///us-east-1a/i-123") is None
    assert parse_provider_id("gce://p/zone") is None


async def test_a_gke_node_pool_is_followed_to_its_template_and_an_upgrade_is_drift(
    provider: GCPCloudProvider, gce: FakeGCE, nodeclasses: dict[str, Obj], clock: Any
) -> None:
    pool = {"location": "us-central1", "cluster": "ml", "name": "gpu-pool"}
    nodeclasses["gpu"] = nodeclass(imageSelectorTerms=[{"gkeNodePool": pool}])
    claim = nodeclaim("nc-pool", types=["g2-standard-8"], capacity_types=["on-demand"])
    inst = await provider.create(claim)
    [body] = inserts(gce)
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert items["kube-env"].startswith("KUBERNETES_MASTER_NAME")  # the pool's template, copied
    assert inst.image_id == f"projects/{PROJECT}/global/images/gpu-node-v1"
    assert ("GET", f"/compute/v1/projects/{PROJECT}/zones/us-central1-a/instanceGroupManagers/gke-ml-gpu-pool-grp") in (
        gce.requests
    )
    claim["status"] = {"providerID": inst.provider_id}
    assert await provider.is_drifted(claim) is None
    gce.add_image(PROJECT, "gpu-node-v2")
    gce.upgrade_node_pool("gpu-node-v2", version="v2")  # GKE upgrades the pool: a new template
    await clock.advance(61)
    reason = await provider.is_drifted(claim)
    assert reason is not None
    assert reason.startswith("ImageDrift")
    nodeclasses["gpu"] = nodeclass(imageSelectorTerms=[{"gkeNodePool": {**pool, "name": "no-such-pool"}}])
    with pytest.raises(NodeClassNotReadyError, match="no-such-pool"):
        await provider.create(nodeclaim("nc-none", types=["g2-standard-8"]))


async def test_a_second_controller_bulk_inserting_the_same_gang_gets_the_first_ones_machines(
    provider: GCPCloudProvider, gce: FakeGCE, api: Any, nodeclasses: dict[str, Obj], clock: Any
) -> None:
    """An old leader's bulkInsert still running when a new leader launches the same gang: the second
    bulkInsert fails with RESOURCE_ALREADY_EXISTS, and the new leader returns the machines the first made."""
    gce.operation_seconds = 0.3
    other = GCPCloudProvider(api=api, cluster_name=CLUSTER, nodeclasses=lambda: nodeclasses, clock=clock)
    claims = gang(["gpu-gc1-0", "gpu-gc1-1"], "a2-highgpu-1g/us-central1-b/on-demand", attempt="c1")
    first = asyncio.gather(*(provider.create(c) for c in claims))
    await asyncio.sleep(0.1)  # the first bulkInsert is running
    second = await asyncio.gather(*(other.create(c) for c in claims))
    assert [i.provider_id for i in await first] == [i.provider_id for i in second]
    assert len(posts(gce, "/instances/bulkInsert")) == 2
    assert sorted(n for (_, _, n) in gce.instances) == ["gpu-gc1-0", "gpu-gc1-1"]
