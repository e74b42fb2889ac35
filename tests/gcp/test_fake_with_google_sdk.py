"""Google's own Compute client (google-cloud-compute, REST transport) against the fake server, pointed at
it through its documented ``client_options.api_endpoint``: the fake speaks the API as the SDK reads
it (paths, JSON field names, long-running operations, pagination, error shapes), so what the
provider's tests prove against the fake is proven against the API Google's SDK describes.

The SDK is synchronous, so each test runs it in a thread while the fake serves on the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from tests.gcp.fake_gce import PROJECT, FakeGCE

ZONE = "us-central1-a"


def clients(url: str) -> dict[str, Any]:
    options = {"api_endpoint": url}
    credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    instances = compute_v1.InstancesClient(credentials=credentials, transport="rest", client_options=options)
    # The SDK polls an insert's operation with a ZoneOperationsClient it makes itself, on the default
    # endpoint (api_endpoint is not passed on): hand it one pointed at the same endpoint.
    instances._transport._extended_operations_services["zone_operations"] = compute_v1.ZoneOperationsClient(
        credentials=credentials, transport="rest", client_options=options
    )
    return {
        "instances": instances,
        "operations": instances._transport._extended_operations_services["zone_operations"],
        "machine_types": compute_v1.MachineTypesClient(
            credentials=credentials, transport="rest", client_options=options
        ),
        "images": compute_v1.ImagesClient(credentials=credentials, transport="rest", client_options=options),
    }


def instance(name: str, machine_type: str = "e2-standard-2") -> Any:
    return compute_v1.Instance(
        name=name,
        machine_type=f"zones/{ZONE}/machineTypes/{machine_type}",
        labels={"joiner-cluster": "sdk"},
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image="projects/cos-cloud/global/images/cos-109-17800-66",
                    disk_size_gb=50,
                ),
            )
        ],
        network_interfaces=[
            compute_v1.NetworkInterface(subnetwork=f"projects/{PROJECT}/regions/us-central1/subnetworks/nodes")
        ],
        scheduling=compute_v1.Scheduling(provisioning_model="SPOT", instance_termination_action="DELETE"),
    )


def scenario(url: str, gce: FakeGCE) -> None:
    c = clients(url)
    types = list(c["machine_types"].list(project=PROJECT, zone=ZONE))  # pages of 4: the SDK follows them
    assert len(types) == len(gce.machine_types_in(ZONE)) > 4
    assert c["images"].get_from_family(project="cos-cloud", family="cos-stable").name == "cos-109-17800-66"

    op = c["instances"].insert(project=PROJECT, zone=ZONE, instance_resource=instance("sdk-1"))
    op.result(timeout=30)
    got = c["instances"].get(project=PROJECT, zone=ZONE, instance="sdk-1")
    assert (got.status, got.scheduling.provisioning_model) == ("RUNNING", "SPOT")
    with pytest.raises(exceptions.Conflict):
        c["instances"].insert(project=PROJECT, zone=ZONE, instance_resource=instance("sdk-1"))
    with pytest.raises(exceptions.NotFound):
        c["instances"].get(project=PROJECT, zone=ZONE, instance="nope")

    gce.set_capacity(ZONE, "a2-highgpu-1g", 1)
    bulk = compute_v1.BulkInsertInstanceResource(
        count=2,
        min_count=2,
        per_instance_properties={
            "sdk-g-0": compute_v1.BulkInsertInstanceResourcePerInstanceProperties(),
            "sdk-g-1": compute_v1.BulkInsertInstanceResourcePerInstanceProperties(),
        },
        instance_properties=compute_v1.InstanceProperties(
            machine_type="a2-highgpu-1g",
            disks=[
                compute_v1.AttachedDisk(
                    boot=True,
                    initialize_params=compute_v1.AttachedDiskInitializeParams(
                        source_image="projects/cos-cloud/global/images/cos-109-17800-66"
                    ),
                )
            ],
            network_interfaces=[
                compute_v1.NetworkInterface(subnetwork=f"projects/{PROJECT}/regions/us-central1/subnetworks/nodes")
            ],
            scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE"),
        ),
    )
    op = c["instances"].bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=bulk)
    with pytest.raises(exceptions.GoogleAPICallError) as err:  # the SDK raises the operation's error
        op.result(timeout=30)
    assert err.value.code == 503
    failed = c["operations"].get(project=PROJECT, zone=ZONE, operation=op.name)
    assert [e.code for e in failed.error.errors] == ["ZONE_RESOURCE_POOL_EXHAUSTED"]
    assert not any(name.startswith("sdk-g-") for (_, _, name) in gce.instances)  # none of the two
    gce.set_capacity(ZONE, "a2-highgpu-1g", 2)
    op = c["instances"].bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=bulk)
    op.result(timeout=30)

    listed = c["instances"].aggregated_list(
        request=compute_v1.AggregatedListInstancesRequest(project=PROJECT, filter='labels.joiner-cluster = "sdk"')
    )
    names = sorted(i.name for _, scoped in listed for i in scoped.instances)
    assert names == ["sdk-1"]
    everything = c["instances"].aggregated_list(request=compute_v1.AggregatedListInstancesRequest(project=PROJECT))
    assert sorted(i.name for _, scoped in everything for i in scoped.instances) == ["sdk-1", "sdk-g-0", "sdk-g-1"]

    c["instances"].delete(project=PROJECT, zone=ZONE, instance="sdk-1").result(timeout=30)
    with pytest.raises(exceptions.NotFound):
        c["instances"].get(project=PROJECT, zone=ZONE, instance="sdk-1")


async def test_google_cloud_compute_reads_the_fake_as_the_api(fake: tuple[FakeGCE, str]) -> None:
    gce, url = fake
    await asyncio.to_thread(scenario, url, gce)
