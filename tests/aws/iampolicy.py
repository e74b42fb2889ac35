"""The controller's IAM policy as docs/aws.md writes it, evaluated the way IAM would for the launch
calls (moto evaluates no IAM): which statement allows an action to create a resource type, and
which request tags its conditions need. Shared by the policy test and the preflight's refusing proxy.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.aws.conftest import Params

POLICY_DOC = Path(__file__).resolve().parents[2] / "docs" / "aws.md"
# what each launch call creates (spot requests only for spot capacity)
CREATES = {
    "CreateFleet": ("fleet", "instance", "volume", "network-interface"),
    "RunInstances": ("instance", "volume", "network-interface"),
    "CreateLaunchTemplate": ("launch-template",),
}


def controller_policy(cluster: str) -> list[dict[str, Any]]:
    """The policy's statements, with CLUSTER replaced."""
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


def is_spot(params: Params) -> bool:
    return "spot" in (
        params.get("TargetCapacitySpecification.DefaultTargetCapacityType"),
        params.get("InstanceMarketOptions.MarketType"),
    )


def created_with_tags(action: str, params: Params, templates: dict[str, Params]) -> dict[str, dict[str, str]]:
    """What a launch call creates, each with the tags the request gives it: its own TagSpecifications,
    and for CreateFleet its launch templates' (network interfaces, spot requests)."""
    own = tags_by_resource(params)
    via: dict[str, dict[str, str]] = {}
    if action == "CreateFleet":
        names = {v for k, v in params.items() if k.endswith("LaunchTemplateSpecification.LaunchTemplateName")}
        for name in names:
            for rtype, tags in tags_by_resource(templates.get(name, {}), "LaunchTemplateData.").items():
                via.setdefault(rtype, {}).update(tags)
    created = (*CREATES[action], *(("spot-instances-request",) if is_spot(params) else ()))
    return {rtype: {**via.get(rtype, {}), **own.get(rtype, {})} for rtype in created}


def unauthorized(action: str, rtype: str) -> str:
    """EC2's UnauthorizedOperation answer, with the detail AWS gives to callers allowed to see it."""
    message = (
        "You are not authorized to perform this operation. User: arn:aws:sts::123456789012:assumed-role/"
        f"joiner/controller is not authorized to perform: ec2:{action} on resource: "
        f"arn:aws:ec2:us-east-1:123456789012:{rtype}/* because no identity-based policy allows the "
        f"ec2:{action} action"
    )
    return (
        f"<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>{message}</Message></Error>"
        "</Errors><RequestID>refused</RequestID></Response>"
    )


def enforce(statements: list[dict[str, Any]]) -> Any:
    """A FaultProxy rule that answers the launch calls' dry runs as IAM would under ``statements``:
    UnauthorizedOperation (403) when a resource they create is not allowed with its request tags;
    allowed ones go on to moto (which answers DryRunOperation)."""
    templates: dict[str, Params] = {}

    def rule(action: str, params: Params) -> tuple[int, str] | None:
        if action not in CREATES:
            return None
        if action == "CreateLaunchTemplate":
            templates[params.get("LaunchTemplateName", "")] = params
        for rtype, tags in created_with_tags(action, params, templates).items():
            if refusals(statements, action, rtype, tags) is not None:
                return 403, unauthorized(action, rtype)
        return None

    return rule
