"""`joiner run --provider aws`: the flags, the provider the operator builds, the CRDs it needs."""

from __future__ import annotations

import pytest

from controller.cli import main
from controller.clock import FakeClock, RealClock
from controller.cloudprovider.aws.provider import AWSCloudProvider
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.kube.resources import EC2NODECLASSES
from controller.operator.app import AWSOptions, Runnable, build_cloud_provider, missing_crds
from controller.state.cluster import WATCHED, ClusterState
from tests.unit.fakeapi import FakeKube


def test_the_aws_provider_needs_a_cluster_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--provider", "aws"]) == 2
    assert "--cluster-name" in capsys.readouterr().err


async def test_build_cloud_provider_makes_the_aws_provider_with_its_status_loop() -> None:
    clock = FakeClock()
    kube = FakeKube(clock=clock)
    cluster = ClusterState(source=kube, clock=clock, watched=(*WATCHED, EC2NODECLASSES))
    provider = build_cloud_provider(
        provider="aws",
        client=kube,
        cluster=cluster,
        catalog=None,
        clock=RealClock(),
        unavailable=UnavailableOfferings(clock=clock, ttl_seconds=1),
        aws=AWSOptions(cluster_name="c1", region="eu-west-1", endpoint_url="http://127.0.0.1:1"),
    )
    assert isinstance(provider, AWSCloudProvider)
    assert isinstance(provider, Runnable)
    assert provider.name == "aws"
    assert provider.api.region == "eu-west-1"
    await provider.aclose()
    with pytest.raises(ValueError, match="cluster-name"):
        build_cloud_provider(
            provider="aws",
            client=kube,
            cluster=cluster,
            catalog=None,
            clock=RealClock(),
            unavailable=UnavailableOfferings(clock=clock, ttl_seconds=1),
        )


async def test_the_aws_provider_requires_the_ec2nodeclass_crd() -> None:
    kube = FakeKube(clock=FakeClock())
    assert "ec2nodeclasses.joiner.sh" in await missing_crds(kube, provider="aws")
    assert "ec2nodeclasses.joiner.sh" not in await missing_crds(kube, provider="kwok")
