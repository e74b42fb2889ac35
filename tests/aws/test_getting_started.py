"""docs/aws.md's getting started, run against the moto server as far as moto goes: every ``aws``
command of the section (through boto3, the flags mapped onto the API's own parameter names), then
``joiner aws check`` of the example EC2NodeClass. moto lacks EKS access entries; the proxy answers
what moto lacks elsewhere (EC2 quotas, EKS's public image parameters, capacity reservations)."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from controller.cli import main
from tests.aws.conftest import REGION, FaultProxy, Params, World, named_image, serve_ssm_parameters
from tests.aws.iampolicy import controller_policy, enforce
from tests.aws.test_check import quotas

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "aws.md"
EXAMPLE = ROOT / "deploy" / "examples" / "aws" / "ec2nodeclass.yaml"
MOTO_LACKS = {("eks", "create-access-entry")}
ACCOUNT = "123456789012"  # moto's


def guide_commands() -> list[list[str]]:
    text = GUIDE.read_text()
    section = text.split("## Getting started on an EKS cluster", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("aws "):
                commands.append(shlex.split(line))
    return commands


def call(client: Any, operation: str, flags: list[str]) -> Any:
    """``aws <service> <operation> --flag value ...`` as the boto3 call: each flag names the input
    member whose name matches it without dashes and case; JSON values are parsed, list members take
    every word until the next flag."""
    snake = operation.replace("-", "_")
    model = client.meta.service_model.operation_model(client.meta.method_to_api_mapping[snake])
    members = {name.lower(): (name, shape) for name, shape in model.input_shape.members.items()}
    params: dict[str, Any] = {}
    i = 0
    while i < len(flags):
        flag = flags[i].removeprefix("--").replace("-", "").lower()
        name, shape = members[flag]
        values = []
        i += 1
        while i < len(flags) and not flags[i].startswith("--"):
            values.append(flags[i])
            i += 1
        if shape.type_name == "string":
            params[name] = values[0]
        elif values[0].startswith(("[", "{")):
            params[name] = json.loads(values[0])
        else:
            params[name] = values
    return getattr(client, snake)(**params)


@pytest.fixture
def example(world: World, proxy: FaultProxy, moto_url: str, tmp_path: Path) -> Path:
    cluster = world.cluster
    boto3.client("eks", region_name=REGION, endpoint_url=moto_url).create_cluster(
        name=cluster, version="1.31", roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks", resourcesVpcConfig={"subnetIds": []}
    )
    serve_ssm_parameters(
        proxy,
        {
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id": named_image(
                world, "amazon-eks-node-al2023-x86_64-standard-1.31-v20251101"
            ),
        },
    )
    empty = (
        '<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        "<requestId>x</requestId><capacityReservationSet/></DescribeCapacityReservationsResponse>"
    )

    def no_reservations(action: str, params: Params) -> tuple[int, str] | None:
        return (200, empty) if action == "DescribeCapacityReservations" else None

    proxy.rules.append(no_reservations)
    path = tmp_path / "ec2nodeclass.yaml"
    path.write_text(EXAMPLE.read_text().replace("my-cluster", cluster))
    return path


def test_the_getting_started_commands_then_the_check_pass(
    world: World, proxy: FaultProxy, moto_url: str, example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = world.cluster
    ran = []
    for words in guide_commands():
        service, operation, flags = words[1], words[2], words[3:]
        if (service, operation) in MOTO_LACKS:
            continue
        text = " ".join(flags).replace("my-cluster", cluster).replace("111122223333", ACCOUNT)
        flags = [w.replace("my-cluster", cluster).replace("111122223333", ACCOUNT) for w in flags]
        if "SUBNET_IDS" in text:
            at = flags.index("SUBNET_IDS")
            flags[at : at + 1] = list(world.subnets.values())
            flags = [world.security_group if f == "NODE_SG" else f for f in flags]
        client = boto3.client(service, region_name=REGION, endpoint_url=moto_url)
        try:
            call(client, operation, flags)
        except client.exceptions.ClientError as err:
            # the Spot role is made once per account: "has been taken" means it exists
            if operation != "create-service-linked-role" or not ("taken" in str(err) or "exists" in str(err)):
                raise
        ran.append(f"{service} {operation}")
    assert "iam create-role" in ran
    assert "events put-targets" in ran
    iam = boto3.client("iam", region_name=REGION, endpoint_url=moto_url)
    attached = iam.list_attached_role_policies(RoleName=f"JoinerNodeRole-{cluster}")["AttachedPolicies"]
    assert {p["PolicyName"] for p in attached} == {
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
        "AmazonEC2ContainerRegistryReadOnly",
        "AmazonSSMManagedInstanceCore",
    }
    events = boto3.client("events", region_name=REGION, endpoint_url=moto_url)
    rules = events.list_rules(NamePrefix=f"joiner-{cluster}-")["Rules"]
    assert len(rules) == 4
    for rule in rules:
        targets = events.list_targets_by_rule(Rule=rule["Name"])["Targets"]
        assert [t["Arn"] for t in targets] == [f"arn:aws:sqs:{REGION}:{ACCOUNT}:joiner-{cluster}"]
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto_url)
    url = sqs.get_queue_url(QueueName=f"joiner-{cluster}")["QueueUrl"]
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"])
    assert policy["Statement"][0]["Action"] == "sqs:SendMessage"

    # moto names spot.amazonaws.com's service-linked role AWSServiceRoleForspot; AWS names it
    # AWSServiceRoleForEC2Spot, which is what the check looks for
    made = iam.list_roles(PathPrefix="/aws-service-role/spot.amazonaws.com/")["Roles"]
    assert made
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):  # test_check.py may have made it
        iam.create_role(
            RoleName="AWSServiceRoleForEC2Spot",
            Path="/aws-service-role/spot.amazonaws.com/",
            AssumeRolePolicyDocument="{}",
        )
    quotas(proxy, {})
    proxy.rules.append(enforce(controller_policy(cluster)))
    args = ["--nodeclass", "gpu", "-f", str(example), "--cluster-name", cluster, "--region", REGION]
    code = main(["aws", "check", *args, "--aws-endpoint-url", proxy.url])
    out = capsys.readouterr().out
    assert code == 0, out
    assert yaml.safe_load(example.read_text())["spec"]["role"] == f"JoinerNodeRole-{cluster}"
