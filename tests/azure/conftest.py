"""The fake ARM server (tests/azure/fake_arm.py) on 127.0.0.1, and the azure provider's real
azure-mgmt-compute aio client pointed at it through ``base_url``, with no credentials."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from controller.clock import FakeClock
from controller.cloudprovider.azure.api import AzureApi, RetryPolicy
from controller.cloudprovider.azure.provider import AzureCloudProvider
from controller.cloudprovider.unavailable import UnavailableOfferings
from tests.azure.fake_arm import LOCATION, RG, SUBSCRIPTION, FakeARM

Obj = dict[str, Any]
CLUSTER = "test-cluster"
NETWORK = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/net/providers/Microsoft.Network"
SUBNET = f"{NETWORK}/virtualNetworks/aks-vnet/subnets/nodes"
GALLERY = "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images"
IMAGE = f"{GALLERY}/2204gen2containerd/versions/202601.01.0"
GPU_IMAGE = f"{GALLERY}/2204gen2gpu/versions/202601.01.0"


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeARM, str]]:
    server = FakeARM()
    runner = web.AppRunner(server.app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield server, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.fixture
def arm(fake: tuple[FakeARM, str]) -> FakeARM:
    return fake[0]


@pytest.fixture
async def api(fake: tuple[FakeARM, str]) -> AsyncIterator[AzureApi]:
    client = AzureApi(
        endpoint=fake[1],
        prices_endpoint=fake[1],
        anonymous=True,
        retry=RetryPolicy(attempts=4, base_seconds=0.001, cap_seconds=0.01),
        polling_interval=0,
    )
    try:
        yield client
    finally:
        await client.close()


def nodeclass(name: str = "gpu", **spec: Any) -> Obj:
    base: Obj = {
        "subscriptionID": SUBSCRIPTION,
        "resourceGroup": RG,
        "location": LOCATION,
        "vnetSubnetID": SUBNET,
        "imageID": IMAGE,
        "gpuImageID": GPU_IMAGE,
        "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITESTKEY joiner",
        "osDiskSizeGB": 256,
        "managedIdentities": [
            f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/kubelet"
        ],
        "customData": "#cloud-config\nruncmd: [echo join]\n",
        "tags": {"team": "ml"},
    }
    base.update(spec)
    return {"apiVersion": "joiner.sh/v1", "kind": "AKSNodeClass", "metadata": {"name": name}, "spec": base}


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
    api: AzureApi, nodeclasses: dict[str, Obj], clock: FakeClock, unavailable: UnavailableOfferings
) -> AzureCloudProvider:
    return AzureCloudProvider(
        api=api, cluster_name=CLUSTER, nodeclasses=lambda: nodeclasses, clock=clock, unavailable=unavailable
    )


def nodeclaim(
    name: str, *, types: list[str], capacity_types: list[str] | None = None, zones: list[str] | None = None
) -> Obj:
    reqs: list[Obj] = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types}]
    if capacity_types:
        reqs.append({"key": "joiner.sh/capacity-type", "operator": "In", "values": capacity_types})
    if zones:
        reqs.append({"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones})
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"joiner.sh/nodepool": "gpu"}},
        "spec": {
            "nodeClassRef": {"group": "joiner.sh", "kind": "AKSNodeClass", "name": "gpu"},
            "requirements": reqs,
            "resources": {"requests": {"cpu": "1"}},
        },
    }
