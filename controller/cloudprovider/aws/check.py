"""``joiner aws check``: what stands between an EC2NodeClass and its first node, for a person.

One line per check, ``✔`` or ``✘``, and on a ``✘`` what to do about it: the credentials (STS
GetCallerIdentity), the region, the EKS cluster (DescribeCluster: endpoint, version), the images of
the class for that Kubernetes version, its subnets, security groups and instance profile, the user
data rendered and parsed back (nodeadm YAML / Bottlerocket TOML), the dry runs of the launch calls
(the same as the controller's preflight), the Spot service-linked role, and the on-demand G/P and
spot vCPU quotas. Nothing is created: the instance profile a ``spec.role`` needs is only named.
"""

from __future__ import annotations

import email
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import yaml

from api.v1.ec2nodeclass import EC2NodeClass
from controller.clock import format_time
from controller.cloudprovider.aws.api import AWSApi, AWSError
from controller.cloudprovider.aws.bootstrap import UserDataError, family_of
from controller.cloudprovider.aws.cluster import ClusterInfoSource
from controller.cloudprovider.aws.fleet import SPOT_ROLE_FIX
from controller.cloudprovider.aws.nodeclass import resolve, resolved_view
from controller.cloudprovider.aws.preflight import dry_run, launch_requests, probe_instance_type
from controller.cloudprovider.aws.status import desired_status, render_user_data
from controller.cloudprovider.types import CreateError

Obj = dict[str, Any]
OK: Final = "✔"
FAIL: Final = "✘"
SPOT_ROLE: Final = "AWSServiceRoleForEC2Spot"
# EC2's vCPU quotas a GPU cluster needs above zero (Service Quotas codes)
QUOTAS: Final = (
    ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("L-417A185B", "Running On-Demand P instances"),
    ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
    ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("L-7212CCBC", "All P Spot Instance Requests"),
)


@dataclass(frozen=True, slots=True)
class CheckLine:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def render(self) -> str:
        mark = OK if self.ok else FAIL
        tail = f" -- fix: {self.fix}" if (self.fix and not self.ok) else ""
        return f"{mark} {self.name}: {self.detail}{tail}"


def parse_user_data(family: str, text: str | None) -> str:
    """What the user data says, once parsed back as its reader would (ValueError when it does not)."""
    if not text:
        return "none"
    if family == "bottlerocket":
        settings = tomllib.loads(text).get("settings", {}).get("kubernetes", {})
        return f"Bottlerocket TOML, max-pods {settings.get('max-pods')}, api-server {settings.get('api-server')}"
    if family == "al2023":
        message = email.message_from_string(text)
        configs = [
            yaml.safe_load(str(p.get_payload()))
            for p in message.walk()
            if p.get_content_type() == "application/node.eks.aws"
        ]
        if not configs or not all(isinstance(c, dict) and c.get("kind") == "NodeConfig" for c in configs):
            raise ValueError("no nodeadm NodeConfig part")
        mine = configs[-1]["spec"]
        pods = ((mine.get("kubelet") or {}).get("config") or {}).get("maxPods")
        return f"nodeadm NodeConfig ({len(configs)} part(s)), maxPods {pods}, cluster {mine['cluster']['name']}"
    return f"{len(text)} bytes, passed as written ({family})"


