"""Interruptions on the fake cloud: a NodeClaim annotated ``joiner.sh/interruption`` is interrupted.

The annotation's value is the kind: ``spot`` (a spot interruption warning), ``scheduled-change``,
``stopping`` or ``rebalance``. The notice goes through the same handler as the SQS messages of the
aws provider, so ``make demo`` and the KWOK e2e suite can show an interruption (of a gang member,
say) without AWS. Each NodeClaim object (by uid) is interrupted once.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import structlog

from controller.cloudprovider.notices import REBALANCE, SCHEDULED_CHANGE, SPOT_INTERRUPTION, STATE_CHANGE, Notice
from controller.interruption.controller import ACTIONS, MESSAGES, InterruptionController
from controller.state.informer import EventType
from controller.state.queue import WorkQueue

log = structlog.get_logger()
Obj = dict[str, Any]
ANNOTATION_INTERRUPTION: Final = "joiner.sh/interruption"
KINDS: Final = {
    "spot": (SPOT_INTERRUPTION, "terminate"),
    "scheduled-change": (SCHEDULED_CHANGE, "simulated"),
    "stopping": (STATE_CHANGE, "stopping"),
    "rebalance": (REBALANCE, ""),
}


class AnnotationInterruptions:
    """Turns the annotation into notices for the interruption handler."""

    def __init__(self, handler: InterruptionController) -> None:
        self.handler = handler
        self.ctx = handler.ctx
        self.queue = WorkQueue(name="kwok-interruptions", clock=self.ctx.clock)
        self._done: set[str] = set()

    def _on_claim(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        if etype != "DELETED" and ANNOTATION_INTERRUPTION in ((obj.get("metadata") or {}).get("annotations") or {}):
            self.queue.add(obj["metadata"]["name"])

    async def run(self) -> None:
        self.ctx.cluster.subscribe("NodeClaim", self._on_claim)
        await self.ctx.cluster.wait_synced()
        for name, claim in list(self.ctx.cluster.claim_views().items()):
            if ANNOTATION_INTERRUPTION in claim.annotations:
                self.queue.add(name)
        await asyncio.gather(self.queue.run(self.reconcile, workers=1), self.handler.track_replacements())

    async def reconcile(self, name: str) -> float | None:
        claim = self.ctx.cluster.claim_views().get(name)
        if claim is None:
            return None
        uid = claim.uid or name
        value = str(claim.annotations.get(ANNOTATION_INTERRUPTION, ""))
        provider_id = claim.provider_id or ""
        if uid in self._done or not provider_id:
            return None
        kind = KINDS.get(value)
        if kind is None:
            MESSAGES.labels("malformed").inc()
            await self.ctx.events.emit(
                claim.raw,
                reason="InvalidInterruption",
                message=f"{ANNOTATION_INTERRUPTION}={value!r} is not one of {', '.join(KINDS)}: ignored",
                type="Warning",
            )
            log.warning(
                "interruption.bad_annotation",
                nodeclaim=name,
                value=value,
                reason=f"{ANNOTATION_INTERRUPTION} must be one of {', '.join(KINDS)}",
            )
            self._done.add(uid)
            return None
        self._done.add(uid)
        MESSAGES.labels(kind[0]).inc()
        ACTIONS.labels("simulated").inc()
        await self.handler.handle(Notice(kind[0], provider_id.rsplit("/", 1)[-1], kind[1]))
        return None
