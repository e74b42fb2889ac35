"""The GCENodeClass status controller: resolve each class (through the provider's resolver, so the
status shows what launches use) and write status + Ready.

Runs as the gcp provider's own loop. It reconciles a class when its spec changes and every
``refresh_seconds`` (image families and reservations change behind joiner's back), and writes only
when the status differs. A class that does not resolve gets Ready=False with the reason.
"""

from __future__ import annotations

from typing import Any, Final

import structlog

from controller.clock import Clock, format_time
from controller.cloudprovider.gcp.nodeclass import NodeClassResolver, ResolvedNodeClass
from controller.cloudprovider.types import NodeClassNotReadyError
from controller.kube.client import ApiError, KubeClient, NotFoundError
from controller.kube.resources import GCENODECLASSES
from controller.state.cluster import ClusterState
from controller.state.informer import EventType
from controller.state.queue import WorkQueue

log = structlog.get_logger()
Obj = dict[str, Any]
KIND: Final = "GCENodeClass"
REFRESH_SECONDS: Final = 60.0


def resolved_status(view: ResolvedNodeClass, resolver: NodeClassResolver) -> Obj:
    return {
        "zones": list(view.zones),
        "subnetwork": view.subnetwork,
        "images": [
            {
                "image": c.image,
                **({"gpu": c.gpu} if c.gpu is not None else {}),
                **({"instanceTemplate": c.template_path} if c.template_path else {}),
            }
            for c in view.images
        ],
        "reservations": [
            {
                "name": r.name,
                "project": r.project,
                "zone": r.zone,
                "instanceType": r.instance_type,
                "available": max(0, resolver.room(r).available),
            }
            for r in view.reservations
        ],
    }


def desired_status(obj: Obj, resolved: Obj, *, ready: bool, reason: str, message: str, now: str) -> Obj:
    current = obj.get("status") or {}
    old = next((c for c in current.get("conditions") or [] if c.get("type") == "Ready"), None)
    status = "True" if ready else "False"
    condition = {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": old.get("lastTransitionTime", now) if old and old.get("status") == status else now,
        "observedGeneration": (obj.get("metadata") or {}).get("generation", 1),
    }
    others = [c for c in current.get("conditions") or [] if c.get("type") != "Ready"]
    return {**resolved, "conditions": [*others, condition]}


class GCENodeClassStatusController:
    def __init__(
        self,
        *,
        resolver: NodeClassResolver,
        client: KubeClient,
        cluster: ClusterState,
        clock: Clock,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self.resolver = resolver
        self.client = client
        self.cluster = cluster
        self.clock = clock
        self.refresh_seconds = refresh_seconds
        self.queue = WorkQueue(name="gcenodeclass-status", clock=clock)

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
        now = format_time(self.clock.now())
        try:
            view = await self.resolver.resolve(name, who="the status controller")
        except NodeClassNotReadyError as err:
            status = desired_status(obj, {}, ready=False, reason="NotResolved", message=str(err), now=now)
        else:
            status = desired_status(
                obj,
                resolved_status(view, self.resolver),
                ready=True,
                reason="Resolved",
                message=f"{len(view.zones)} zones, subnetwork {view.subnetwork.rsplit('/', 1)[-1]}, "
                f"{len(view.images)} image(s), {len(view.reservations)} reservation(s)",
                now=now,
            )
        if _same(obj.get("status") or {}, status):
            return self.refresh_seconds
        try:
            await self.client.patch(GCENODECLASSES, name, {"status": status}, subresource="status")
        except NotFoundError:
            return None
        except ApiError as err:
            log.warning("gcenodeclass.status_update_failed", nodeclass=name, error=str(err))
            return 5.0
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        log.info("gcenodeclass.resolved", nodeclass=name, ready=ready["status"], message=ready["message"])
        return self.refresh_seconds


def _same(current: Obj, desired: Obj) -> bool:
    def strip(status: Obj) -> Obj:
        out = {k: v for k, v in status.items() if k != "conditions"}
        out["conditions"] = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
        ]
        for key in ("zones", "images", "reservations"):
            out.setdefault(key, [])
        return out

    return strip(current) == strip(desired)
