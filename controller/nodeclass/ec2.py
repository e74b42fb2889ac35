"""The EC2NodeClass status controller: resolve each class's selectors and write status + Ready.

It reconciles a class when it changes and every ``refresh_seconds`` (subnets, images and
reservations change behind joiner's back), and writes only when the status differs. A class whose
spec is invalid gets Ready=False with the validation error.

A resolved class is then validated by the preflight (``cloudprovider/aws/preflight.py``): its
CreateLaunchTemplate, CreateFleet and RunInstances sent with DryRun=True, with the real tags and
user data, at start and whenever what they would send changes. A refusal sets
``ValidationSucceeded=False`` (reason: the AWS error code; message: the call, AWS's words and what
the policy must allow) and Ready=False, so no NodePool using the class launches. What the status
says is ``cloudprovider/aws/status.py``'s.
"""

from __future__ import annotations

import hashlib
import json
from typing import Final

import structlog

from api.v1.ec2nodeclass import EC2NodeClass
from controller.clock import Clock, format_time
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.cluster import ClusterInfoSource
from controller.cloudprovider.aws.nodeclass import Resolution, ResolvedNodeClass, resolve, resolved_view
from controller.cloudprovider.aws.status import Validation, desired_status, preflight_validation, same_status
from controller.kube.client import KubeClient
from controller.kube.resources import EC2NODECLASSES
from controller.nodeclass.loop import NodeClassStatusLoop, Obj
from controller.state.cluster import ClusterState

log = structlog.get_logger()
REFRESH_SECONDS: Final = 60.0


class EC2NodeClassStatusController(NodeClassStatusLoop):
    KIND = "EC2NodeClass"
    RESOURCE = EC2NODECLASSES

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
        super().__init__(client=client, cluster=cluster, clock=clock, refresh_seconds=refresh_seconds)
        self.api = api
        self.cluster_name = cluster_name
        self.cluster_source = cluster_source or ClusterInfoSource(api, cluster_name)
        self.preflight = preflight
        # NodeClass -> (the dry-run requests' digest, the verdict): sent again only when they change
        self._validated: dict[str, tuple[str, Validation]] = {}

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

    async def reconcile_class(self, name: str, obj: Obj) -> float | None:
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
        if same_status(obj.get("status") or {}, status):
            return self.refresh_seconds
        written, again = await self.write(name, status)
        if not written:
            return again
        log.info(
            "ec2nodeclass.resolved",
            nodeclass=name,
            ready=resolution.ready,
            reason=resolution.reason,
            message=resolution.message,
        )
        return self.refresh_seconds
