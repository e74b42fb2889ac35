"""Images of the al2023 and bottlerocket aliases come from AWS's public SSM parameters for the
cluster's Kubernetes version (from --cluster-version, else EKS DescribeCluster), pinned releases too."""

from __future__ import annotations

import boto3

from controller.clock import FakeClock
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.cluster import ClusterInfoSource, ClusterSettings
from controller.cloudprovider.aws.nodeclass import alias_parameters
from controller.cloudprovider.aws.provider import AWSCloudProvider
from tests.aws.conftest import FaultProxy, World, named_image, nodeclaim, resolve_into, serve_ssm_parameters

EKS = "/aws/service/eks/optimized-ami"


def condition(obj: dict[str, object], ctype: str) -> dict[str, str]:
    status = obj["status"]
    assert isinstance(status, dict)
    return next(c for c in status["conditions"] if c["type"] == ctype)


def eks_cluster(world: World, moto_url: str, version: str) -> None:
    eks = boto3.client("eks", region_name="us-east-1", endpoint_url=moto_url)
    eks.create_cluster(
        name=world.cluster,
        version=version,
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": []},
    )


async def test_al2023_images_are_those_published_for_the_clusters_kubernetes_version(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock, proxy: FaultProxy, moto_url: str
) -> None:
    eks_cluster(world, moto_url, "1.31")
    standard = named_image(world, "amazon-eks-node-al2023-x86_64-standard-1.31-v20251101")
    nvidia = named_image(world, "amazon-eks-node-al2023-x86_64-nvidia-1.31-v20251101")
    newer_wrong_minor = named_image(world, "amazon-eks-node-al2023-x86_64-standard-1.33-v20251120")
    serve_ssm_parameters(
        proxy,
        {
            f"{EKS}/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id": standard,
            f"{EKS}/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id": nvidia,
            f"{EKS}/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id": newer_wrong_minor,
        },
    )
    obj = await resolve_into(
        world,
        world.nodeclass(amiSelectorTerms=[{"alias": "al2023@latest"}]),
        api=api,
        clock=clock,
        kubernetes_version="1.31",
    )
    assert condition(obj, "Ready")["status"] == "True"
    assert {a["id"] for a in obj["status"]["amis"]} == {standard, nvidia}
    gpu = await provider.create(nodeclaim("nc-gpu", types=["g6.xlarge"], capacity_types=["on-demand"]))
    cpu = await provider.create(nodeclaim("nc-cpu", types=["m5.large"], capacity_types=["on-demand"]))
    assert (gpu.image_id, cpu.image_id) == (nvidia, standard)


async def test_a_pinned_release_reads_its_own_parameter(
    world: World, api: AWSApi, clock: FakeClock, proxy: FaultProxy
) -> None:
    pinned = named_image(world, "amazon-eks-node-al2023-x86_64-standard-1.31-v20250101")
    name = (
        f"{EKS}/1.31/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.31-v20250101/image_id"
    )
    asked = serve_ssm_parameters(proxy, {name: pinned})
    obj = await resolve_into(
        world,
        world.nodeclass(amiSelectorTerms=[{"alias": "al2023@v20250101"}]),
        api=api,
        clock=clock,
        kubernetes_version="1.31",
    )
    assert [a["id"] for a in obj["status"]["amis"]] == [pinned]
    assert name in [n for names in asked for n in names]


def test_bottlerocket_parameters_per_architecture_and_flavour() -> None:
    assert alias_parameters("bottlerocket@latest", "1.31") == [
        "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id",
        "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/latest/image_id",
        "/aws/service/bottlerocket/aws-k8s-1.31/arm64/latest/image_id",
        "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/arm64/latest/image_id",
    ]
    assert alias_parameters("bottlerocket@v1.26.0", "1.31")[0] == (
        "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/1.26.0/image_id"
    )


async def test_without_a_known_version_an_alias_is_not_resolved_and_says_what_to_give(
    world: World, api: AWSApi, clock: FakeClock
) -> None:
    obj = await resolve_into(
        world, world.nodeclass(amiSelectorTerms=[{"alias": "al2023@latest"}]), api=api, clock=clock
    )
    ready = condition(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "AMINotFound")
    assert "--cluster-version" in ready["message"]


async def test_the_version_comes_from_the_flag_else_from_eks(world: World, api: AWSApi, moto_url: str) -> None:
    assert await ClusterInfoSource(api, world.cluster, ClusterSettings(version="1.30")).version() == "1.30"
    assert await ClusterInfoSource(api, world.cluster).version() is None  # no such EKS cluster
    eks_cluster(world, moto_url, "1.31")
    assert await ClusterInfoSource(api, world.cluster).version() == "1.31"
