"""The AKSNodeClass status controller: ``Ready`` says whether the class can launch (its location's VM
sizes listed, its capacity reservation group read) and, when not, why.

It reconciles a class when its spec changes and every ``refresh_seconds``, and writes only when the
condition changes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Unpack

import structlog

from controller.clock import format_time
from controller.kube.resources import AKSNODECLASSES
from controller.nodeclass.loop import NodeClassStatusLoop, Obj, Wiring
from controller.state.patches import condition

log = structlog.get_logger()


class AKSNodeClassStatusController(NodeClassStatusLoop):
    KIND = "AKSNodeClass"
    REFRESH_SECONDS = 300.0
    RESOURCE = AKSNODECLASSES

    def __init__(self, *, check: Callable[[str], Awaitable[tuple[bool, str]]], **wiring: Unpack[Wiring]) -> None:
        super().__init__(**wiring)
        self.check = check

    async def reconcile_class(self, name: str, obj: Obj) -> float | None:
        ready, message = await self.check(name)
        status = "True" if ready else "False"
        old = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
        if old is not None and old.get("status") == status and old.get("message") == message:
            return self.refresh_seconds
        now = format_time(self.clock.now())
        ready_condition = condition(
            obj, "Ready", ok=ready, reason="Resolved" if ready else "NotResolved", message=message, now=now
        )
        written, again = await self.write(name, {"conditions": [ready_condition]})
        if not written:
            return again
        log.info("aksnodeclass.resolved", nodeclass=name, ready=status, message=message)
        return self.refresh_seconds