async def run_checks(
    api: AWSApi, *, cluster_name: str, nodeclass: Obj, source: ClusterInfoSource, now: Callable[[], Any]
) -> list[CheckLine]:
    lines: list[CheckLine] = []
    try:
        who = await api.call("sts", "get_caller_identity")
        lines.append(CheckLine("credentials", True, str(who.get("Arn") or who.get("Account"))))
    except AWSError as err:
        lines.append(
            CheckLine(
                "credentials",
                False,
                f"{err.code}: {err.message}",
                "give the controller AWS credentials (IRSA or EKS Pod Identity in the cluster; AWS_PROFILE "
                "or AWS_ACCESS_KEY_ID outside)",
            )
        )
        return lines  # nothing else can answer
    lines.append(CheckLine("region", True, api.region))
    version: str | None = None
    try:
        found = await source.describe()
        version = await source.version()
        lines.append(
            CheckLine(
                "EKS DescribeCluster",
                True,
                f"{cluster_name}: Kubernetes {found.get('version')}, endpoint {found.get('endpoint')}",
            )
        )
    except AWSError as err:
        version = await source.version()
        lines.append(
            CheckLine(
                "EKS DescribeCluster",
                False,
                f"{cluster_name}: {err.code}: {err.message}",
                "allow eks:DescribeCluster on the cluster, or give --cluster-endpoint, --cluster-ca-bundle, "
                "--cluster-cidr and --cluster-version",
            )
        )
    try:
        model = EC2NodeClass.model_validate(nodeclass)
    except ValueError as err:
        lines.append(CheckLine("EC2NodeClass", False, str(err).splitlines()[0], "fix the spec"))
        return lines
    resolution = await resolve(api, model, cluster=cluster_name, kubernetes_version=version, create_profile=False)
    status = desired_status(nodeclass, resolution, now=format_time(now()))
    view = resolved_view({**nodeclass, "status": status})
    msg = resolution.message
    lines.append(
        CheckLine(
            f"images for Kubernetes {version or '?'}",
            bool(view.amis),
            ", ".join(f"{a['id']} ({a.get('name')})" for a in view.amis) or msg,
            "give --cluster-version, or amiSelectorTerms that match (see docs/aws.md)",
        )
    )
    zones = {s["zone"] for s in view.subnets}
    lines.append(
        CheckLine(
            "subnets",
            bool(view.subnets),
            f"{len(view.subnets)} in {len(zones)} zone(s): {', '.join(str(s['id']) for s in view.subnets)}"
            if view.subnets
            else "none matches spec.subnetSelectorTerms",
            "tag the cluster's private subnets with the selector's tags",
        )
    )
    lines.append(
        CheckLine(
            "security groups",
            bool(view.security_group_ids),
            ", ".join(view.security_group_ids) or "none matches spec.securityGroupSelectorTerms",
            "tag the node security group with the selector's tags",
        )
    )
    lines.append(
        CheckLine(
            "instance profile",
            bool(view.instance_profile),
            str(view.instance_profile or msg),
            "create the node role named by spec.role (or the instance profile of spec.instanceProfile)",
        )
    )
    if resolution.reason == "ResolutionFailed":
        lines.append(CheckLine("selectors", False, msg, "allow the Describe calls of docs/aws.md's policy"))
    spec = model.spec
    alias = next((t.alias for t in spec.ami_selector_terms if t.alias), None)
    family = family_of(alias=alias, ami_family=spec.ami_family)
    user_data: str | None = None
    rendered = False
    try:
        user_data = await render_user_data(api, source, view, instance_type=probe_instance_type(view))
        lines.append(CheckLine("user data", True, parse_user_data(family, user_data)))
        rendered = True
    except (CreateError, UserDataError, ValueError, yaml.YAMLError, KeyError, AWSError) as err:
        lines.append(CheckLine("user data", False, str(err), "fix spec.userData, or the cluster settings named"))
    if view.amis and view.subnets and rendered:
        requests = launch_requests(
            cluster_name=cluster_name, nodeclass=view, user_data=user_data, instance_type=probe_instance_type(view)
        )
        for result in await dry_run(api, requests, cluster_name=cluster_name):
            lines.append(
                CheckLine(
                    f"{result.call} (DryRun)",
                    result.ok,
                    result.message if result.ok else f"{result.code}",
                    result.message,
                )
            )
    else:
        lines.append(
            CheckLine("launch (DryRun)", False, "not tried: no image, subnet or user data", "fix the lines above")
        )
    try:
        await api.call("iam", "get_role", RoleName=SPOT_ROLE)
        lines.append(CheckLine("Spot service-linked role", True, SPOT_ROLE))
    except AWSError as err:
        missing = err.code == "NoSuchEntity"
        lines.append(
            CheckLine(
                "Spot service-linked role",
                False,
                f"{SPOT_ROLE} does not exist" if missing else f"{err.code}: {err.message}",
                SPOT_ROLE_FIX if missing else "allow iam:GetRole on the role to check it",
            )
        )
    for code, title in QUOTAS:
        try:
            answer = await api.call("service-quotas", "get_service_quota", ServiceCode="ec2", QuotaCode=code)
            value = float((answer.get("Quota") or {}).get("Value") or 0)
            lines.append(
                CheckLine(
                    f"quota {code}",
                    value > 0,
                    f"{title}: {value:g} vCPUs",
                    f"request an increase: aws service-quotas request-service-quota-increase --service-code ec2 "
                    f"--quota-code {code} --desired-value N",
                )
            )
        except AWSError as err:
            lines.append(
                CheckLine(
                    f"quota {code}",
                    False,
                    f"{title}: {err.code}: {err.message}",
                    "allow servicequotas:GetServiceQuota, or look the quota up in the Service Quotas console",
                )
            )
    return lines
