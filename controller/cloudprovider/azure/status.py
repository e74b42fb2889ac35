"""The AKSNodeClass status controller: ``Ready`` says whether the class can launch (its location's VM
sizes listed, its capacity reservation group read) and, when not, why.

Runs as the azure provider's own loop; reconciles a class when its spec changes and every
``refresh_seconds``, and writes only when the condition changes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import structlog

from controller.clock import Clock, format_time
from controller.kube.client import ApiError, KubeClient, NotFoundError
from controller.kube.resources import AKSNODECLASSES
from controller.state.cluster import ClusterState
from controller.state.informer import EventType
from controller.state.queue import WorkQueue

log = structlog.get_logger()
Obj = dict[str, Any]
KIND: Final = "AKSNodeClass"
REFRESH_SECONDS: Final = 300.0


class AKSNodeClassStatusController:
    def __init__(
        self,
        *,
        check: Callable[[str], Awaitable[tuple[bool, str]]],
        client: KubeClient,
        cluster: ClusterState,
        clock: Clock,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self.check = check
        self.client = client
        self.cluster = cluster
        self.clock = clock
        self.refresh_seconds = refresh_seconds
        self.queue = WorkQueue(name="aksnodeclass-status", clock=clock)

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
        ready, message = await self.check(name)
        status = "True" if ready else "False"
        old = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
        if old is not None and old.get("status") == status and old.get("message") == message:
            return self.refresh_seconds
        now = format_time(self.clock.now())
        condition = {
            "type": "Ready",
            "status": status,
            "reason": "Resolved" if ready else "NotResolved",
            "message": message,
            "lastTransitionTime": old.get("lastTransitionTime", now) if old and old.get("status") == status else now,
            "observedGeneration": (obj.get("metadata") or {}).get("generation", 1),
        }
        try:
            await self.client.patch(AKSNODECLASSES, name, {"status": {"conditions": [condition]}}, subresource="status")
        except NotFoundError:
            return None
        except ApiError as err:
            log.warning("aksnodeclass.status_update_failed", nodeclass=name, error=str(err))
            return 5.0
        log.info("aksnodeclass.resolved", nodeclass=name, ready=status, message=message)
        return self.refresh_seconds
