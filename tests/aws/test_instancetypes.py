"""The pure parts of the aws provider: overhead, max pods, offerings and spot prices."""

from __future__ import annotations

import base64
import email
from datetime import UTC, datetime
from typing import Any

import yaml

from controller.clock import FakeClock
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.fleet import client_token
from controller.cloudprovider.aws.instances import instance_id_of, provider_id_of
from controller.cloudprovider.aws.instancetypes import (
    Reservation,
    build_instance_type,
    build_offerings,
    kube_reserved_millicores,
    latest_spot_prices,
    max_pods,
    on_demand_prices,
)
from controller.cloudprovider.aws.provider import AWSCloudProvider
from tests.aws.conftest import FaultProxy, World, nodeclaim, resolve_into

POOL = {"metadata": {"name": "gpu"}, "spec": {"template": {"spec": {"nodeClassRef": {"name": "gpu"}}}}}


def test_kube_reserved_cpu_shrinks_per_core() -> None:
    assert kube_reserved_millicores(1) == 60
    assert kube_reserved_millicores(2) == 70
    assert kube_reserved_millicores(4) == 80
    assert kube_reserved_millicores(8) == 90
    assert kube_reserved_millicores(192) == 80 + round(188 * 2.5)


def test_max_pods_is_eni_limited_on_the_default_network_card() -> None:
    assert max_pods({"NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10}}) == 29
    # p5.48xlarge: 64 interfaces over 32 cards, 2 on the default card -> 2 x 49 + 2 (the EKS images' 100)
    cards = [{"NetworkCardIndex": i, "MaximumNetworkInterfaces": 2} for i in range(32)]
    p5 = {
        "MaximumNetworkInterfaces": 64,
        "Ipv4AddressesPerInterface": 50,
        "DefaultNetworkCardIndex": 0,
        "NetworkCards": cards,
    }
    assert max_pods({"NetworkInfo": p5}) == 100
    # m5.24xlarge: 15 x 49 + 2, no cap at 110 (the EKS images say 737 too)
    assert max_pods({"NetworkInfo": {"MaximumNetworkInterfaces": 15, "Ipv4AddressesPerInterface": 50}}) == 737
    assert max_pods({}) == 110


async def test_the_kubelet_is_told_the_pods_the_capacity_says(
    provider: AWSCloudProvider, proxy: FaultProxy, world: World, api: AWSApi, clock: FakeClock, moto_url: str
) -> None:
    import boto3

    eks = boto3.client("eks", region_name="us-east-1", endpoint_url=moto_url)
    eks.create_cluster(
        name=world.cluster, roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={"subnetIds": []}
    )
    await resolve_into(world, world.nodeclass(amiFamily="AL2023"), api=api, clock=clock)
    types = {it.name: it for it in await provider.instance_types(POOL)}
    rows = {
        r["InstanceType"]: r
        for r in world.ec2.describe_instance_types(InstanceTypes=["p5.48xlarge", "g6.xlarge"])["InstanceTypes"]
    }
    for name, row in rows.items():  # counted here from the API fields, independently of joiner
        net = row["NetworkInfo"]
        card = next(c for c in net["NetworkCards"] if c["NetworkCardIndex"] == net["DefaultNetworkCardIndex"])
        expected = card["MaximumNetworkInterfaces"] * (net["Ipv4AddressesPerInterface"] - 1) + 2
        assert types[name].capacity.to_quantities()["pods"] == str(expected)
    assert types["p5.48xlarge"].capacity.to_quantities()["pods"] == "100"
    await provider.create(nodeclaim("nc-pods", types=["g6.xlarge", "p5.48xlarge"], capacity_types=["on-demand"]))
    templates = [p for a, p in proxy.requests if a == "CreateLaunchTemplate"]
    told = sorted(
        yaml.safe_load(str(part.get_payload()))["spec"]["kubelet"]["config"]["maxPods"]
        for t in templates
        for part in email.message_from_string(base64.b64decode(t["LaunchTemplateData.UserData"]).decode()).walk()
        if part.get_content_type() == "application/node.eks.aws"
    )
    assert told == [58, 100]  # one launch template per maxPods: g6.xlarge's and p5.48xlarge's


def test_a_gpu_row_becomes_an_instance_type_with_gpu_labels_and_overhead() -> None:
    row = {
        "InstanceType": "g6.xlarge",
        "VCpuInfo": {"DefaultVCpus": 4},
        "MemoryInfo": {"SizeInMiB": 16384},
        "GpuInfo": {"Gpus": [{"Name": "L4", "Manufacturer": "NVIDIA", "Count": 1, "MemoryInfo": {"SizeInMiB": 22888}}]},
        "NetworkInfo": {"MaximumNetworkInterfaces": 4, "Ipv4AddressesPerInterface": 15},
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
        "InstanceStorageInfo": {"TotalSizeInGB": 250, "NvmeSupport": "required"},
    }
    it = build_instance_type(row, root_volume_gib=200)
    q = it.capacity.to_quantities()
    assert (q["cpu"], q["memory"], q["pods"], q["nvidia.com/gpu"], q["ephemeral-storage"]) == (
        "4",
        "15155Mi",
        "58",
        "1",
        "200Gi",
    )
    assert it.overhead.to_quantities()["memory"] == f"{11 * 58 + 255 + 100}Mi"
    assert it.labels["joiner.sh/gpu-name"] == "L4"
    assert it.labels["joiner.sh/gpu-memory"] == "22888"
    assert it.labels["joiner.sh/instance-local-nvme"] == "250"
    assert it.labels["joiner.sh/instance-family"] == "g6"
    arm = build_instance_type({**row, "ProcessorInfo": {"SupportedArchitectures": ["arm64"]}, "GpuInfo": None})
    assert arm.labels["kubernetes.io/arch"] == "arm64"
    assert "joiner.sh/gpu-name" not in arm.labels


def test_offerings_per_zone_and_capacity_type_with_reservations() -> None:
    offerings = build_offerings(
        name="g6.xlarge",
        zones=["us-east-1b", "us-east-1a"],
        capacity_types=["on-demand", "spot", "reserved"],
        on_demand={"g6.xlarge": 0.8},
        spot={("g6.xlarge", "us-east-1a"): 0.3},
        reservations=[
            Reservation(id="cr-1", instance_type="g6.xlarge", zone="us-east-1a", available=1),
            Reservation(id="cr-2", instance_type="g6.xlarge", zone="us-east-1b", available=0),
            Reservation(id="cr-3", instance_type="p5.48xlarge", zone="us-east-1a", available=3),
        ],
    )
    got = [(o.zone, o.capacity_type, o.price, o.available) for o in offerings]
    assert got == [
        ("us-east-1a", "on-demand", 0.8, True),
        ("us-east-1a", "spot", 0.3, True),
        ("us-east-1b", "on-demand", 0.8, True),
        ("us-east-1a", "reserved", 0.0008, True),
        ("us-east-1b", "reserved", 0.0008, False),
    ]
    assert build_offerings(name="x1.tiny", zones=["a"], capacity_types=["on-demand"], on_demand={}, spot={}) == ()


def test_latest_spot_price_wins() -> None:
    rows: list[dict[str, Any]] = [
        {
            "InstanceType": "m5.large",
            "AvailabilityZone": "a",
            "SpotPrice": "0.05",
            "Timestamp": datetime(2026, 1, 1, tzinfo=UTC),
        },
        {
            "InstanceType": "m5.large",
            "AvailabilityZone": "a",
            "SpotPrice": "0.04",
            "Timestamp": datetime(2026, 2, 1, tzinfo=UTC),
        },
        {"InstanceType": "m5.large", "AvailabilityZone": "b", "SpotPrice": "bad"},
    ]
    assert latest_spot_prices(rows) == {("m5.large", "a"): 0.04}


def test_price_table_and_ids() -> None:
    prices = on_demand_prices("us-east-1")
    assert prices["p5.48xlarge"] > prices["g6.xlarge"] > prices["m5.large"] > 0
    assert on_demand_prices("eu-west-9") == prices
    pid = provider_id_of(zone="us-east-1a", instance_id="i-0abc")
    assert pid == "aws:///us-east-1a/i-0abc"
    assert instance_id_of(pid) == "i-0abc"
    assert instance_id_of("kwok://x") is None
    assert client_token("uid-1") == client_token("uid-1") != client_token("uid-2")
    assert client_token("uid-1", {"Overrides": ["a"]}) != client_token("uid-1", {"Overrides": ["b"]})
    assert len(client_token("u" * 300)) <= 64


async def test_offerings_are_listed_without_an_instance_type_filter(
    provider: AWSCloudProvider, proxy: FaultProxy
) -> None:
    pool = {"metadata": {"name": "gpu"}, "spec": {"template": {"spec": {"nodeClassRef": {"name": "gpu"}}}}}
    names = {it.name for it in await provider.instance_types(pool)}
    assert {"m5.large", "g6.xlarge", "p5.48xlarge"} <= names
    asked = [p for a, p in proxy.requests if a == "DescribeInstanceTypeOfferings"]
    assert asked
    for params in asked:
        filters = {v for k, v in params.items() if k.startswith("Filter.") and k.endswith(".Name")}
        assert filters == {"location"}  # EC2 limits a filter's values; the priced types are hundreds


async def test_with_raid0_ephemeral_storage_is_the_local_nvme(
    provider: AWSCloudProvider, world: World, api: AWSApi, clock: FakeClock
) -> None:
    before = {it.name: it for it in await provider.instance_types(POOL)}
    assert before["p5.48xlarge"].capacity.to_quantities()["ephemeral-storage"] == "200Gi"  # the root volume
    await resolve_into(world, world.nodeclass(instanceStorePolicy="RAID0"), api=api, clock=clock)
    after = {it.name: it for it in await provider.instance_types(POOL)}
    nvme_gb = int(after["p5.48xlarge"].labels["joiner.sh/instance-local-nvme"])
    assert nvme_gb >= 7600  # 8 NVMe drives
    assert after["p5.48xlarge"].capacity.to_quantities()["ephemeral-storage"] == f"{nvme_gb * 1000**3 // 1024**2}Mi"
    assert after["m5.large"].capacity.to_quantities()["ephemeral-storage"] == "200Gi"  # no local drives
