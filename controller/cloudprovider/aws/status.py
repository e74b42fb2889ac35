"""The EC2NodeClass status controller: resolve each class's selectors and write status + Ready.

Runs as the aws provider's own loop. It reconciles a class when it changes and every
``refresh_seconds`` (subnets, images and reservations change behind joiner's back), and writes only
when the status differs. A class whose spec is invalid gets Ready=False with the validation error.
"""

from __future__ import annotations

from typing import Any, Final

import structlog

from api.v1.ec2nodeclass import EC2NodeClass
from controller.clock import Clock, format_time
from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.cluster import ClusterInfoSource
from controller.cloudprovider.aws.nodeclass import Resolution, resolve
from controller.kube.client import ApiError, KubeClient, NotFoundError
from controller.kube.resources import EC2NODECLASSES
from controller.state.cluster import ClusterState
from controller.state.informer import EventType
from controller.state.queue import WorkQueue

log = structlog.get_logger()
Obj = dict[str, Any]
KIND: Final = "EC2NodeClass"
REFRESH_SECONDS: Final = 60.0


def desired_status(obj: Obj, resolution: Resolution, *, now: str) -> Obj:
    """The status to write: what was resolved, and a Ready condition keeping its transition time."""
    current = obj.get("status") or {}
    old = next((c for c in current.get("conditions") or [] if c.get("type") == "Ready"), None)
    status = "True" if resolution.ready else "False"
    condition = {
        "type": "Ready",
        "status": status,
        "reason": resolution.reason or ("Resolved" if resolution.ready else "NotResolved"),
        "message": resolution.message,
        "lastTransitionTime": old.get("lastTransitionTime", now) if old and old.get("status") == status else now,
        "observedGeneration": (obj.get("metadata") or {}).get("generation", 1),
    }
    others = [c for c in current.get("conditions") or [] if c.get("type") != "Ready"]
    return {**resolution.status(), "conditions": [*others, condition]}


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
    ) -> None:
        self.api = api
        self.client = client
        self.cluster = cluster
        self.clock = clock
        self.cluster_name = cluster_name
        self.refresh_seconds = refresh_seconds
        self.cluster_source = cluster_source or ClusterInfoSource(api, cluster_name)
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
        status = desired_status(obj, resolution, now=format_time(self.clock.now()))
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
