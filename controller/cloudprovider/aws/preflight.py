"""The preflight: the launch requests of an EC2NodeClass sent with ``DryRun=True``, as Karpenter's
NodeClass validation does. moto and the AWS APIs' own checks cannot tell whether IAM lets joiner
launch; a dry run can: EC2 answers ``DryRunOperation`` when the caller may make the call with these
very parameters (tags included: the policy conditions on them), and ``UnauthorizedOperation`` when
not, before anything is bought.

:func:`launch_requests` builds the three calls a launch makes -- CreateLaunchTemplate (the
NodeClass's template: image, groups, profile, metadata options, the rendered user data, the tags of
network interfaces and spot requests), CreateFleet (instant, on-demand, over that template, with
the fleet/instance/volume tags) and RunInstances (the same machine without a fleet) -- from the
same functions the launches use. :func:`dry_run` sends them. Only a refusal of authority fails the
check; another error (a launch template a dry-run CreateFleet cannot find yet, say) says nothing
about permissions and is reported as passed with the code noted.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Final

from controller.cloudprovider.aws.api import AWSApi, AWSError
from controller.cloudprovider.aws.fleet import (
    FLEET_TAGGED,
    TAG_CLUSTER,
    TEMPLATE_TAGGED,
    fleet_request,
    resource_tags,
    tag_specifications,
    template_data,
)
from controller.cloudprovider.aws.nodeclass import ResolvedNodeClass

Obj = dict[str, Any]
REFUSAL_CODES: Final = frozenset(
    {
        "UnauthorizedOperation",
        "AccessDenied",
        "AccessDeniedException",
        "Blocked",
        "OptInRequired",
        "PendingVerification",
        "SignatureDoesNotMatch",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
    }
)
# what each call creates, for the message that says what the policy must allow
CREATES: Final = {
    "CreateLaunchTemplate": ("launch-template",),
    "CreateFleet": (*FLEET_TAGGED, *TEMPLATE_TAGGED),
    "RunInstances": ("instance", "volume", "network-interface", "spot-instances-request"),
}
PROBE_TYPES: Final = {"amd64": "m5.large", "arm64": "m6g.large"}


@dataclass(frozen=True, slots=True)
class DryRunResult:
    call: str  # CreateLaunchTemplate, CreateFleet, RunInstances
    ok: bool
    code: str  # DryRunOperation on success, else the AWS error code
    message: str

    def line(self) -> str:
        return f"{self.call} (DryRun): {self.message}"


def is_refusal(code: str) -> bool:
    return code in REFUSAL_CODES or code.startswith(("AuthFailure", "UnauthorizedOperation", "AccessDenied"))


def probe_instance_type(nodeclass: ResolvedNodeClass) -> str:
    """A small type of the architecture of the NodeClass's first image, for the dry runs."""
    arch = str(nodeclass.amis[0].get("architecture") or "amd64") if nodeclass.amis else "amd64"
    return PROBE_TYPES.get(arch, PROBE_TYPES["amd64"])


def launch_requests(
    *,
    cluster_name: str,
    nodeclass: ResolvedNodeClass,
    user_data: str | None,
    instance_type: str,
    nodepool: str = "",
) -> dict[str, Obj]:
    """The CreateLaunchTemplate, CreateFleet and RunInstances a launch from ``nodeclass`` sends, with
    ``DryRun=True`` (keyed by the API's name)."""
    tags = resource_tags(cluster_name=cluster_name, nodeclass=nodeclass, nodepool=nodepool)
    image = str(nodeclass.amis[0]["id"]) if nodeclass.amis else ""
    subnet = str(nodeclass.subnets[0]["id"]) if nodeclass.subnets else ""
    data = template_data(nodeclass, image=image, reservation=None, user_data=user_data, tags=tags)
    template_name = f"joiner-{cluster_name}-{nodeclass.name}-preflight"[:128]
    create_template: Obj = {
        "LaunchTemplateName": template_name,
        "LaunchTemplateData": data,
        "TagSpecifications": tag_specifications(("launch-template",), tags),
        "DryRun": True,
    }
    claim = {"metadata": {"name": f"{nodeclass.name}-preflight", "uid": "preflight", "labels": {}}}
    configs = [
        {
            "LaunchTemplateSpecification": {"LaunchTemplateName": template_name, "Version": "$Latest"},
            "Overrides": [{"InstanceType": instance_type, "SubnetId": subnet}],
        }
    ]
    fleet = fleet_request(
        cluster_name=cluster_name,
        nodeclaim=claim,
        nodeclass=nodeclass,
        configs=configs,
        capacity_type="on-demand",
        reservation=None,
    )
    fleet["DryRun"] = True
    run: Obj = {k: v for k, v in data.items() if k != "TagSpecifications"}
    if "UserData" in run:  # RunInstances takes the text and encodes it itself
        run["UserData"] = base64.b64decode(run["UserData"]).decode()
    if "NetworkInterfaces" in run:
        run["NetworkInterfaces"] = [{**run["NetworkInterfaces"][0], "SubnetId": subnet}]
    else:
        run["SubnetId"] = subnet
    instance_tags = fleet_tags(fleet)
    run.update(
        {
            "InstanceType": instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "TagSpecifications": tag_specifications(("instance", "volume", "network-interface"), instance_tags),
            "DryRun": True,
        }
    )
    return {"CreateLaunchTemplate": create_template, "CreateFleet": fleet, "RunInstances": run}


def fleet_tags(fleet: Obj) -> dict[str, str]:
    spec = next(s for s in fleet["TagSpecifications"] if s["ResourceType"] == "instance")
    return {t["Key"]: t["Value"] for t in spec["Tags"]}


_OPERATIONS: Final = {
    "CreateLaunchTemplate": "create_launch_template",
    "CreateFleet": "create_fleet",
    "RunInstances": "run_instances",
}


async def dry_run(api: AWSApi, requests: dict[str, Obj], *, cluster_name: str) -> list[DryRunResult]:
    """Send each request (with DryRun=True); one result per call, in order."""
    out = []
    for call, params in requests.items():
        try:
            await api.call("ec2", _OPERATIONS[call], **params)
        except AWSError as err:
            if err.code == "DryRunOperation":
                out.append(DryRunResult(call, True, err.code, "allowed"))
            elif is_refusal(err.code):
                needs = ", ".join(f"{r}/*" for r in CREATES[call])
                out.append(
                    DryRunResult(
                        call,
                        False,
                        err.code,
                        f"refused: {err.code}: {err.message} -- the controller's IAM role needs ec2:{call} on "
                        f"{needs} with the request tag {TAG_CLUSTER}={cluster_name} (docs/aws.md, IAM policy)",
                    )
                )
            else:  # not about permissions: the dry run cannot say more
                out.append(DryRunResult(call, True, err.code, f"not refused by IAM (EC2 said {err.code})"))
        else:  # an endpoint that ignores DryRun made it for real: that is not a refusal either
            out.append(DryRunResult(call, True, "", "allowed (the endpoint ignored DryRun)"))
    return out
