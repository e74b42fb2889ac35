"""The interruption controller: reads interruption notices from a queue and acts on them at once.

For a spot interruption warning, a scheduled change or an instance stopping/terminating, the
NodeClaim whose providerID names the instance is deleted (reason ``Interrupted``, with an Event):
the termination controller taints and drains its Node right away and provisioning replaces the
pods elsewhere. A spot interruption also marks that spot offering unavailable, so the replacement
goes to another pool. Rebalance recommendations are recorded on the NodeClaim (annotation
``joiner.sh/rebalance-recommended``, Event, metric); disruption replaces the node under its budgets
where the NodePool's ``spec.disruption.rebalanceRecommendation`` is ``Replace``.

A message is deleted from the queue only after it was handled; one that fails is left for the
queue to deliver again. A malformed message is logged, counted and deleted, never crashing the loop.
Metrics: ``joiner_interruption_messages_total{kind}``, ``joiner_interruption_actions_total{action}`` and
``joiner_interruption_handling_seconds{kind}`` (queue arrival to action) and
``joiner_interruption_replacement_seconds{kind}`` (queue arrival to the interrupted node's workload
running again elsewhere: :mod:`controller.interruption.replacement`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

import structlog

from api.v1.labels import ANNOTATION_REBALANCE_RECOMMENDED, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE
from controller.clock import format_time
from controller.cloudprovider.notices import (
    REBALANCE,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTION,
    STATE_CHANGE,
    MalformedMessage,
    MessageSource,
    Notice,
)
from controller.cloudprovider.types import OfferingId
from controller.context import Context
from controller.interruption.messages import parse
from controller.interruption.replacement import Displaced, displaced, replaced
from controller.kube.client import NotFoundError
from controller.kube.resources import NODECLAIMS
from controller.metrics import counter, histogram
from controller.state.deletion import delete_nodeclaim
from controller.state.queue import RECONCILE_ERRORS
from controller.state.views import NodeClaimView

log = structlog.get_logger()
Obj = dict[str, Any]
MESSAGES = counter("joiner_interruption_messages_total", "Interruption messages received, by kind.", ("kind",))
ACTIONS = counter("joiner_interruption_actions_total", "Actions taken on interruption notices.", ("action",))
# served at 0 from the start: a single interruption then shows in rate() and increase()
for _kind in (SPOT_INTERRUPTION, REBALANCE, SCHEDULED_CHANGE, STATE_CHANGE):
    MESSAGES.labels(_kind)
for _action in ("nodeclaim_deleted", "offering_marked_unavailable", "recorded", "rebalance_replace"):
    ACTIONS.labels(_action)
RECONCILE_ERRORS.labels("interruption")
LATENCY = histogram(
    "joiner_interruption_handling_seconds",
    "Time from a message entering the queue to joiner having acted on it (NodeClaim deleted).",
    ("kind",),
)
REPLACEMENT = histogram(
    "joiner_interruption_replacement_seconds",
    "Time from an interruption message entering the queue to the interrupted node's workload running "
    "again elsewhere (every controller with a pod on it has its Running pods back).",
    ("kind",),
    buckets=(5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 1800),
)
ERROR_BACKOFF_SECONDS: Final = 5.0
REPLACEMENT_CHECK_SECONDS: Final = 1.0
REPLACEMENT_GIVE_UP_SECONDS: Final = 3600.0


class InterruptionController:
    def __init__(self, ctx: Context, *, source: MessageSource, parse: Callable[[str], list[Notice]] = parse) -> None:
        """``parse`` reads a message body into notices: EventBridge events (aws) by default; the gcp
        provider passes its reader of Compute Engine audit log entries."""
        self.ctx = ctx
        self.source = source
        self.parse = parse
        self.displaced: list[Displaced] = []  # interrupted work not running again yet

    async def run(self) -> None:
        await self.ctx.cluster.wait_synced()
        await asyncio.gather(self._poll_forever(), self.track_replacements())

    async def _poll_forever(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception as err:
                log.warning("interruption.receive_failed", error=str(err))
                await self.ctx.clock.sleep(ERROR_BACKOFF_SECONDS)

    def check_replacements(self) -> int:
        """Observe the interrupted work that runs again; the number still waiting."""
        now = self.ctx.clock.now()
        pods = list(self.ctx.cluster.pod_views()) if self.displaced else []
        waiting: list[Displaced] = []
        for d in self.displaced:
            took = (now - d.since).total_seconds()
            if replaced(d, pods):
                REPLACEMENT.labels(d.kind).observe(max(0.0, took))
                log.info("interruption.replaced", kind=d.kind, node=d.node, seconds=round(took, 1))
            elif took > REPLACEMENT_GIVE_UP_SECONDS:
                log.warning("interruption.replacement_not_seen", kind=d.kind, node=d.node, seconds=round(took))
            else:
                waiting.append(d)
        self.displaced = waiting
        return len(waiting)

    async def track_replacements(self) -> None:
        while True:
            self.check_replacements()
            await self.ctx.clock.sleep(REPLACEMENT_CHECK_SECONDS)

    async def poll_once(self) -> int:
        """Receive one batch and handle it; the number of messages deleted."""
        deleted = 0
        for message in await self.source.receive():
            try:
                notices = self.parse(message.body)
            except MalformedMessage as err:
                MESSAGES.labels("malformed").inc()
                log.warning("interruption.malformed_message", message_id=message.id, error=str(err))
                await self.source.delete(message)
                deleted += 1
                continue
            try:
                for notice in notices:
                    MESSAGES.labels(notice.kind).inc()
                    await self.handle(notice, since=message.sent_at)
                    if message.sent_at is not None:
                        age = (self.ctx.clock.now() - message.sent_at).total_seconds()
                        LATENCY.labels(notice.kind).observe(max(0.0, age))
            except Exception:
                log.exception("interruption.handle_failed", message_id=message.id)
                RECONCILE_ERRORS.labels("interruption").inc()
                continue  # not deleted: the queue delivers it again
            await self.source.delete(message)
            deleted += 1
        return deleted

    def _claim_for(self, instance_id: str) -> NodeClaimView | None:
        suffix = "/" + instance_id
        for claim in self.ctx.cluster.claim_views().values():
            if (claim.provider_id or "").endswith(suffix):
                return claim
        return None

    async def _record_rebalance(self, claim: NodeClaimView) -> None:
        """Note the recommendation on the NodeClaim (once); disruption acts on it where the NodePool
        opts in (``spec.disruption.rebalanceRecommendation: Replace``), under the pool's budgets."""
        name = claim.name
        pool = self.ctx.cluster.nodepools().get(claim.nodepool) or {}
        replace = ((pool.get("spec") or {}).get("disruption") or {}).get("rebalanceRecommendation") == "Replace"
        if ANNOTATION_REBALANCE_RECOMMENDED not in claim.annotations and not claim.deleting:
            when = format_time(self.ctx.clock.now())
            patch = {"metadata": {"annotations": {ANNOTATION_REBALANCE_RECOMMENDED: when}}}
            with contextlib.suppress(NotFoundError):
                await self.ctx.client.patch(NODECLAIMS, name, patch)
            await self.ctx.events.emit(
                claim.raw,
                reason="RebalanceRecommended",
                message="EC2 sees an elevated risk of interrupting this spot instance: "
                + (
                    "replacing it under the NodePool's disruption budgets"
                    if replace
                    else "recorded only (the NodePool's spec.disruption.rebalanceRecommendation is Ignore)"
                ),
            )
        ACTIONS.labels("rebalance_replace" if replace else "recorded").inc()
        log.info("interruption.rebalance_recommended", nodeclaim=name, instance=claim.provider_id, replace=replace)

    async def handle(self, notice: Notice, *, since: datetime | None = None) -> None:
        """Act on one notice; ``since`` is when the message entered the queue (default: now)."""
        claim = self._claim_for(notice.instance_id)
        if claim is None:
            ACTIONS.labels("ignored").inc()
            log.info("interruption.unknown_instance", kind=notice.kind, instance=notice.instance_id)
            return
        name = claim.name
        if notice.kind == REBALANCE:
            await self._record_rebalance(claim)
            return
        labels = claim.labels
        if notice.kind == SPOT_INTERRUPTION and labels.get(LABEL_INSTANCE_TYPE) and labels.get(LABEL_ZONE):
            self.ctx.unavailable.mark(
                OfferingId(
                    instance_type=labels[LABEL_INSTANCE_TYPE],
                    zone=labels[LABEL_ZONE],
                    capacity_type=labels.get(LABEL_CAPACITY_TYPE, "spot"),
                )
            )
            ACTIONS.labels("offering_marked_unavailable").inc()
        message = {
            SPOT_INTERRUPTION: "EC2 will reclaim this spot instance in two minutes"
            if notice.detail != "preempted"
            else "Compute Engine preempted this spot instance",
            "scheduled_change": f"the cloud scheduled a change for the instance ({notice.detail or 'maintenance'})",
            "state_change": f"the instance is {notice.detail}",
        }.get(notice.kind, notice.kind)
        if claim.node_name and not claim.deleting:
            work = displaced(
                kind=notice.kind,
                since=since or self.ctx.clock.now(),
                node=claim.node_name,
                on_node=self.ctx.cluster.pod_views_on_node(claim.node_name),
                pods=self.ctx.cluster.pod_views(),
            )
            if work is not None:
                self.displaced.append(work)
        deleted = await delete_nodeclaim(
            self.ctx,
            claim,
            reason="Interrupted",
            message=f"{message}: draining the node and replacing it now",
        )
        ACTIONS.labels("nodeclaim_deleted" if deleted else "already_deleting").inc()
        log.info(
            "interruption.handled",
            kind=notice.kind,
            nodeclaim=name,
            instance=notice.instance_id,
            deleted=deleted,
            reason=message,
        )
