"""What one insert and one bulkInsert ask Compute Engine for (pure: no server)."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1.gcenodeclass import GCENodeClass
from controller.cloudprovider.gcp.instance import (
    bulk_insert_body,
    gang_members,
    instance_properties,
    label_value,
)
from controller.cloudprovider.gcp.instancetypes import Reservation, split_name
from controller.cloudprovider.gcp.nodeclass import ImageChoice, ResolvedNodeClass
from controller.cloudprovider.types import CreateError, OfferingId
from tests.gcp.conftest import nodeclaim, nodeclass

Obj = dict[str, Any]
SUBNET = "projects/p/regions/us-central1/subnetworks/gpu-nodes"


def resolved(**spec: Any) -> ResolvedNodeClass:
    model = GCENodeClass.model_validate(nodeclass(**spec))
    return ResolvedNodeClass(
        name="gpu",
        spec=model.spec,
        zones=("us-central1-a", "us-central1-b"),
        subnetwork=SUBNET,
        images=(
            ImageChoice(gpu=True, image="projects/p/global/images/gpu-v1"),
            ImageChoice(gpu=False, image="projects/cos-cloud/global/images/cos-1"),
        ),
        reservations=(),
    )


def test_a_spot_n1_with_t4s_local_ssds_and_a_shared_reservation() -> None:
    view = resolved(disks=[{"boot": True, "sizeGiB": 300}, {"category": "local-ssd", "count": 2}])
    reservation = Reservation(
        name="t4-block",
        project="owner",
        zone="us-central1-a",
        instance_type="n1-standard-8_nvidia-tesla-t4_2",
        available=3,
    )
    body = instance_properties(
        nodeclaim("nc-1", types=["n1-standard-8_nvidia-tesla-t4_2"]),
        view,
        shape=split_name("n1-standard-8_nvidia-tesla-t4_2"),
        zone="us-central1-a",
        capacity_type="spot",
        reservation=reservation,
        cluster_label="c1",
    )
    assert body["machineType"] == "zones/us-central1-a/machineTypes/n1-standard-8"
    assert body["guestAccelerators"] == [
        {"acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 2}
    ]
    assert body["scheduling"] == {
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
    }
    boot, *scratch = body["disks"]
    assert boot["initializeParams"]["sourceImage"] == "projects/p/global/images/gpu-v1"  # the GPU term
    assert boot["initializeParams"]["diskSizeGb"] == "300"
    assert [d["type"] for d in scratch] == ["SCRATCH", "SCRATCH"]
    assert {d["interface"] for d in scratch} == {"NVME"}
    assert body["reservationAffinity"]["values"] == ["projects/owner/reservations/t4-block"]
    assert body["labels"]["joiner-cluster"] == "c1"
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert items["joiner-image"] == "projects/p/global/images/gpu-v1"


def test_a_cpu_machine_migrates_on_maintenance_and_takes_the_cpu_image() -> None:
    body = instance_properties(
        nodeclaim("nc-2", types=["e2-standard-2"]),
        resolved(startupScript="#!/bin/sh\necho hi\n"),
        shape=split_name("e2-standard-2"),
        zone="us-central1-b",
        capacity_type="on-demand",
        reservation=None,
        cluster_label="c1",
    )
    assert body["scheduling"] == {
        "onHostMaintenance": "MIGRATE",
        "automaticRestart": False,
        "provisioningModel": "STANDARD",
    }
    assert body["disks"][0]["initializeParams"]["sourceImage"] == "projects/cos-cloud/global/images/cos-1"
    assert body["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert items["startup-script"].startswith("#!/bin/sh")


def test_no_image_term_for_the_machine_is_a_create_error() -> None:
    view = resolved()
    only_gpu = ResolvedNodeClass(
        name=view.name, spec=view.spec, zones=view.zones, subnetwork=SUBNET, images=view.images[:1], reservations=()
    )
    with pytest.raises(CreateError, match="no imageSelectorTerm for CPU machines"):
        instance_properties(
            nodeclaim("nc-3", types=["e2-standard-2"]),
            only_gpu,
            shape=split_name("e2-standard-2"),
            zone="us-central1-a",
            capacity_type="on-demand",
            reservation=None,
            cluster_label="c1",
        )


def test_the_bulk_insert_body_names_every_member_and_takes_bare_names() -> None:
    properties = instance_properties(
        nodeclaim("gpu-ga1-0", types=["n1-standard-8_nvidia-tesla-t4_1"]),
        resolved(),
        shape=split_name("n1-standard-8_nvidia-tesla-t4_1"),
        zone="us-central1-a",
        capacity_type="on-demand",
        reservation=None,
        cluster_label="c1",
    )
    body = bulk_insert_body(properties, ["gpu-ga1-0", "gpu-ga1-1"], attempt="A1")
    assert (body["count"], body["minCount"]) == (2, 2)
    assert body["perInstanceProperties"] == {"gpu-ga1-0": {}, "gpu-ga1-1": {}}
    shared = body["instanceProperties"]
    assert shared["machineType"] == "n1-standard-8"
    assert shared["guestAccelerators"][0]["acceleratorType"] == "nvidia-tesla-t4"
    assert shared["disks"][0]["initializeParams"]["diskType"] == "pd-ssd"
    assert "joiner-nodeclaim-uid" not in shared["labels"]  # one NodeClaim's uid would be on every member
    assert shared["labels"]["joiner-gang-attempt"] == "a1"


def test_gang_members_and_label_values() -> None:
    claim = nodeclaim(
        "a", types=["x"], annotations={"joiner.sh/gang-claims": "a=g2-standard-8/z1/spot,b=g2-standard-8/z1/spot"}
    )
    assert gang_members(claim) == {
        "a": OfferingId("g2-standard-8", "z1", "spot"),
        "b": OfferingId("g2-standard-8", "z1", "spot"),
    }
    assert gang_members(nodeclaim("c", types=["x"])) == {}
    assert label_value("My.Cluster/Prod") == "my-cluster-prod"
    assert len(label_value("x" * 100)) == 63
