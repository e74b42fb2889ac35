"""best-effort-atomic-scale-up: a ProvisioningRequest's attempt, all or nothing. Planned under the
writer's lock by the gang's pure planner (the request's pods pinned to a gang of their own, offered
the free room of the Initialized nodes): booked on room that exists, or its NodeClaims bought after
the attempt's record is written; rolled back; marked Provisioned when every NodeClaim is
Initialized. What to do is ``decide.py``'s; this applies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import structlog

from api.v1.conditions import INITIALIZED
from api.v1.labels import LABEL_GANG
from controller.context import Context
from controller.gang.planner import (
    GangPlan,
    NoFit,
    PlanRequest,
    describe_plan,
    plan_gang,
    pool_gang_defaults,
    refused_by_bounds,
)
from controller.provreq import metrics
from controller.provreq.booker import Booker
from controller.provreq.decide import (
    Attempt,
    Knobs,
    MarkProvisioned,
    PlanAttempt,
    RequestView,
    Rollback,
    miss,
    not_found_update,
    provisioned_update,
    provisioning_message,
    provisioning_update,
)
from controller.provreq.effects import RequestEffects
from controller.provreq.manifest import LABEL_REQUEST_UID, claim_name, request_claim_manifest
from controller.provreq.reader import RequestReader
from controller.provreq.request import ProvisioningRequest
from controller.scheduling.model import ExistingNode, Pod
from controller.state import inputs as state_inputs
from controller.state.inputs import OfferedPools
from controller.state.spend import pool_bounds
from controller.state.writer import NewClaim

log = structlog.get_logger()


def gang_id(req: ProvisioningRequest) -> str:
    """The gang the request's pods are pinned to in its solve."""
    return f"pr-{req.uid[:8]}"


