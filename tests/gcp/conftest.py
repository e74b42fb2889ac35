"""The fake Compute Engine server (tests/gcp/fake_gce/) on 127.0.0.1, and the gcp provider pointed
at it through its endpoint options, with no credentials (the fake checks none)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from controller.clock import FakeClock
from controller.cloudprovider.gcp.api import GCPApi, NoToken, RetryPolicy
from controller.cloudprovider.gcp.provider import GCPCloudProvider
from controller.cloudprovider.unavailable import UnavailableOfferings
from tests.gcp.fake_gce import PROJECT, REGION, FakeGCE

Obj = dict[str, Any]
CLUSTER = "test-cluster"


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeGCE, str]]:
    server = FakeGCE(operation_seconds=0.02, page_size=4, pull_wait_seconds=0.05)
    runner = web.AppRunner(server.app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
def gce(fake: tuple[FakeGCE, str]) -> FakeGCE:
    return fake[0]


@pytest.fixture
async def api(fake: tuple[FakeGCE, str]) -> AsyncIterator[GCPApi]:
    url = fake[1]
    client = GCPApi(
        compute_endpoint=f"{url}/compute/v1/",
        pubsub_endpoint=f"{url}/v1/",
        billing_endpoint=f"{url}/v1/",
        container_endpoint=f"{url}/v1/",
        tokens=NoToken(),
        retry=RetryPolicy(attempts=4, base_seconds=0.001, cap_seconds=0.01),
        operation_poll_seconds=0.01,
    )
    try:
        yield client
    finally:
        await client.close()


def nodeclass(name: str = "gpu", **spec: Any) -> Obj:
    base: Obj = {
        "project": PROJECT,
        "region": REGION,
        "subnetworkSelectorTerms": [{"name": "gpu-nodes"}],
        "imageSelectorTerms": [{"image": "projects/cos-cloud/global/images/family/cos-stable"}],
        "serviceAccount": {"email": "nodes@joiner-test.iam.gserviceaccount.com"},
        "disks": [{"boot": True, "sizeGiB": 200, "category": "pd-ssd"}],
        "labels": {"team": "ml"},
        "networkTags": ["joiner-nodes"],
    }
    base.update(spec)
    return {"apiVersion": "joiner.sh/v1", "kind": "GCENodeClass", "metadata": {"name": name}, "spec": base}


@pytest.fixture
def nodeclasses() -> dict[str, Obj]:
    return {"gpu": nodeclass()}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def unavailable(clock: FakeClock) -> UnavailableOfferings:
    return UnavailableOfferings(clock=clock, ttl_seconds=180)


@pytest.fixture
def provider(
    api: GCPApi, nodeclasses: dict[str, Obj], clock: FakeClock, unavailable: UnavailableOfferings
) -> GCPCloudProvider:
    return GCPCloudProvider(
        api=api,
        cluster_name=CLUSTER,
        nodeclasses=lambda: nodeclasses,
        clock=clock,
        region=REGION,
        unavailable=unavailable,
    )


def nodeclaim(
    name: str,
    *,
    types: list[str],
    capacity_types: list[str] | None = None,
    zones: list[str] | None = None,
    nodeclass_name: str = "gpu",
    uid: str | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    reqs: list[Obj] = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types}]
    if capacity_types:
        reqs.append({"key": "joiner.sh/capacity-type", "operator": "In", "values": capacity_types})
    if zones:
        reqs.append({"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones})
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "uid": uid or f"uid-{name}",
            "labels": {"joiner.sh/nodepool": "gpu"},
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "nodeClassRef": {"group": "joiner.sh", "kind": "GCENodeClass", "name": nodeclass_name},
            "requirements": reqs,
            "resources": {"requests": {"cpu": "1"}},
        },
    }


def gang(names: list[str], offering: str, *, attempt: str = "a1") -> list[Obj]:
    """The NodeClaims of one gang attempt, as the gang controller writes them."""
    instance_type, zone, capacity_type = offering.split("/")
    members = ",".join(f"{n}={offering}" for n in names)
    annotations = {"joiner.sh/gang-claims": members, "joiner.sh/gang-attempt": attempt}
    return [
        nodeclaim(n, types=[instance_type], capacity_types=[capacity_type], zones=[zone], annotations=annotations)
        for n in names
    ]
