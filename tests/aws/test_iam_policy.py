"""Every request joiner sends to launch would pass the IAM policy that docs/aws.md tells users to give it.

The policy is read from docs/aws.md itself; the requests are the ones the provider really sent to the
moto server (recorded by the proxy, in the EC2 query form). moto checks no IAM, so this test does:
for each resource a call creates, some statement must allow the action on that resource type, and
every ``aws:RequestTag/KEY`` condition of that statement must be met by the tags the request puts on
that resource (CreateFleet's own TagSpecifications, or its launch template's for the network
interfaces and spot requests).
"""

from __future__ import annotations

from typing import Any

from controller.cloudprovider.aws.provider import AWSCloudProvider
from tests.aws.conftest import FaultProxy, World, nodeclaim
from tests.aws.iampolicy import CREATES, controller_policy, created_with_tags, refusals


def check(statements: list[dict[str, Any]], proxy: FaultProxy) -> list[str]:
    problems = []
    templates = {p["LaunchTemplateName"]: p for a, p in proxy.requests if a == "CreateLaunchTemplate"}
    seen = set()
    for action, params in proxy.requests:
        if action not in CREATES:
            continue
        seen.add(action)
        if action == "CreateFleet":
            names = {v for k, v in params.items() if k.endswith("LaunchTemplateSpecification.LaunchTemplateName")}
            assert names <= set(templates), f"CreateFleet uses launch templates {names} joiner never created"
        for rtype, tags in created_with_tags(action, params, templates).items():
            why = refusals(statements, action, rtype, tags)
            if why is not None:
                problems.append(f"{action} creating a {rtype}: {why}")
    assert "CreateFleet" in seen
    assert "CreateLaunchTemplate" in seen
    return problems


async def test_the_launch_requests_carry_every_tag_the_documented_policy_needs(
    provider: AWSCloudProvider, world: World, proxy: FaultProxy
) -> None:
    statements = controller_policy(world.cluster)
    await provider.create(nodeclaim("nc-od", types=["m5.large"], capacity_types=["on-demand"]))
    await provider.create(nodeclaim("nc-spot", types=["m5.xlarge"], capacity_types=["spot"]))
    assert [
        p["TargetCapacitySpecification.DefaultTargetCapacityType"] for a, p in proxy.requests if a == "CreateFleet"
    ] == [
        "on-demand",
        "spot",
    ]
    assert check(statements, proxy) == []


def test_the_check_refuses_a_request_without_the_cluster_tag() -> None:
    statements = controller_policy("prod")
    assert refusals(statements, "CreateFleet", "fleet", {"joiner.sh/cluster": "prod"}) is None
    why = refusals(statements, "CreateFleet", "network-interface", {})
    assert why is not None
    assert "joiner.sh/cluster=prod" in why
