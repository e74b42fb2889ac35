"""The EC2NodeClass status controller: resolve each class's selectors and write status + Ready.

Runs as the aws provider's own loop. It reconciles a class when it changes and every
``refresh_seconds`` (subnets, images and reservations change behind joiner's back), and writes only
when the status differs. A class whose spec is invalid gets Ready=False with the validation error.

A resolved class is then validated by the preflight (aws/preflight.py): its CreateLaunchTemplate,
CreateFleet and RunInstances sent with DryRun=True, with the real tags and user data, at start and
whenever what they would send changes. A refusal sets ``ValidationSucceeded=False`` (reason: the
AWS error code; message: the call, AWS's words and what the policy must allow) and Ready=False, so
no NodePool using the class launches.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final

import structlog

from api.v1.ec2nodeclass import EC2NodeClass
from controller.clock import Clock, format_time
from controller.cloudprovider.aws.api import AWSApi, AWSError
from controller.cloudprovider.aws.bootstrap import FAMILIES_WITH_BOOTSTRAP, UserDataError, family_of, user_data_for
from controller.cloudprovider.aws.cluster import ClusterInfoSource
from controller.cloudprovider.aws.instancetypes import max_pods
from controller.cloudprovider.aws.nodeclass import Resolution, ResolvedNodeClass, resolve, resolved_view
from controller.cloudprovider.aws.preflight import DryRunResult, dry_run, launch_requests, probe_instance_type
from controller.cloudprovider.types import CreateError
from controller.kube.client import ApiError, KubeClient, NotFoundError
from controller.kube.resources import EC2NODECLASSES
from controller.state.cluster import ClusterState
from controller.state.informer import EventType
from controller.state.queue import WorkQueue

log = structlog.get_logger()
Obj = dict[str, Any]
KIND: Final = "EC2NodeClass"
REFRESH_SECONDS: Final = 60.0


@dataclass(frozen=True, slots=True)
class Validation:
    """The preflight's verdict: ``ok``, the reason (``DryRunSucceeded`` or the AWS error code) and a
    message naming the refused call and what the policy must allow."""

    ok: bool
    reason: str
    message: str


def _condition(obj: Obj, ctype: str, ok: bool, reason: str, message: str, *, now: str) -> Obj:
    current = obj.get("status") or {}
    old = next((c for c in current.get("conditions") or [] if c.get("type") == ctype), None)
    status = "True" if ok else "False"
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": old.get("lastTransitionTime", now) if old and old.get("status") == status else now,
        "observedGeneration": (obj.get("metadata") or {}).get("generation", 1),
    }


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
        conditions.append(
            _condition(obj, "ValidationSucceeded", validation.ok, validation.reason, validation.message, now=now)
        )
    conditions.append(_condition(obj, "Ready", ready, reason, message, now=now))
    return {**resolution.status(), "conditions": conditions}


class EC2NodeClassStatusController:
    def __init__(
        self,
        *,
        api: AWSApi,
        client: KubeClient,
        cluster: ClusterState,
        clock: Clock,
        cluster_name: str,
        refresh_seconds: float = REFRESH_SECONDS,
        cluster_source: ClusterInfoSource | None = None,
        preflight: bool = True,
    ) -> None:
        self.api = api
        self.client = client
        self.cluster = cluster
        self.clock = clock
        self.cluster_name = cluster_name
        self.refresh_seconds = refresh_seconds
        self.cluster_source = cluster_source or ClusterInfoSource(api, cluster_name)
        self.preflight = preflight
        # NodeClass -> (the dry-run requests' digest, the verdict): sent again only when they change
        self._validated: dict[str, tuple[str, Validation]] = {}
        self.queue = WorkQueue(name="ec2nodeclass-status", clock=clock)

    def _on_change(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        if etype == "DELETED":
            return
        if old is not None and (old.get("metadata") or {}).get("generation") == (obj.get("metadata") or {}).get(
            "generation"
        ):
            return  # a status write of ours, not a spec change
        self.queue.add(obj["metadata"]["name"])

    async def run(self) -> None:
        self.cluster.subscribe(KIND, self._on_change)
        await self.cluster.wait_synced()
        for name in list(self.cluster.store(KIND)):
            self.queue.add(name)
        await self.queue.run(self.reconcile, workers=2)

    async def validate(self, name: str, nodeclass: ResolvedNodeClass) -> Validation:
        """The preflight of a resolved NodeClass, sent again only when what it would send changed (a
        new image, subnet, group, profile or spec) -- not on every refresh."""
        key = json.dumps(
            [
                nodeclass.model.spec.model_dump(mode="json", by_alias=True),
                nodeclass.amis[:1],
                nodeclass.subnets[:1],
                list(nodeclass.security_group_ids),
                nodeclass.instance_profile,
            ],
            sort_keys=True,
            default=str,
        )
        digest = hashlib.sha256(key.encode()).hexdigest()
        cached = self._validated.get(name)
        if cached is not None and cached[0] == digest:
            return cached[1]
        validation, results = await preflight_validation(
            self.api, self.cluster_source, nodeclass, cluster_name=self.cluster_name
        )
        self._validated[name] = (digest, validation)
        log.info(
            "ec2nodeclass.validated",
            nodeclass=name,
            ok=validation.ok,
            reason=validation.reason,
            calls={r.call: r.code for r in results},
            message=validation.message,
        )
        return validation

    async def reconcile(self, name: str) -> float | None:
        obj = self.cluster.store(KIND).get(name)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return None
        try:
            model = EC2NodeClass.model_validate(obj)
        except ValueError as err:
            resolution = Resolution(ready=False, reason="InvalidSpec", message=f"the spec is invalid: {err}")
        else:
            version = await self.cluster_source.version()
            resolution = await resolve(self.api, model, cluster=self.cluster_name, kubernetes_version=version)
        now = format_time(self.clock.now())
        validation = None
        if self.preflight and resolution.ready:
            validation = await self.validate(
                name, resolved_view({**obj, "status": desired_status(obj, resolution, now=now)})
            )
        status = desired_status(obj, resolution, now=now, validation=validation)
        if _same(obj.get("status") or {}, status):
            return self.refresh_seconds
        try:
            await self.client.patch(EC2NODECLASSES, name, {"status": status}, subresource="status")
        except NotFoundError:
            return None
        except ApiError as err:
            log.warning("ec2nodeclass.status_update_failed", nodeclass=name, error=str(err))
            return 5.0
        log.info(
            "ec2nodeclass.resolved",
            nodeclass=name,
            ready=resolution.ready,
            reason=resolution.reason,
            message=resolution.message,
        )
        return self.refresh_seconds


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


def _same(current: Obj, desired: Obj) -> bool:
    def strip(status: Obj) -> Obj:
        out = {k: v for k, v in status.items() if k != "conditions"}
        out["conditions"] = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
        ]
        for key in ("subnets", "securityGroups", "amis", "capacityReservations"):
            out.setdefault(key, [])
        return out

    return strip(current) == strip(desired)
