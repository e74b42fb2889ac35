"""`joiner run --provider gcp`: the flags, the provider the operator builds, the CRD it needs, and the
GCENodeClass status controller it runs."""

from __future__ import annotations

from typing import Any

import pytest

from controller.cli import main
from controller.clock import FakeClock, RealClock
from controller.cloudprovider.gcp.api import GCPApi
from controller.cloudprovider.gcp.provider import GCPCloudProvider
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.kube.resources import GCENODECLASSES
from controller.nodeclass.gce import GCENodeClassStatusController
from controller.operator.app import GCPOptions, Runnable, build_cloud_provider, missing_crds
from controller.state.cluster import WATCHED, ClusterState
from tests.gcp.conftest import nodeclass
from tests.gcp.fake_gce import FakeGCE
from tests.unit.fakeapi import FakeKube

Obj = dict[str, Any]


def test_the_gcp_provider_needs_a_cluster_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--provider", "gcp"]) == 2
    assert "--cluster-name" in capsys.readouterr().err


async def test_build_cloud_provider_makes_the_gcp_provider_with_its_status_loop() -> None:
    clock = FakeClock()
    kube = FakeKube(clock=clock)
    cluster = ClusterState(source=kube, clock=clock, watched=(*WATCHED, GCENODECLASSES))
    provider = build_cloud_provider(
        provider="gcp",
        client=kube,
        cluster=cluster,
        catalog=None,
        clock=RealClock(),
        unavailable=UnavailableOfferings(clock=clock, ttl_seconds=1),
        gcp=GCPOptions(cluster_name="c1", compute_endpoint="http://127.0.0.1:1/compute/v1/", anonymous=True),
    )
    assert isinstance(provider, GCPCloudProvider)
    assert isinstance(provider, Runnable)
    assert provider.name == "gcp"
    assert provider.api.compute_endpoint == "http://127.0.0.1:1/compute/v1/"
    await provider.aclose()
    with pytest.raises(ValueError, match="cluster-name"):
        build_cloud_provider(
            provider="gcp",
            client=kube,
            cluster=cluster,
            catalog=None,
            clock=RealClock(),
            unavailable=UnavailableOfferings(clock=clock, ttl_seconds=1),
        )


async def test_the_gcp_provider_requires_the_gcenodeclass_crd() -> None:
    kube = FakeKube(clock=FakeClock())
    assert "gcenodeclasses.joiner.sh" in await missing_crds(kube, provider="gcp")
    assert "gcenodeclasses.joiner.sh" not in await missing_crds(kube, provider="aws")


def ready(obj: Obj) -> Obj:
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")


async def test_the_status_controller_writes_what_the_class_resolves_to(
    provider: GCPCloudProvider, gce: FakeGCE, nodeclasses: dict[str, Obj], clock: FakeClock, api: GCPApi
) -> None:
    kube = FakeKube(clock=clock)
    cluster = ClusterState(source=kube, clock=clock, watched=(*WATCHED, GCENODECLASSES))
    gce.add_reservation("us-central1-b", "a100-block", "a2-highgpu-1g", 2)
    nodeclasses["gpu"] = nodeclass(
        reservationSelectorTerms=[{"name": "a100-block"}],
        imageSelectorTerms=[
            {"instanceTemplate": "gke-gpu-pool", "gpu": True},
            {"image": "projects/cos-cloud/global/images/family/cos-stable"},
        ],
    )
    nodeclasses["broken"] = nodeclass("broken", subnetworkSelectorTerms=[{"name": "no-such-subnet"}])
    for obj in nodeclasses.values():
        cluster.informers["GCENodeClass"]._apply("ADDED", await kube.create(GCENODECLASSES, obj))
    status = GCENodeClassStatusController(resolver=provider.resolver, client=kube, cluster=cluster, clock=clock)
    assert await status.reconcile("gpu") == 60.0
    written = kube.obj(GCENODECLASSES, "gpu")
    assert written is not None
    assert (ready(written)["status"], ready(written)["reason"]) == ("True", "Resolved")
    assert written["status"]["zones"] == ["us-central1-a", "us-central1-b", "us-central1-c"]
    assert written["status"]["subnetwork"] == "projects/joiner-test/regions/us-central1/subnetworks/gpu-nodes"
    assert written["status"]["images"] == [
        {
            "image": "projects/joiner-test/global/images/gpu-node-v1",
            "gpu": True,
            "instanceTemplate": "projects/joiner-test/global/instanceTemplates/gke-gpu-pool",
        },
        {"image": "projects/cos-cloud/global/images/cos-109-17800-66"},
    ]
    assert written["status"]["reservations"] == [
        {
            "name": "a100-block",
            "project": "joiner-test",
            "zone": "us-central1-b",
            "instanceType": "a2-highgpu-1g",
            "available": 2,
        }
    ]
    assert await status.reconcile("broken") == 60.0
    broken = kube.obj(GCENODECLASSES, "broken")
    assert broken is not None
    assert ready(broken)["status"] == "False"
    assert "no subnetwork" in ready(broken)["message"]


def test_default_credentials_come_from_google_auth(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Application Default Credentials from a key file (here an authorized-user file, which needs no
    network until the first refresh), with the urllib3 transport the image ships."""
    key = tmp_path / "adc.json"
    key.write_text(
        '{"type": "authorized_user", "client_id": "id", "client_secret": "secret", "refresh_token": "token"}'
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "joiner-test")
    from controller.cloudprovider.gcp.api import DefaultCredentials

    credentials = DefaultCredentials()
    assert credentials.project == "joiner-test"
