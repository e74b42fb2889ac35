"""Every request joiner sends to launch would pass the IAM policy that docs/aws.md tells users to give it.

The policy is read from docs/aws.md itself; the requests are the ones the provider really sent to the
moto server (recorded by the proxy, in the EC2 query form). moto checks no IAM, so this test does:
for each resource a call creates, some statement must allow the action on that resource type, and
every ``aws:RequestTag/KEY`` condition of that statement must be met by the tags the request puts on
that resource (CreateFleet's own TagSpecifications, or its launch template's for the network
interfaces and spot requests).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from controller.cloudprovider.aws.provider import AWSCloudProvider
from tests.aws.conftest import FaultProxy, Params, World, nodeclaim

POLICY_DOC = Path(__file__).resolve().parents[2] / "docs" / "aws.md"
# what each launch call creates (spot requests only for spot capacity)
CREATES = {
    "CreateFleet": ("fleet", "instance", "volume", "network-interface"),
    "RunInstances": ("instance", "volume", "network-interface"),
    "CreateLaunchTemplate": ("launch-template",),
}


def controller_policy(cluster: str) -> list[dict[str, Any]]:
    text = POLICY_DOC.read_text()
    section = text.split("## IAM policy of the controller", 1)[1]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block is not None, "docs/aws.md has no JSON policy under 'IAM policy of the controller'"
    body = block.group(1).replace("CLUSTER", cluster)
    statements: list[dict[str, Any]] = json.loads(body)["Statement"]
    return statements


def tags_by_resource(params: Params, prefix: str = "") -> dict[str, dict[str, str]]:
    """``{resource type: tags}`` of the ``TagSpecification.N`` entries under ``prefix``."""
    out: dict[str, dict[str, str]] = {}
    pattern = re.compile(re.escape(prefix) + r"TagSpecification\.(\d+)\.ResourceType$")
    for key, rtype in params.items():
        m = pattern.match(key)
        if m is None:
            continue
        base = f"{prefix}TagSpecification.{m.group(1)}.Tag."
        tags = out.setdefault(rtype, {})
        for k, v in params.items():
            if k.startswith(base) and k.endswith(".Key"):
                tags[v] = params.get(k.removesuffix(".Key") + ".Value", "")
    return out


def _as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def refusals(statements: list[dict[str, Any]], action: str, rtype: str, tags: dict[str, str]) -> str | None:
    """None when a statement allows ``action`` to create ``rtype`` with ``tags``; else why not."""
    why = []
    for st in statements:
        if f"ec2:{action}" not in _as_list(st["Action"]):
            continue
        if not any(r.endswith(f":{rtype}/*") for r in _as_list(st["Resource"])):
            continue
        conditions = st.get("Condition") or {}
        missing = [
            f"{key.removeprefix('aws:RequestTag/')}={want}"
            for op, pairs in conditions.items()
            for key, want in pairs.items()
            if op == "StringEquals" and key.startswith("aws:RequestTag/") and tags.get(key.split("/", 1)[1]) != want
        ]
        other = [op for op in conditions if op != "StringEquals"]
        if not missing and not other:
            return None
        why.append(f"statement {st.get('Sid')} needs the request tag(s) {missing}")
    return "; ".join(why) or "no statement allows it"


def check(statements: list[dict[str, Any]], proxy: FaultProxy) -> list[str]:
    problems = []
    templates = {p["LaunchTemplateName"]: p for a, p in proxy.requests if a == "CreateLaunchTemplate"}
    seen = set()
    for action, params in proxy.requests:
        if action not in CREATES:
            continue
        seen.add(action)
        own = tags_by_resource(params)
        via_template: dict[str, dict[str, str]] = {}
        if action == "CreateFleet":
            names = {v for k, v in params.items() if k.endswith("LaunchTemplateSpecification.LaunchTemplateName")}
            for name in names:
                assert name in templates, f"CreateFleet uses launch template {name} that joiner never created"
                for rtype, tags in tags_by_resource(templates[name], "LaunchTemplateData.").items():
                    via_template.setdefault(rtype, {}).update(tags)
        spot = "spot" in (
            params.get("TargetCapacitySpecification.DefaultTargetCapacityType"),
            params.get("InstanceMarketOptions.MarketType"),
        )
        created = (*CREATES[action], *(("spot-instances-request",) if spot else ()))
        for rtype in created:
            tags = {**via_template.get(rtype, {}), **own.get(rtype, {})}
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
