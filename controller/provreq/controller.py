"""The ProvisioningRequest controller: Kueue's (or anyone's) request for capacity -> one solve ->
NodeClaims through the one writer -> ``Provisioned=True`` when every node is Initialized -> the
capacity booked for the request's pods, which are nominated onto it when they arrive.

Each reconcile reads one request, its pod templates, its NodeClaims and its pods from the cache
(``reader.py``), asks the pure ``decide`` for the next step and applies it: check-capacity in
``check.py``, an atomic attempt's plan, rollback and provisioned in ``atomic.py``, the booking and
the nominations in ``booker.py``, the writes on the request in ``effects.py``; the writes come back
as watch events that queue the request again. Planning happens under the writer's lock, like every
decision that buys, so a request and a burst of pods never both count the same room under a
NodePool's limits.
"""

from __future__ import annotations

import structlog

from controller.context import Context
from controller.provreq import metrics
from controller.provreq.atomic import AtomicAttempts, gang_id
from controller.provreq.booker import Booker
from controller.provreq.check import check_capacity
from controller.provreq.decide import (
    Book,
    Check,
    Cleanup,
    Conditions,
    Consumed,
    ExpireBooking,
    Fail,
    Knobs,
    Leave,
    MarkProvisioned,
    PlanAttempt,
    RequestView,
    Revoke,
    Rollback,
    Step,
    consumed_update,
    decide,
    expired_update,
    failed_update,
    gone,
    revoked_update,
)
from controller.provreq.effects import RequestEffects
from controller.provreq.manifest import ANNOTATION_REQUEST
from controller.provreq.reader import RequestReader
from controller.provreq.request import ANNOTATION_CONSUME, PROVISIONED, ProvisioningRequest
from controller.state.informer import EventType
from controller.state.views import NodeClaimView, Obj, PodView

log = structlog.get_logger()


def _invalid(problems: list[str]) -> Fail:
    """A request whose pods cannot be read: failed, naming the first problems."""
    return Fail(reason="InvalidRequest", message="; ".join(sorted(set(problems))[:3]))


