"""The GCENodeClass status controller: resolve each class (through the provider's resolver, so the
status shows what launches use) and write status + Ready.

It reconciles a class when its spec changes and every ``refresh_seconds`` (image families and
reservations change behind joiner's back), and writes only when the status differs. A class that
does not resolve gets Ready=False with the reason. What the status says is
``cloudprovider/gcp/status.py``'s.
"""

from __future__ import annotations

from typing import Unpack

import structlog

from controller.clock import format_time
from controller.cloudprovider.gcp.nodeclass import NodeClassResolver
from controller.cloudprovider.gcp.status import desired_status, resolved_status, same_status
from controller.cloudprovider.types import NodeClassNotReadyError
from controller.kube.resources import GCENODECLASSES
from controller.nodeclass.loop import NodeClassStatusLoop, Obj, Wiring

log = structlog.get_logger()


class GCENodeClassStatusController(NodeClassStatusLoop):
    KIND = "GCENodeClass"
    REFRESH_SECONDS = 60.0
    RESOURCE = GCENODECLASSES

    def __init__(self, *, resolver: NodeClassResolver, **wiring: Unpack[Wiring]) -> None:
        super().__init__(**wiring)
        self.resolver = resolver

    async def reconcile_class(self, name: str, obj: Obj) -> float | None:
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
        if same_status(obj.get("status") or {}, status):
            return self.refresh_seconds
        written, again = await self.write(name, status)
        if not written:
            return again
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        log.info("gcenodeclass.resolved", nodeclass=name, ready=ready["status"], message=ready["message"])
        return self.refresh_seconds
