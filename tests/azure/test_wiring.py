"""`joiner run --provider azure`: the flags, the provider the operator builds, the CRD it needs."""

from __future__ import annotations

import pytest

from controller.cli import main
from controller.clock import FakeClock, RealClock
from controller.cloudprovider.azure.provider import AzureCloudProvider
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.kube.resources import AKSNODECLASSES
from controller.operator.app import AzureOptions, Runnable, build_cloud_provider, missing_crds
from controller.state.cluster import WATCHED, ClusterState
from tests.unit.fakeapi import FakeKube


def test_the_azure_provider_needs_a_cluster_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--provider", "azure"]) == 2
    assert "--cluster-name" in capsys.readouterr().err


async def test_build_cloud_provider_makes_the_azure_provider_with_its_status_loop() -> None:
    clock = FakeClock()
    kube = FakeKube(clock=clock)
    cluster = ClusterState(source=kube, clock=clock, watched=(*WATCHED, AKSNODECLASSES))
    provider = build_cloud_provider(
        provider="azure",
        client=kube,
        cluster=cluster,
        catalog=None,
        clock=RealClock(),
        unavailable=UnavailableOfferings(clock=clock, ttl_seconds=1),
        azure=AzureOptions(cluster_name="c1", endpoint="http://127.0.0.1:1"),
    )
    assert isinstance(provider, AzureCloudProvider)
    assert isinstance(provider, Runnable)
    assert provider.name == "azure"
    assert provider.api.endpoint == "http://127.0.0.1:1"
    await provider.aclose()
    with pytest.raises(ValueError, match="cluster-name"):
        build_cloud_provider(
            provider="azure",
            client=kube,
            cluster=cluster,
            catalog=None,
            clock=RealClock(),
            unavailable=UnavailableOfferings(clock=clock, ttl_seconds=1),
        )


async def test_the_azure_provider_requires_the_aksnodeclass_crd() -> None:
    kube = FakeKube(clock=FakeClock())
    assert "aksnodeclasses.joiner.sh" in await missing_crds(kube, provider="azure")
    assert "aksnodeclasses.joiner.sh" not in await missing_crds(kube, provider="gcp")


def test_the_example_is_valid() -> None:
    from pathlib import Path

    import yaml

    from api.v1.aksnodeclass import AKSNodeClass
    from api.v1.nodepool import NodePool

    path = Path(__file__).resolve().parents[2] / "deploy/examples/azure/aksnodeclass.yaml"
    nodeclass, pool = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    assert AKSNodeClass.model_validate(nodeclass).spec.location == "eastus"
    assert NodePool.model_validate(pool).metadata.name == "t4-inference"
