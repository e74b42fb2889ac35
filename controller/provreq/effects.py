"""The ProvisioningRequest controller's writes on the request and its NodeClaims: the status
conditions, Events (each said once while unchanged), the attempt's record, NodeClaims deleted with
a reason. Each one does what it is told; what to write is decided in ``decide.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from controller.context import Context
from controller.kube.client import ConflictError, NotFoundError
from controller.kube.resources import PROVISIONING_REQUESTS
from controller.provreq.decide import ANNOTATION_ATTEMPT, Attempt
from controller.provreq.request import ProvisioningRequest
from controller.state.deletion import delete_nodeclaim
from controller.state.patches import ConditionUpdate, with_conditions

log = structlog.get_logger()


class RequestEffects:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._told: dict[str, tuple[str, str]] = {}

    async def status(self, req: ProvisioningRequest, updates: Sequence[ConditionUpdate]) -> bool:
        """Write the conditions; whether this call changed them (False: already so, or the request
        moved on since it was read -- its newer version queues it again)."""
        if not updates:
            return False
        current = {c.type: c for c in req.conditions}
        if all(
            (c := current.get(u.type)) is not None
            and (c.status, c.reason, c.message) == (u.status, u.reason, u.message)
            for u in updates
        ):
            return False
        conditions = with_conditions(req.raw, updates, now=self.ctx.clock.now())
        # the whole list is sent (a merge patch replaces a list): only over the version it was built
        # from, so a condition written since is never lost (a conflict comes back as a newer event)
        version = (req.raw.get("metadata") or {}).get("resourceVersion")
        try:
            await self.ctx.client.patch(
                PROVISIONING_REQUESTS,
                req.name,
                {"metadata": {"resourceVersion": version}, "status": {"conditions": conditions}},
                namespace=req.namespace,
                subresource="status",
            )
        except (NotFoundError, ConflictError):
            return False
        return True

    async def event(self, req: ProvisioningRequest, reason: str, message: str, warning: bool) -> None:
        if self._told.get(req.key) == (reason, message):
            return
        self._told[req.key] = (reason, message)
        await self.ctx.events.emit(
            dict(req.raw), reason=reason, message=message, type="Warning" if warning else "Normal"
        )

    def forget(self, key: str) -> None:
        """The request is gone: what was told of it is forgotten."""
        self._told.pop(key, None)

    async def record(self, req: ProvisioningRequest, attempt: Attempt) -> ProvisioningRequest | None:
        """Write the attempt's record on the request; the request as it is now (None: it is gone)."""
        try:
            updated = await self.ctx.client.patch(
                PROVISIONING_REQUESTS,
                req.name,
                {"metadata": {"annotations": {ANNOTATION_ATTEMPT: attempt.to_json()}}},
                namespace=req.namespace,
            )
        except NotFoundError:
            return None
        return ProvisioningRequest.of(updated)

    async def delete_claims(self, key: str, names: Sequence[str], *, reason: str, message: str) -> None:
        claims = self.ctx.cluster.claim_views()

        async def one(name: str) -> None:
            claim = claims.get(name) or self.ctx.writer.just_created(name)
            if claim is not None:
                await delete_nodeclaim(self.ctx, claim, reason=reason, message=message)

        await asyncio.gather(*(one(n) for n in names))
        if names:
            log.info("provisioningrequest.nodeclaims_deleted", request=key, nodeclaims=list(names), reason=reason)