@dataclass(frozen=True, slots=True)
class AtomicAttempts:
    """Applies an atomic request's steps: ``plan``, ``rollback``, ``provisioned``."""

    ctx: Context
    knobs: Knobs
    reader: RequestReader
    effects: RequestEffects
    booker: Booker

    # --- plan --------------------------------------------------------------------------------

    async def plan(self, view: RequestView, step: PlanAttempt, pods: Sequence[Pod], *, gid: str) -> float | None:
        """``pods``: the request's placeholders, pinned to the gang ``gid``."""
        req = view.request
        ctx = self.ctx
        async with ctx.writer.lock:
            fresh = ctx.cluster.store("ProvisioningRequest").get(req.key)
            if fresh is None or ProvisioningRequest.of(fresh).uid != req.uid:
                return 1.0
            inputs = await self.reader.inputs()
            pools = inputs.pools
            now = ctx.clock.now()
            room = self._free_room(list(inputs.existing), now=now, req=req, gid=gid)
            request = PlanRequest(
                key=req.key,
                gid=gid,
                pods=tuple(pods),
                pools=inputs.templates,
                defaults={name: pool_gang_defaults(pool.raw) for name, (pool, _) in pools.items()},
                # every node counts for the NodePools' limits (through their usage); the pods are pinned
                # to the request's gang, and the free room of the Initialized nodes is offered to it
                # (labelled for the gang in this solve only): what fits there is booked, not bought
                existing=tuple(room),
                daemons=inputs.daemons,
                unavailable=inputs.unavailable,
                same_zone=step.same_zone,
            )
            started = ctx.clock.monotonic()
            result = plan_gang(request)
            solve_seconds = ctx.clock.monotonic() - started
            if isinstance(result, NoFit):
                return await self._miss(view, step, result.reason, permanent=result.permanent)
            if not result.plan.new_nodes:
                return await self._found(view, step, result, solve_seconds=solve_seconds)
            why = self._refused_by_bounds(result, pools)
            if why is not None:
                return await self._miss(view, step, why, permanent=False)
            return await self._provision(view, step, result, pools=pools, solve_seconds=solve_seconds, now=now)

    def _free_room(
        self, existing: Sequence[ExistingNode], *, now: Any, req: ProvisioningRequest, gid: str
    ) -> list[ExistingNode]:
        """The registered, Initialized nodes an atomic request's pods may use without buying: not
        being deleted, not cordoned, not a gang's own (another request's may: its booking is held),
        with every other booking's room held on them; labelled for the request's gang so its pinned
        pods may land there in the solve."""
        cluster = self.ctx.cluster
        usable: set[str] = set()
        for node in cluster.node_views().values():
            claim = cluster.claim_view_for_node(node)
            if node.deletion_timestamp or node.unschedulable:
                continue
            if LABEL_GANG in node.labels and LABEL_REQUEST_UID not in node.labels:
                continue  # a gang's own machine (a request's machines keep the label, not the taint)
            if claim is not None and (claim.deleting or not claim.is_true(INITIALIZED)):
                continue
            usable.add(node.name)
        held = self.ctx.bookings.hold(list(existing), now, except_request=req.key)
        return [
            replace(n, labels={**dict(n.labels), LABEL_GANG: gid})
            for n in held
            if n.name in usable and not n.in_flight and not n.unschedulable
        ]

    def _planned_room(
        self, view: RequestView, result: GangPlan, *, claim_names: Sequence[str]
    ) -> dict[str, tuple[Pod, ...]]:
        """Where the plan put the request's pods: existing node -> placeholders, and (``claim_names``,
        one per new node of the plan) each new NodeClaim -> the placeholders it is bought for."""
        by_key = {p.key: p for p in self.reader.placeholders(view)[0]}  # the same names as the pinned ones
        held = {
            node: tuple(by_key[k] for k in keys if k in by_key)
            for node, keys in result.plan.existing_placements.items()
            if keys
        }
        for name, node in zip(claim_names, result.plan.new_nodes, strict=True):
            held[name] = tuple(by_key[k] for k in node.pods if k in by_key)
        return held

    async def _found(
        self, view: RequestView, step: PlanAttempt, result: GangPlan, *, solve_seconds: float
    ) -> float | None:
        """Every pod of an atomic request fits on room that exists: book it and buy nothing
        (cluster-autoscaler answers ``Provisioned=True``, ``CapacityIsFound``, when no scale-up is needed)."""
        req = view.request
        held = self._planned_room(view, result, claim_names=())
        self.booker.publish(req, held=held, nodes=frozenset(held))
        if not await self.effects.status(req, (*step.accept, provisioned_update(atomic=False, message=""))):
            return None
        what = f"the {req.count} pods fit on existing capacity ({len(held)} nodes); nothing bought"
        await self.effects.event(req, "Provisioned", f"{what}; booked for {self.knobs.booking_seconds:.0f}s", False)
        metrics.REQUESTS.labels(req.class_name, "Provisioned").inc()
        if req.created is not None:
            metrics.PROVISIONED_SECONDS.labels(req.class_name).observe(
                (self.ctx.clock.now() - req.created).total_seconds()
            )
        log.info(
            "provisioningrequest.capacity_found",
            request=req.key,
            pods=req.count,
            nodes=sorted(held),
            solve_seconds=round(solve_seconds, 4),
        )
        return None  # the status write comes back as an event: then the booking

    def _refused_by_bounds(self, result: GangPlan, pools: OfferedPools) -> str | None:
        """The NodePools' budgets and limits.nodes: the whole plan or none of it."""
        ctx = self.ctx
        claims = [*ctx.cluster.claim_views().values(), *ctx.writer.in_flight()]
        bounds = pool_bounds(state_inputs.manifests(pools), claims, state_inputs.all_types(pools))
        return refused_by_bounds(result.plan, bounds)

    async def _miss(self, view: RequestView, step: PlanAttempt, why: str, *, permanent: bool) -> float | None:
        req = view.request
        outcome = miss(req, why=why, permanent=permanent, knobs=self.knobs)
        written = await self.effects.status(req, (*step.accept, *outcome.updates))
        if outcome.event is not None:
            await self.effects.event(req, *outcome.event)
        if outcome.requeue is None:
            if written:
                metrics.REQUESTS.labels(req.class_name, "Failed").inc()
            log.warning("provisioningrequest.failed", request=req.key, reason="never fits", message=why)
        else:
            log.info("provisioningrequest.waiting", request=req.key, reason="capacity", detail=why)
        return outcome.requeue

    async def _provision(
        self,
        view: RequestView,
        step: PlanAttempt,
        result: GangPlan,
        *,
        pools: OfferedPools,
        solve_seconds: float,
        now: Any,
    ) -> float | None:
        req = view.request
        plan = result.plan
        manifests = [
            NewClaim(
                node,
                request_claim_manifest(
                    node,
                    pools[node.node_pool].view.raw,
                    name=claim_name(node.node_pool, req.uid, step.number, i),
                    req=req,
                    same_zone=result.same_zone,
                ),
            )
            for i, node in enumerate(plan.new_nodes)
        ]
        names = tuple(m.manifest["metadata"]["name"] for m in manifests)
        seconds = step.timeout_seconds
        record = Attempt(
            number=step.number,
            claims=names,
            started=now,
            deadline=now + timedelta(seconds=seconds),
            level=step.level,
            last_failure=step.last_failure,
        )
        # the record first: a NodeClaim no record names (a crash in between) is never bought; one the
        # record names that was never written is found lost, and the attempt is rolled back
        recorded = await self._record(req, record)
        if recorded is None:
            return None
        req = recorded
        # the attempt's machines (untainted: Kueue's pods tolerate nothing of joiner's), and any room
        # found on existing nodes, are held while they come up, so no other pod is planned into
        # them; rolled back or provisioned, it is decided again
        held = self._planned_room(view, result, claim_names=names)
        self.booker.publish(req, held=held, nodes=frozenset(held), until=record.deadline)
        written = await self.ctx.writer.create(manifests, reason="provisioningrequest", request=req.key)
        what = describe_plan(plan)
        log.info(
            "provisioningrequest.planned",
            request=req.key,
            attempt=step.number,
            pods=req.count,
            nodeclaims=len(manifests),
            buys=what,
            same_zone=result.same_zone,
            price_per_hour=round(sum(n.price for n in plan.new_nodes), 4),
            solve_seconds=round(solve_seconds, 4),
        )
        message = provisioning_message(record, buying=what, pods=req.count)
        await self.effects.status(req, (*step.accept, provisioning_update(message)))
        await self.effects.event(req, "Provisioning", message, False)
        if any(w.claim is None for w in written):
            return 1.0  # a NodeClaim was refused: the attempt is lost and rolled back
        return seconds

    async def _record(self, req: ProvisioningRequest, attempt: Attempt) -> ProvisioningRequest | None:
        """Write the attempt's record on the request (read as its record from now on, until the
        cache shows it); the request as it is now (None: it is gone)."""
        self.reader.wrote(req.uid, attempt)
        return await self.effects.record(req, attempt)

    # --- roll back, provisioned --------------------------------------------------------------

    async def rollback(self, view: RequestView, step: Rollback) -> float | None:
        req = view.request
        self.booker.release(req.key)
        await self.effects.delete_claims(
            req.key, step.claims, reason="ProvisioningRequestRollback", message=step.message
        )
        recorded = await self._record(req, step.attempt)
        if recorded is None:
            return None
        await self.effects.status(recorded, (not_found_update(step.message),))
        await self.effects.event(req, "ProvisioningRolledBack", step.message, True)
        metrics.ROLLBACKS.inc()
        log.warning("provisioningrequest.rolled_back", request=req.key, message=step.message, retry_in=step.retry_in)
        return step.retry_in

    async def provisioned(self, view: RequestView, step: MarkProvisioned) -> float | None:
        req = view.request
        message = f"every NodeClaim is Initialized: {', '.join(step.claims[:8])}"
        if not await self.effects.status(req, (provisioned_update(atomic=True, message=message),)):
            return None  # counted by the reconcile that wrote it
        await self.effects.event(req, "Provisioned", message, False)
        metrics.REQUESTS.labels(req.class_name, "Provisioned").inc()
        if step.seconds is not None:
            metrics.PROVISIONED_SECONDS.labels(req.class_name).observe(step.seconds)
        log.info("provisioningrequest.provisioned", request=req.key, nodeclaims=list(step.claims), seconds=step.seconds)
        return None  # the status write comes back as an event: then the booking
