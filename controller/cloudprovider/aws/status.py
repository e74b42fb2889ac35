"""What an EC2NodeClass's status says: what its selectors resolved to, the preflight's verdict
(``ValidationSucceeded``: its CreateLaunchTemplate, CreateFleet and RunInstances sent with
DryRun=True, with the real tags and user data) and ``Ready``, keeping transition times.

The loop that resolves each class and writes this status is ``controller/nodeclass/ec2.py``;
``joiner aws check`` (``check.py``) prints the same verdict for a person.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from controller.cloudprovider.aws.api import AWSApi, AWSError
from controller.cloudprovider.aws.bootstrap import FAMILIES_WITH_BOOTSTRAP, UserDataError, family_of, user_data_for
from controller.cloudprovider.aws.cluster import ClusterInfoSource
from controller.cloudprovider.aws.instancetypes import max_pods
from controller.cloudprovider.aws.nodeclass import Resolution, ResolvedNodeClass
from controller.cloudprovider.aws.preflight import DryRunResult, dry_run, launch_requests, probe_instance_type
from controller.cloudprovider.types import CreateError
from controller.state.patches import condition

log = structlog.get_logger()
Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Validation:
    """The preflight's verdict: ``ok``, the reason (``DryRunSucceeded`` or the AWS error code) and a
    message naming the refused call and what the policy must allow."""

    ok: bool
    reason: str
    message: str


def desired_status(obj: Obj, resolution: Resolution, *, now: str, validation: Validation | None = None) -> Obj:
    """The status to write: what was resolved, the preflight's ``ValidationSucceeded`` (when it ran),
    and Ready -- resolved and, when validated, allowed -- keeping transition times."""
    current = obj.get("status") or {}
    ready = resolution.ready and (validation is None or validation.ok)
    if resolution.ready and validation is not None and not validation.ok:
        reason, message = "ValidationFailed", validation.message
    else:
        reason = resolution.reason or ("Resolved" if resolution.ready else "NotResolved")
        message = resolution.message
    conditions = [c for c in current.get("conditions") or [] if c.get("type") not in ("Ready", "ValidationSucceeded")]
    if validation is not None:
        ok, why, said = validation.ok, validation.reason, validation.message
        conditions.append(condition(obj, "ValidationSucceeded", ok=ok, reason=why, message=said, now=now))
    conditions.append(condition(obj, "Ready", ok=ready, reason=reason, message=message, now=now))
    return {**resolution.status(), "conditions": conditions}


async def render_user_data(
    api: AWSApi, source: ClusterInfoSource, nodeclass: ResolvedNodeClass, *, instance_type: str
) -> str | None:
    """The user data a launch of ``instance_type`` from ``nodeclass`` carries (NodePool labels and
    taints aside); CreateError when the cluster's endpoint is unknown, UserDataError when the
    user's part cannot be merged."""
    spec = nodeclass.model.spec
    alias = next((t.alias for t in spec.ami_selector_terms if t.alias), None)
    family = family_of(alias=alias, ami_family=spec.ami_family)
    if family not in FAMILIES_WITH_BOOTSTRAP:
        return spec.user_data
    rows = await api.collect("ec2", "describe_instance_types", key="InstanceTypes", InstanceTypes=[instance_type])
    pods = max_pods(rows[0]) if rows else None
    return user_data_for(
        family,
        await source.get(),
        labels={},
        taints=[],
        user_data=spec.user_data,
        max_pods=pods,
        instance_store=spec.instance_store_policy,
    )


async def preflight_validation(
    api: AWSApi, source: ClusterInfoSource, nodeclass: ResolvedNodeClass, *, cluster_name: str
) -> tuple[Validation, list[DryRunResult]]:
    """Render the user data and dry-run the NodeClass's launch requests; the verdict and each call's."""
    probe = probe_instance_type(nodeclass)
    try:
        user_data = await render_user_data(api, source, nodeclass, instance_type=probe)
    except CreateError as err:
        return Validation(False, err.reason, str(err)), []
    except UserDataError as err:
        return Validation(False, "InvalidUserData", str(err)), []
    except AWSError as err:
        return Validation(False, err.code, f"DescribeInstanceTypes {probe}: {err.message}"), []
    requests = launch_requests(cluster_name=cluster_name, nodeclass=nodeclass, user_data=user_data, instance_type=probe)
    results = await dry_run(api, requests, cluster_name=cluster_name)
    refused = [r for r in results if not r.ok]
    if refused:
        return Validation(False, refused[0].code, "; ".join(r.line() for r in refused)), results
    return Validation(
        True, "DryRunSucceeded", "CreateLaunchTemplate, CreateFleet and RunInstances allowed (DryRun)"
    ), results


def same_status(current: Obj, desired: Obj) -> bool:
    """The same status but for the conditions' transition times (nothing to write)."""

    def strip(status: Obj) -> Obj:
        out = {k: v for k, v in status.items() if k != "conditions"}
        out["conditions"] = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
        ]
        for key in ("subnets", "securityGroups", "amis", "capacityReservations"):
            out.setdefault(key, [])
        return out

    return strip(current) == strip(desired)
