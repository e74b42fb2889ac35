"""The ProvisioningRequest controller: Kueue's (or anyone's) request for capacity -> one solve ->
NodeClaims through the one writer -> ``Provisioned=True`` when every node is Initialized -> the
capacity booked for the request's pods, which are nominated onto it when they arrive.

Each reconcile reads one request, its pod templates, its NodeClaims and its pods from the cache,
asks the pure ``decide`` for the next step and applies it; the writes come back as watch events
that queue the request again. Planning happens under the writer's lock, like every decision that
buys, so a request and a burst of pods never both count the same room under a NodePool's limits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
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
    pinned_pod,
    plan_gang,
    pool_gang_defaults,
    refused_by_bounds,
)
from controller.kube.client import ApiError, ConflictError, NotFoundError
from controller.kube.resources import PODS, PROVISIONING_REQUESTS
from controller.provreq import metrics
from controller.provreq.booking import hold_room, placements, unmatched
from controller.provreq.decide import (
    ANNOTATION_ATTEMPT,
    Attempt,
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
    attempt_of,
    booked,
    consumed_update,
    decide,
    expired_update,
    failed_update,
    gone,
    miss,
    not_found_update,
    provisioned_update,
    provisioning_message,
    provisioning_update,
    revoked_update,
)
from controller.provreq.manifest import ANNOTATION_REQUEST, LABEL_REQUEST_UID, claim_name, request_claim_manifest
from controller.provreq.request import (
    ANNOTATION_CONSUME,
    PROVISIONED,
    ProvisioningRequest,
    placeholder_pods,
)
from controller.scheduling import kubeconv
from controller.scheduling.model import ExistingNode, Pod
from controller.scheduling.solver import solve
from controller.state import inputs as state_inputs
from controller.state.bookings import Booking
from controller.state.deletion import delete_nodeclaim
from controller.state.informer import EventType
from controller.state.inputs import OfferedPools, SolverInputs
from controller.state.patches import ConditionUpdate, with_conditions
from controller.state.spend import pool_bounds
from controller.state.views import NodeClaimView, Obj, PodView
from controller.state.writer import NewClaim

log = structlog.get_logger()

Pools = OfferedPools


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
        self._written: dict[str, Attempt] = {}  # request uid -> the record written, until the cache has it
        self._told: dict[str, tuple[str, str]] = {}

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

    # --- the view ----------------------------------------------------------------------------

    def _claims(self, *, uid: str | None, key: str) -> dict[str, NodeClaimView]:
        """NodeClaims bought for the request: by its uid, or (``uid=None``, the request is gone) by name."""
        out: dict[str, NodeClaimView] = {}
        for claim in [*self.ctx.cluster.claim_views().values(), *self.ctx.writer.in_flight()]:
            if uid is not None and claim.labels.get(LABEL_REQUEST_UID) != uid:
                continue
            if uid is None and claim.annotations.get(ANNOTATION_REQUEST) != key:
                continue
            out.setdefault(claim.name, claim)
        return out

    def _consumers(self, req: ProvisioningRequest) -> tuple[list[PodView], list[PodView]]:
        """The request's pods (Kueue annotates them): bound (finished ones too: they were bound), and pending."""
        bound: list[PodView] = []
        pending: list[PodView] = []
        for pod in self.ctx.cluster.pod_views():
            if pod.namespace != req.namespace or pod.annotations.get(ANNOTATION_CONSUME) != req.name:
                continue
            if pod.node_name:
                bound.append(pod)  # a pod that ran and finished (kwok, a short Job) did bind
            elif not pod.is_terminal and not pod.deleting:
                pending.append(pod)
        return bound, pending

    def _view(self, req: ProvisioningRequest) -> RequestView:
        store = self.ctx.cluster.store("PodTemplate")
        templates = {
            s.template: store[f"{req.namespace}/{s.template}"]
            for s in req.pod_sets
            if f"{req.namespace}/{s.template}" in store
        }
        attempt = attempt_of(req.annotations)
        written = self._written.get(req.uid)
        if written is not None and (attempt is None or written.number > attempt.number or written != attempt):
            # what we wrote last and the cache does not show yet
            attempt = written if attempt is None or written.number >= attempt.number else attempt
        bound, pending = self._consumers(req)
        return RequestView(
            request=req,
            templates=templates,
            claims=self._claims(uid=req.uid, key=req.key),
            attempt=attempt,
            consumers_bound=len(bound),
            consumers_pending=len(pending),
            booked_gone=self._booked_gone(req.key),
        )

    def _booked_gone(self, key: str) -> tuple[str, ...]:
        """The nodes (or NodeClaims) the request's published booking keeps that are gone or going."""
        booking = self.ctx.bookings.get(key)
        if booking is None:
            return ()
        cluster = self.ctx.cluster
        nodes = cluster.node_views()
        claims = cluster.claim_views()
        out: list[str] = []
        for name in sorted(booking.nodes):
            node = nodes.get(name)
            if node is not None:
                claim = cluster.claim_view_for_node(node)
                if node.deletion_timestamp or (claim is not None and claim.deleting):
                    out.append(name)
                continue
            claim = claims.get(name) or self.ctx.writer.just_created(name)
            if claim is None or claim.deleting:
                out.append(name)
        return tuple(out)

    # --- reconcile ---------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        await self.ctx.cluster.wait_synced()
        raw = self.ctx.cluster.store("ProvisioningRequest").get(key)
        now = self.ctx.clock.now()
        if raw is None:
            live = {
                str((r.get("metadata") or {}).get("uid"))
                for r in self.ctx.cluster.store("ProvisioningRequest").values()
            }
            for uid in [u for u in self._written if u not in live]:
                del self._written[uid]  # the records of requests that are gone
            claims = self._claims(uid=None, key=key)
            step: Step = gone(
                RequestView(
                    request=ProvisioningRequest.of({"metadata": {"name": key.partition("/")[2]}}),
                    templates={},
                    claims=claims,
                    attempt=None,
                )
            )
            self._release(key)
            self._told.pop(key, None)
            if isinstance(step, Cleanup):
                await self._delete_claims(
                    key,
                    step.claims,
                    reason="ProvisioningRequestDeleted",
                    message=(f"ProvisioningRequest {key} was deleted before its capacity was provisioned"),
                )
            return None
        req = ProvisioningRequest.of(raw)
        view = self._view(req)
        step = decide(view, now=now, knobs=self.knobs)
        return await self._apply(view, step)

    async def _apply(self, view: RequestView, step: Step) -> float | None:
        req = view.request
        if isinstance(step, Leave):
            if step.release:
                self._release(req.key)
                self._written.pop(req.uid, None)  # nothing more will be written for it
            return None
        if isinstance(step, Conditions):
            await self._status(req, step.updates)
            if step.event is not None:
                await self._event(req, *step.event)
            return step.requeue
        if isinstance(step, Check):
            return await self._check(view, step)
        if isinstance(step, PlanAttempt):
            return await self._plan(view, step)
        if isinstance(step, Rollback):
            return await self._rollback(view, step)
        if isinstance(step, MarkProvisioned):
            return await self._provisioned(view, step)
        if isinstance(step, Book):
            await self._book(view, step)
            return min(step.remaining, 60.0)
        if isinstance(step, ExpireBooking):
            self._release(req.key)
            if not await self._status(req, (expired_update(),)):
                return None
            await self._event(
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
            self._release(req.key)
            self._written.pop(req.uid, None)  # nothing more will be written for it
            if await self._status(req, (consumed_update(step.bound),)):
                log.info("provisioningrequest.booking_consumed", request=req.key, pods=step.bound)
            return None
        if isinstance(step, Revoke):
            self._release(req.key)
            if not await self._status(req, (revoked_update(step.message),)):
                return None
            await self._event(req, "CapacityRevoked", step.message, True)
            metrics.REQUESTS.labels(req.class_name, "Revoked").inc()
            log.warning("provisioningrequest.capacity_revoked", request=req.key, lost=list(step.lost))
            return None
        if isinstance(step, Fail):
            self._release(req.key)
            await self._delete_claims(req.key, step.claims, reason="ProvisioningRequestFailed", message=step.message)
            if not await self._status(req, (failed_update(step.reason, step.message),)):
                return None
            await self._event(req, "ProvisioningFailed", step.message, True)
            metrics.REQUESTS.labels(req.class_name, "Failed").inc()
            log.warning("provisioningrequest.failed", request=req.key, reason=step.reason, message=step.message)
            return None
        if isinstance(step, Cleanup):
            self._release(req.key)
            await self._delete_claims(
                req.key,
                step.claims,
                reason="ProvisioningRequestFailed",
                message=(f"ProvisioningRequest {req.key} failed or is being deleted"),
            )
            return None
        raise AssertionError(f"unknown step {step!r}")

    # --- writes ------------------------------------------------------------------------------

    async def _status(self, req: ProvisioningRequest, updates: Sequence[ConditionUpdate]) -> bool:
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

    async def _event(self, req: ProvisioningRequest, reason: str, message: str, warning: bool) -> None:
        if self._told.get(req.key) == (reason, message):
            return
        self._told[req.key] = (reason, message)
        await self.ctx.events.emit(
            dict(req.raw), reason=reason, message=message, type="Warning" if warning else "Normal"
        )

    async def _record(self, req: ProvisioningRequest, attempt: Attempt) -> ProvisioningRequest | None:
        """Write the attempt's record on the request; the request as it is now (None: it is gone)."""
        self._written[req.uid] = attempt
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

    async def _delete_claims(self, key: str, names: Sequence[str], *, reason: str, message: str) -> None:
        claims = self.ctx.cluster.claim_views()

        async def one(name: str) -> None:
            claim = claims.get(name) or self.ctx.writer.just_created(name)
            if claim is not None:
                await delete_nodeclaim(self.ctx, claim, reason=reason, message=message)

        await asyncio.gather(*(one(n) for n in names))
        if names:
            log.info("provisioningrequest.nodeclaims_deleted", request=key, nodeclaims=list(names), reason=reason)

    def _release(self, key: str) -> None:
        if self.ctx.bookings.release(key):
            metrics.BOOKED_NODES.set(len(self.ctx.bookings.booked_nodes(self.ctx.clock.now())))

    # --- solver inputs -----------------------------------------------------------------------

    async def _inputs(self) -> SolverInputs:
        ctx = self.ctx
        pools = await state_inputs.offered_pools(ctx.cluster, ctx.cloud, component="provisioningrequest")
        existing = state_inputs.machines(ctx.cluster, pools, in_flight=ctx.writer.in_flight())
        return state_inputs.solver_inputs(
            ctx.cluster,
            pools,
            existing=existing,
            unavailable=ctx.unavailable.current(),
            component="provisioningrequest",
        )

    def _placeholders(self, view: RequestView, *, gid: str | None = None) -> tuple[list[Pod], list[str]]:
        pods: list[Pod] = []
        problems: list[str] = []
        for obj in placeholder_pods(view.request, view.templates):
            try:
                pinned = pinned_pod(obj, gid) if gid is not None else obj
                pods.append(kubeconv.pod_from_dict(pinned, gang=gid, detect_gang=False))
            except ValueError as err:
                problems.append(str(err))
        return pods, problems

    # --- atomic: plan, roll back, provisioned ------------------------------------------------

    async def _plan(self, view: RequestView, step: PlanAttempt) -> float | None:
        req = view.request
        gid = f"pr-{req.uid[:8]}"
        pods, problems = self._placeholders(view, gid=gid)
        if problems:
            await self._apply(view, Fail(reason="InvalidRequest", message="; ".join(sorted(set(problems))[:3])))
            return None
        ctx = self.ctx
        async with ctx.writer.lock:
            fresh = ctx.cluster.store("ProvisioningRequest").get(req.key)
            if fresh is None or ProvisioningRequest.of(fresh).uid != req.uid:
                return 1.0
            inputs = await self._inputs()
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
        by_key = {p.key: p for p in self._placeholders(view)[0]}  # the same names as the pinned ones
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
        self._publish(req, held=held, nodes=frozenset(held))
        if not await self._status(req, (*step.accept, provisioned_update(atomic=False, message=""))):
            return None
        what = f"the {req.count} pods fit on existing capacity ({len(held)} nodes); nothing bought"
        await self._event(req, "Provisioned", f"{what}; booked for {self.knobs.booking_seconds:.0f}s", False)
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

    def _refused_by_bounds(self, result: GangPlan, pools: Pools) -> str | None:
        """The NodePools' budgets and limits.nodes: the whole plan or none of it."""
        ctx = self.ctx
        claims = [*ctx.cluster.claim_views().values(), *ctx.writer.in_flight()]
        bounds = pool_bounds(state_inputs.manifests(pools), claims, state_inputs.all_types(pools))
        return refused_by_bounds(result.plan, bounds)

    async def _miss(self, view: RequestView, step: PlanAttempt, why: str, *, permanent: bool) -> float | None:
        req = view.request
        outcome = miss(req, why=why, permanent=permanent, knobs=self.knobs)
        written = await self._status(req, (*step.accept, *outcome.updates))
        if outcome.event is not None:
            await self._event(req, *outcome.event)
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
        pools: Pools,
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
        if any(plan.existing_placements.values()):
            # the room found on existing nodes is held (with the attempt's own machines) while they
            # come up, so no other pod is planned into it; rolled back or provisioned, it is re-decided
            held = self._planned_room(view, result, claim_names=names)
            self._publish(req, held=held, nodes=frozenset(held))
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
        await self._status(req, (*step.accept, provisioning_update(message)))
        await self._event(req, "Provisioning", message, False)
        if any(w.claim is None for w in written):
            return 1.0  # a NodeClaim was refused: the attempt is lost and rolled back
        return seconds

    async def _rollback(self, view: RequestView, step: Rollback) -> float | None:
        req = view.request
        self._release(req.key)
        await self._delete_claims(req.key, step.claims, reason="ProvisioningRequestRollback", message=step.message)
        recorded = await self._record(req, step.attempt)
        if recorded is None:
            return None
        await self._status(recorded, (not_found_update(step.message),))
        await self._event(req, "ProvisioningRolledBack", step.message, True)
        metrics.ROLLBACKS.inc()
        log.warning("provisioningrequest.rolled_back", request=req.key, message=step.message, retry_in=step.retry_in)
        return step.retry_in

    async def _provisioned(self, view: RequestView, step: MarkProvisioned) -> float | None:
        req = view.request
        message = f"every NodeClaim is Initialized: {', '.join(step.claims[:8])}"
        if not await self._status(req, (provisioned_update(atomic=True, message=message),)):
            return None  # counted by the reconcile that wrote it
        await self._event(req, "Provisioned", message, False)
        metrics.REQUESTS.labels(req.class_name, "Provisioned").inc()
        if step.seconds is not None:
            metrics.PROVISIONED_SECONDS.labels(req.class_name).observe(step.seconds)
        log.info("provisioningrequest.provisioned", request=req.key, nodeclaims=list(step.claims), seconds=step.seconds)
        return None  # the status write comes back as an event: then the booking

    # --- booking -----------------------------------------------------------------------------

    async def _book(self, view: RequestView, step: Book) -> None:
        """Hold the room for the request's pods that have not bound, and nominate those that are
        pending onto it."""
        req = view.request
        if not booked(view, now=self.ctx.clock.now(), knobs=self.knobs):
            self._release(req.key)
            return
        bound, pending = self._consumers(req)
        placeholders, _ = self._placeholders(view)
        arrived: list[Pod] = []
        for pod in pending:
            try:
                arrived.append(self.ctx.cluster.scheduling_pod(pod))
            except ValueError:
                continue
        async with self.ctx.writer.lock:
            inputs = await self._inputs()
            existing = list(inputs.existing)
            now = self.ctx.clock.now()
            # an atomic request's own machines first (kept whole), then -- for what they do not hold,
            # room that existed when it was planned -- the rest of the cluster, other bookings held
            names = {c.node_name or c.name for c in view.claims.values() if not c.deleting} if req.atomic else set()
            others = self.ctx.bookings.hold([n for n in existing if n.name not in names], now, except_request=req.key)
            room = hold_room(
                [n for n in existing if n.name in names],
                others=others,
                arrived=arrived,
                left=unmatched(placeholders, [self.ctx.cluster.scheduling_pod(p) for p in bound]),
                daemons=inputs.daemons,
                whole_nodes=req.atomic,
            )
            self._publish(req, held=room.held, nodes=room.nodes, claimed=room.claimed)
        await self._nominate(pending, room.placed)

    async def _nominate(self, pending: Sequence[PodView], placed: Mapping[str, tuple[Pod, ...]]) -> None:
        where = {p.key: node for node, ps in placed.items() for p in ps}

        async def one(pod: PodView) -> None:
            node = where.get(pod.key)
            if node is None or pod.nominated_node_name == node:
                return
            try:
                await self.ctx.client.patch(
                    PODS,
                    pod.name,
                    {"status": {"nominatedNodeName": node}},
                    namespace=pod.namespace,
                    subresource="status",
                )
            except (NotFoundError, ApiError) as err:
                log.info("provisioningrequest.nomination_skipped", pod=pod.key, node=node, error=str(err))
                return
            metrics.NOMINATIONS.inc()

        await asyncio.gather(*(one(p) for p in pending))

    # --- check-capacity ----------------------------------------------------------------------

    async def _check(self, view: RequestView, step: Check) -> float | None:
        req = view.request
        pods, problems = self._placeholders(view)
        if problems:
            await self._apply(view, Fail(reason="InvalidRequest", message="; ".join(sorted(set(problems))[:3])))
            return None
        async with self.ctx.writer.lock:
            inputs = await self._inputs()
            now = self.ctx.clock.now()
            plan = solve(
                pods=pods,
                node_pools=(),
                existing_nodes=self.ctx.bookings.hold(list(inputs.existing), now, except_request=req.key),
                daemon_pods=inputs.daemons,
            )
            if plan.unschedulable:
                why = next(iter(plan.unschedulable.values()))
                step_miss = miss(
                    req,
                    why=f"{len(plan.unschedulable)} of {len(pods)} pods do not fit on the "
                    f"cluster's nodes and in-flight NodeClaims now ({why})",
                    permanent=False,
                    knobs=self.knobs,
                )
                await self._status(req, step_miss.updates)
                if step_miss.event is not None:
                    await self._event(req, *step_miss.event)
                metrics.CHECKS.labels("NotFound").inc()
                return step_miss.requeue
            held = placements(plan, pods)
            self._publish(req, held=held, nodes=frozenset(held))
        if not await self._status(req, (*step.accept, provisioned_update(atomic=False, message=""))):
            return None
        await self._event(
            req,
            "Provisioned",
            f"the {len(pods)} pods fit on existing capacity "
            f"({len(plan.existing_placements)} nodes); booked for {self.knobs.booking_seconds:.0f}s",
            False,
        )
        metrics.CHECKS.labels("Found").inc()
        metrics.REQUESTS.labels(req.class_name, "Provisioned").inc()
        log.info(
            "provisioningrequest.capacity_found", request=req.key, pods=len(pods), nodes=len(plan.existing_placements)
        )
        return None  # the status write comes back as an event: then the booking

    def _publish(
        self,
        req: ProvisioningRequest,
        *,
        held: Mapping[str, tuple[Pod, ...]],
        nodes: frozenset[str],
        claimed: frozenset[str] = frozenset(),
    ) -> None:
        now = self.ctx.clock.now()
        self.ctx.bookings.publish(
            Booking(
                request=req.key,
                until=(req.provisioned_at or now) + timedelta(seconds=self.knobs.booking_seconds),
                held=dict(held),
                nodes=nodes,
                claimed=claimed,
            )
        )
        metrics.BOOKED_NODES.set(len(self.ctx.bookings.booked_nodes(now)))
