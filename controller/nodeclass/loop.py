"""What every NodeClass status controller shares: a class is reconciled when its spec changes
(not on our own status writes) and, through the work queue, again every ``refresh_seconds``."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

import structlog

from controller.clock import Clock
from controller.kube.client import ApiError, KubeClient, NotFoundError
from controller.kube.resources import Resource
from controller.state.cluster import ClusterState
from controller.state.informer import EventType
from controller.state.queue import WorkQueue

log = structlog.get_logger()
Obj = dict[str, Any]


class Wiring(TypedDict):
    """What every status loop is made with, besides its provider's resolver."""

    client: KubeClient
    cluster: ClusterState
    clock: Clock
    refresh_seconds: NotRequired[float]


class NodeClassStatusLoop:
    """Subclasses set ``KIND`` and ``RESOURCE`` and implement ``reconcile_class(name, obj)`` for a
    class that is live (seconds until the next pass, or None)."""

    KIND: str = ""
    RESOURCE: Resource
    REFRESH_SECONDS: float = 60.0

    def __init__(
        self, *, client: KubeClient, cluster: ClusterState, clock: Clock, refresh_seconds: float | None = None
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.clock = clock
        self.refresh_seconds = self.REFRESH_SECONDS if refresh_seconds is None else refresh_seconds
        self.queue = WorkQueue(name=f"{self.KIND.lower()}-status", clock=clock)

    def live(self, name: str) -> Obj | None:
        """The class from the cache, unless it is gone or going."""
        obj = self.cluster.store(self.KIND).get(name)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return None
        return obj

    async def write(self, name: str, status: Obj) -> tuple[bool, float | None]:
        """Patch the class's status: (written, else when to try again: None when it is gone)."""
        try:
            await self.client.patch(self.RESOURCE, name, {"status": status}, subresource="status")
        except NotFoundError:
            return False, None
        except ApiError as err:
            log.warning(f"{self.KIND.lower()}.status_update_failed", nodeclass=name, error=str(err))
            return False, 5.0
        return True, None

    def _on_change(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        if etype == "DELETED":
            return
        if old is not None and (old.get("metadata") or {}).get("generation") == (obj.get("metadata") or {}).get(
            "generation"
        ):
            return  # a status write of ours, not a spec change
        self.queue.add(obj["metadata"]["name"])

    async def run(self) -> None:
        self.cluster.subscribe(self.KIND, self._on_change)
        await self.cluster.wait_synced()
        for name in list(self.cluster.store(self.KIND)):
            self.queue.add(name)
        await self.queue.run(self.reconcile, workers=2)

    async def reconcile(self, name: str) -> float | None:
        obj = self.live(name)
        return None if obj is None else await self.reconcile_class(name, obj)

    async def reconcile_class(self, name: str, obj: Obj) -> float | None:
        raise NotImplementedError