class ProvisioningRequestController:
    def __init__(self, ctx: Context, *, workers: int = 4) -> None:
        from controller.state.queue import WorkQueue

        self.ctx = ctx
        s = ctx.settings
        self.queue = WorkQueue(name="provisioningrequest", clock=ctx.clock)
        self.knobs = Knobs(
            booking_seconds=s.provisioning_request_booking_seconds,
            attempt_timeout_seconds=s.gang_timeout_seconds,
            backoff_base_seconds=s.gang_backoff_seconds,
            backoff_max_seconds=s.gang_backoff_max_seconds,
        )
        self._workers = workers
        self.reader = RequestReader(ctx)
        self.effects = RequestEffects(ctx)
        self.booker = Booker(ctx, self.knobs, self.reader)
        self.atomic = AtomicAttempts(ctx, self.knobs, reader=self.reader, effects=self.effects, booker=self.booker)

    # --- wiring ------------------------------------------------------------------------------

    async def run(self) -> None:
        cluster = self.ctx.cluster
        cluster.subscribe("ProvisioningRequest", self._on_request)
        cluster.subscribe("PodTemplate", self._on_template)
        cluster.subscribe_views("NodeClaim", self._on_claim)
        cluster.subscribe_views("Pod", self._on_pod)
        cluster.subscribe("NodePool", self._on_pool)
        await cluster.wait_synced()
        for key in list(cluster.store("ProvisioningRequest")):
            self.queue.add(key)
        for claim in list(cluster.claim_views().values()):
            owner = claim.annotations.get(ANNOTATION_REQUEST)
            if owner:
                self.queue.add(owner)
        await self.queue.run(self.reconcile, workers=self._workers)

    def _on_request(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        self.queue.add(f"{meta.get('namespace')}/{meta.get('name')}")

    def _on_template(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        ns = (obj.get("metadata") or {}).get("namespace")
        name = (obj.get("metadata") or {}).get("name")
        for key, raw in list(self.ctx.cluster.store("ProvisioningRequest").items()):
            sets = (raw.get("spec") or {}).get("podSets") or ()
            if key.startswith(f"{ns}/") and any(
                ((s or {}).get("podTemplateRef") or {}).get("name") == name for s in sets
            ):
                self.queue.add(key)

    def _on_claim(self, etype: EventType, obj: NodeClaimView, old: NodeClaimView | None) -> None:
        owner = obj.annotations.get(ANNOTATION_REQUEST)
        if owner:
            self.queue.add(owner)
        elif etype == "DELETED":
            self._requeue_waiting()

    def _on_pod(self, etype: EventType, obj: PodView, old: PodView | None) -> None:
        name = obj.annotations.get(ANNOTATION_CONSUME)
        if name:
            self.queue.add(f"{obj.namespace}/{name}")

    def _on_pool(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        self._requeue_waiting()

    def _requeue_waiting(self) -> None:
        for key, raw in list(self.ctx.cluster.store("ProvisioningRequest").items()):
            req = ProvisioningRequest.of(raw)
            if req.served and not req.is_true(PROVISIONED):
                self.queue.add(key)

    # --- reconcile ---------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        await self.ctx.cluster.wait_synced()
        raw = self.ctx.cluster.store("ProvisioningRequest").get(key)
        now = self.ctx.clock.now()
        if raw is None:
            self.reader.forget_gone()  # the records of requests that are gone
            claims = self.reader.claims(uid=None, key=key)
            step: Step = gone(
                RequestView(
                    request=ProvisioningRequest.of({"metadata": {"name": key.partition("/")[2]}}),
                    templates={},
                    claims=claims,
                    attempt=None,
                )
            )
            self.booker.release(key)
            self.effects.forget(key)
            if isinstance(step, Cleanup):
                await self.effects.delete_claims(
                    key,
                    step.claims,
                    reason="ProvisioningRequestDeleted",
                    message=(f"ProvisioningRequest {key} was deleted before its capacity was provisioned"),
                )
            return None
        req = ProvisioningRequest.of(raw)
        view = self.reader.view(req)
        step = decide(view, now=now, knobs=self.knobs)
        return await self._apply(view, step)

    async def _apply(self, view: RequestView, step: Step) -> float | None:
        req = view.request
        if isinstance(step, Leave):
            if step.release:
                self.booker.release(req.key)
                self.reader.done(req.uid)  # nothing more will be written for it
            return None
        if isinstance(step, Conditions):
            if step.hold_attempt and not self.booker.holds_attempt(view):
                # after a restart (the book is in memory), or a machine registered under a Node
                # name of its own (aws: ip-...): the room is held where the machines are now
                await self.booker.hold_attempt(view)
            await self.effects.status(req, step.updates)
            if step.event is not None:
                await self.effects.event(req, *step.event)
            return step.requeue
        if isinstance(step, Check):
            pods, problems = self.reader.placeholders(view)
            if problems:
                return await self._apply(view, _invalid(problems))
            return await check_capacity(
                self.ctx, self.knobs, view, step, pods, reader=self.reader, effects=self.effects, booker=self.booker
            )
        if isinstance(step, PlanAttempt):
            gid = gang_id(req)
            pods, problems = self.reader.placeholders(view, gid=gid)
            if problems:
                return await self._apply(view, _invalid(problems))
            return await self.atomic.plan(view, step, pods, gid=gid)
        if isinstance(step, Rollback):
            return await self.atomic.rollback(view, step)
        if isinstance(step, MarkProvisioned):
            return await self.atomic.provisioned(view, step)
        if isinstance(step, Book):
            await self.booker.book(view, step)
            return min(step.remaining, 60.0)
        if isinstance(step, ExpireBooking):
            self.booker.release(req.key)
            if not await self.effects.status(req, (expired_update(),)):
                return None
            await self.effects.event(
                req,
                "BookingExpired",
                "the capacity booked for this request is no longer held: "
                f"its pods did not all bind within {self.knobs.booking_seconds:.0f}s",
                False,
            )
            metrics.BOOKINGS_EXPIRED.inc()
            log.info("provisioningrequest.booking_expired", request=req.key)
            return None
        if isinstance(step, Consumed):
            self.booker.release(req.key)
            self.reader.done(req.uid)  # nothing more will be written for it
            if await self.effects.status(req, (consumed_update(step.bound),)):
                log.info("provisioningrequest.booking_consumed", request=req.key, pods=step.bound)
            return None
        if isinstance(step, Revoke):
            self.booker.release(req.key)
            if not await self.effects.status(req, (revoked_update(step.message),)):
                return None
            await self.effects.event(req, "CapacityRevoked", step.message, True)
            metrics.REQUESTS.labels(req.class_name, "Revoked").inc()
            log.warning("provisioningrequest.capacity_revoked", request=req.key, lost=list(step.lost))
            return None
        if isinstance(step, Fail):
            self.booker.release(req.key)
            await self.effects.delete_claims(
                req.key, step.claims, reason="ProvisioningRequestFailed", message=step.message
            )
            if not await self.effects.status(req, (failed_update(step.reason, step.message),)):
                return None
            await self.effects.event(req, "ProvisioningFailed", step.message, True)
            metrics.REQUESTS.labels(req.class_name, "Failed").inc()
            log.warning("provisioningrequest.failed", request=req.key, reason=step.reason, message=step.message)
            return None
        if isinstance(step, Cleanup):
            self.booker.release(req.key)
            await self.effects.delete_claims(
                req.key,
                step.claims,
                reason="ProvisioningRequestFailed",
                message=(f"ProvisioningRequest {req.key} failed or is being deleted"),
            )
            return None
        raise AssertionError(f"unknown step {step!r}")
