"""``joiner aws check`` against the moto server: every line a ✔ on a ready account; on one without
the Spot role, with a P quota of 0 and a policy that lacks a resource, a ✘ with the fix each, and a
non-zero exit. moto lacks EC2's quotas and EKS's public parameters, so the proxy answers those."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from controller.cli import main
from tests.aws.conftest import FaultProxy, Params, World, named_image, serve_ssm_parameters
from tests.aws.iampolicy import controller_policy, enforce
from tests.aws.test_preflight import without_resource

EKS = "/aws/service/eks/optimized-ami"


def quotas(proxy: FaultProxy, values: dict[str, float]) -> None:
    def rule(action: str, params: Params) -> tuple[int, str] | None:
        if action != "ServiceQuotasV20190624.GetServiceQuota":
            return None
        code = json.loads(params["Body"])["QuotaCode"]
        quota = {"ServiceCode": "ec2", "QuotaCode": code, "QuotaName": code, "Value": values.get(code, 64.0)}
        return 200, json.dumps({"Quota": quota})

    proxy.rules.append(rule)


def no_spot_role(proxy: FaultProxy) -> None:
    def rule(action: str, params: Params) -> tuple[int, str] | None:
        if action != "GetRole" or params.get("RoleName") != "AWSServiceRoleForEC2Spot":
            return None
        return 404, (
            "<ErrorResponse><Error><Type>Sender</Type><Code>NoSuchEntity</Code>"
            "<Message>The role with name AWSServiceRoleForEC2Spot cannot be found.</Message></Error>"
            "<RequestId>x</RequestId></ErrorResponse>"
        )

    proxy.rules.append(rule)


@pytest.fixture
def account(world: World, proxy: FaultProxy, moto_url: str, tmp_path: Path) -> Path:
    """An EKS 1.31 cluster, its AL2023 images, and the EC2NodeClass manifest of the getting-started guide."""
    boto3.client("eks", region_name="us-east-1", endpoint_url=moto_url).create_cluster(
        name=world.cluster,
        version="1.31",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": []},
    )
    standard = named_image(world, "amazon-eks-node-al2023-x86_64-standard-1.31-v20251101")
    nvidia = named_image(world, "amazon-eks-node-al2023-x86_64-nvidia-1.31-v20251101")
    serve_ssm_parameters(
        proxy,
        {
            f"{EKS}/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id": standard,
            f"{EKS}/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id": nvidia,
        },
    )
    manifest = world.nodeclass(amiSelectorTerms=[{"alias": "al2023@latest"}])
    path = tmp_path / "ec2nodeclass.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def check(world: World, proxy: FaultProxy, manifest: Path, capsys: Any) -> tuple[int, list[str]]:
    code = main(
        [
            "aws",
            "check",
            "--nodeclass",
            "gpu",
            "-f",
            str(manifest),
            "--cluster-name",
            world.cluster,
            "--region",
            "us-east-1",
            "--aws-endpoint-url",
            proxy.url,
        ]
    )
    return code, capsys.readouterr().out.splitlines()


def test_a_ready_account_passes_every_check(
    world: World, proxy: FaultProxy, account: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with contextlib.suppress(world.iam.exceptions.EntityAlreadyExistsException):  # another test made it
        world.iam.create_role(
            RoleName="AWSServiceRoleForEC2Spot",
            Path="/aws-service-role/spot.amazonaws.com/",
            AssumeRolePolicyDocument="{}",
        )
    quotas(proxy, {})
    proxy.rules.append(enforce(controller_policy(world.cluster)))
    code, lines = check(world, proxy, account, capsys)
    assert code == 0, "\n".join(lines)
    assert all(line.startswith("✔ ") for line in lines)
    names = [line[2:].split(":", 1)[0] for line in lines]
    for expected in (
        "credentials",
        "region",
        "EKS DescribeCluster",
        "images for Kubernetes 1.31",
        "subnets",
        "security groups",
        "instance profile",
        "user data",
        "CreateLaunchTemplate (DryRun)",
        "CreateFleet (DryRun)",
        "RunInstances (DryRun)",
        "Spot service-linked role",
        "quota L-DB2E81BA",
        "quota L-417A185B",
        "quota L-34B43A08",
    ):
        assert expected in names, expected
    user_data = next(line for line in lines if line.startswith("✔ user data"))
    assert "nodeadm NodeConfig" in user_data
    assert "maxPods 29" in user_data  # m5.large, the probe type of an x86_64 image


def test_what_is_missing_is_a_cross_with_its_fix_and_the_exit_code_says_so(
    world: World, proxy: FaultProxy, account: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_spot_role(proxy)
    quotas(proxy, {"L-417A185B": 0.0})
    policy = without_resource(controller_policy(world.cluster), "LaunchTaggedForTheCluster", "network-interface")
    proxy.rules.append(enforce(policy))
    code, lines = check(world, proxy, account, capsys)
    assert code == 1
    failed = {line[2:].split(":", 1)[0]: line for line in lines if line.startswith("✘ ")}
    assert set(failed) == {
        "CreateFleet (DryRun)",
        "RunInstances (DryRun)",
        "Spot service-linked role",
        "quota L-417A185B",
    }
    assert "UnauthorizedOperation" in failed["CreateFleet (DryRun)"]
    assert "network-interface/*" in failed["CreateFleet (DryRun)"]
    assert "create-service-linked-role --aws-service-name spot.amazonaws.com" in failed["Spot service-linked role"]
    assert "request-service-quota-increase" in failed["quota L-417A185B"]
    # the check creates nothing: no instance profile for the role
    profiles = world.iam.list_instance_profiles()["InstanceProfiles"]
    assert not [p for p in profiles if p["InstanceProfileName"].startswith(f"joiner-{world.cluster}-")]
