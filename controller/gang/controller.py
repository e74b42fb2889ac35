"""The gang controller: gated gang pods -> one solve -> NodeClaims under one gang id -> every node
Initialized -> all gates removed together. Or, when anything fails: every NodeClaim deleted, pods
kept gated, retry with backoff.

Each reconcile reads one view of a gang (its pods, their durable record, its NodeClaims), asks the
pure ``decide`` for the next step and applies it; the writes come back as watch events that queue
the gang again. Plans of different gangs are made one at a time, each counting the NodeClaims the
previous ones created, so two gangs competing for a NodePool's limits never both get half.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, Final, Literal, TypeVar

import structlog

from api.v1.labels import ANNOTATION_GANG_CLAIMS, LABEL_GANG
from controller.cloudprovider.types import OfferingId
from controller.context import Context
from controller.gang import claims as cl
from controller.gang import metrics
from controller.gang.decide import (
    Admit,
    DeleteClaims,
    DeleteNodes,
    GangStep,
    GangView,
    Knobs,
    MarkAdmitted,
    MarkFinished,
    MemberLost,
    Pin,
    PlanAttempt,
    Replan,
    Rollback,
    SizeUnknown,
    Wait,
    WaitForMembers,
    backoff_seconds,
    completed_at,
    decide,
    first_created,
    fmt_seconds,
    interrupted_admission,
)
from controller.gang.markers import (
    ANNOTATION_GANG_NAME,
    ANNOTATION_GANG_OFFERING,
    POLICY_RESTART_GANG,
    GangMarker,
    gang_marker,
    gang_options,
    has_gate,
    is_active,
)
from controller.gang.patches import (
    attempt_id,
    claim_admitted_patch,
    claim_name,
    gang_claim_manifest,
    pin_patch,
    pod_condition_patch,
    record_patch,
    ungate_patch,
)
from controller.gang.planner import (
    GangPlan,
    NoFit,
    PlanRequest,
    convert_pods,
    describe_plan,
    plan_gang,
    pool_gang_defaults,
)
from controller.gang.podgroups import PodGroupSizes
from controller.gang.record import (
    ADMITTED,
    BROKEN_OFFERING_AVOID_SECONDS,
    PROVISIONING,
    ROLLED_BACK,
    Avoided,
    Record,
    accumulate,
    newest,
    offering_keys,
    record_of,
    refreshed,
)
from controller.kube.client import ApiError, ConflictError, NotFoundError, PatchType
from controller.kube.resources import NODECLAIMS, NODES, PODS
from controller.scheduling import kubeconv
from controller.scheduling.bounds import apply_bounds
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.model import ExistingNode, NodePoolTemplate, Pod
from controller.state.deletion import delete_nodeclaim
from controller.state.existing import cluster_capacity, existing_node
from controller.state.informer import EventType
from controller.state.nodepools import daemon_templates, valid_pools
from controller.state.spend import pool_bounds
from controller.state.views import NodeClaimView, NodeView, Obj, PodView, StateNode
from controller.state.writer import NewClaim

log = structlog.get_logger()

Pools = dict[str, tuple[Obj, tuple[InstanceType, ...]]]  # valid NodePools and their instance types
S = TypeVar("S", PlanAttempt, Replan)

MAX_GONE: Final = 4096
WRITE_RECHECK_SECONDS: Final = 5.0
BLOCKED_RECHECK_SECONDS: Final = 30.0
NEVER_FITS_RECHECK_SECONDS: Final = 300.0
EVENT_PODS: Final = 64  # at most this many members get each Event (the log names the gang)


class GangController:
    def __init__(self, ctx: Context, *, workers: int = 8) -> None:
        from controller.state.queue import WorkQueue

        self.ctx = ctx
        self.queue = WorkQueue(name="gang", clock=ctx.clock)
        self.sizes = PodGroupSizes(client=ctx.client, clock=ctx.clock)
        self.knobs = Knobs(
            member_wait_seconds=ctx.settings.gang_member_wait_seconds,
            backoff_base_seconds=ctx.settings.gang_backoff_seconds,
            backoff_max_seconds=ctx.settings.gang_backoff_max_seconds,
        )
        self._workers = workers
        self._members: dict[str, set[str]] = defaultdict(set)  # gang key -> pod keys
        self._gang_of_pod: dict[str, str] = {}
        self._markers: dict[str, GangMarker] = {}
        self._overrides: dict[str, tuple[Record, frozenset[str]]] = {}  # what we wrote, until cached
        self._seen: dict[str, set[str]] = {}  # attempt id -> NodeClaims seen to exist (the newest MAX_GONE)
        self._gone: dict[str, NodeClaimView] = {}  # last state of gang NodeClaims that were deleted
        self._blocked: set[str] = set()
        self._never: dict[str, tuple[Any, ...]] = {}  # gangs that can never fit, and what that depended on
        self._told: dict[str, tuple[str, str]] = {}
        self._states: dict[str, str] = {}

    # --- wiring ------------------------------------------------------------------------------

    async def run(self) -> None:
        cluster = self.ctx.cluster
        cluster.subscribe_views("Pod", self._on_pod)
        cluster.subscribe_views("NodeClaim", self._on_claim)
        cluster.subscribe("NodePool", self._on_pool)
        await cluster.wait_synced()
        for pod in list(cluster.pod_views()):
            self._index(pod)
        await self.resume_admissions()
        for claim in list(cluster.claim_views().values()):
            gang = self._gang_of_claim(claim)
            if gang is not None:
                self.queue.add(gang)
        for key in list(self._members):
            self.queue.add(key)
        await self.queue.run(self.reconcile, workers=self._workers)

    async def resume_admissions(self) -> int:
        """Before anything else at start-up: finish every admission the previous controller (or
        leader) left half-done, its gates removed from some members only. Returns how many gangs."""
        resumed = 0
        for key in sorted(self._members):
            view = await self._view(key)
            rest = interrupted_admission(view)
            if not rest:
                continue
            log.warning(
                "gang.admission_resumed",
                gang=key,
                released=len(view.released),
                gated=list(rest),
                reason="the previous controller stopped between the gate removals; every node was Initialized",
            )
            await self._apply(view, decide(view, now=self.ctx.clock.now(), knobs=self.knobs))
            resumed += 1
        return resumed

    def _index(self, pod: PodView, *, deleted: bool = False) -> str | None:
        pkey = pod.key
        marker = gang_marker(pod)
        previous = self._gang_of_pod.get(pkey)
        if previous is not None and (deleted or marker is None or marker.key != previous):
            self._members[previous].discard(pkey)
            self._gang_of_pod.pop(pkey, None)
            self.queue.add(previous)
        if marker is None or deleted:
            return previous
        self._markers[marker.key] = marker
        self._members[marker.key].add(pkey)
        self._gang_of_pod[pkey] = marker.key
        return marker.key

    def _on_pod(self, etype: EventType, obj: PodView, old: PodView | None) -> None:
        key = self._index(obj, deleted=etype == "DELETED")
        if key is not None:
            self.queue.add(key)

    @staticmethod
    def _gang_of_claim(claim: NodeClaimView) -> str | None:
        if not claim.gang:
            return None
        key = claim.annotations.get(ANNOTATION_GANG_NAME)
        return str(key) if key else None

    def _on_claim(self, etype: EventType, obj: NodeClaimView, old: NodeClaimView | None) -> None:
        name = obj.name
        gang = self._gang_of_claim(obj)
        if etype == "DELETED" and gang is not None:
            # keep its last state: why it went (termination reason) and what it was, for the rollback
            self._gone[name] = obj
            while len(self._gone) > MAX_GONE:
                self._gone.pop(next(iter(self._gone)))
        if gang is not None:
            self.queue.add(gang)
        if etype == "DELETED":  # capacity freed: gangs waiting for it may fit now
            for key in list(self._blocked):
                self.queue.add(key)

    def _on_pool(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        for key in list(self._blocked):
            self.queue.add(key)

    def _seen_for(self, attempt: str) -> set[str]:
        found = self._seen.get(attempt)
        if found is None:
            found = self._seen[attempt] = set()
            while len(self._seen) > MAX_GONE:
                self._seen.pop(next(iter(self._seen)))
        return found

    # --- the view ----------------------------------------------------------------------------

    async def _size(self, marker: GangMarker, annotated: int | None) -> int | None:
        if marker.source == "joiner":
            return annotated
        from_group = await self.sizes.min_member(marker)
        return from_group if from_group is not None else annotated

    async def _view(self, key: str) -> GangView:
        cluster = self.ctx.cluster
        pods = [p for k in sorted(self._members.get(key, ())) if (p := cluster.pod_view(k)) is not None]
        marker = self._markers.get(key)
        if marker is None:
            ns, _, name = key.partition("/")
            marker = GangMarker(ns, name, "joiner")
        gid = marker.id
        active = [p for p in pods if is_active(p) and gang_marker(p) is not None]
        gated = [p for p in active if has_gate(p)]
        released = [p for p in active if not has_gate(p) and (r := record_of(p)) is not None and r.phase == ADMITTED]
        claims: dict[str, NodeClaimView] = {n: c for n, c in cluster.claim_views().items() if c.gang == gid}
        for claim in self.ctx.writer.in_flight():
            if claim.gang == gid:
                claims.setdefault(claim.name, claim)
        uids = {p.uid or "" for p in gated}
        records = [record_of(p) for p in gated]
        override = self._overrides.get(key)
        if override is not None and override[1] & uids:
            records.append(override[0])
        pending = newest(r for r in records if r is not None and r.phase != ADMITTED)
        admitted = newest(r for r in (record_of(p) for p in released) if r is not None)
        options = gang_options(active)
        size = await self._size(marker, options.size) if gated else options.size
        seen = self._seen_for(pending.id) if pending is not None else set()
        if pending is not None:
            seen.update(n for n in pending.nodeclaims if n in claims)
        return GangView(
            key=key,
            gid=gid,
            size=size,
            gated=tuple(gated),
            released=tuple(released),
            claims=claims,
            pending=pending,
            admitted=admitted,
            seen=frozenset(seen),
            gone={n: self._gone[n] for n in (pending.nodeclaims if pending else ()) if n in self._gone},
            strays=self._strays(gid, claims),
            first_created=first_created(active),
            member_loss_policy=options.member_loss_policy,
            problems=options.problems,
        )

    def _strays(self, gid: str, claims: dict[str, NodeClaimView]) -> dict[str, NodeView]:
        """Nodes labelled with the gang that none of its NodeClaims accounts for."""
        known = cl.node_names(claims)
        out: dict[str, NodeView] = {}
        for name, node in self.ctx.cluster.node_views().items():
            if node.labels.get(LABEL_GANG) != gid:
                continue
            if name in known or node.provider_id in known:
                continue
            out[name] = node
        return out

    def _set_state(self, key: str, state: str | None) -> None:
        if state is None:
            self._states.pop(key, None)
        else:
            self._states[key] = state
        counts = {"Pending": 0, "Provisioning": 0, "Admitted": 0}
        for s in self._states.values():
            counts[s] = counts.get(s, 0) + 1
        metrics.GANGS_PENDING.set(counts["Pending"])
        metrics.GANGS_PROVISIONING.set(counts["Provisioning"])
        metrics.GANGS_ADMITTED.set(counts["Admitted"])

    # --- reconcile ---------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        """One step for one gang; what follows is driven by watch events and wake-ups."""
        await self.ctx.cluster.wait_synced()
        view = await self._view(key)
        self._set_state(key, view.state())
        await self._apply(view, decide(view, now=self.ctx.clock.now(), knobs=self.knobs))
        if not view.gated and not view.released and not view.claims:
            self._forget(key)
        return None

    def _forget(self, key: str) -> None:
        if self._members.get(key):
            return
        self._members.pop(key, None)
        self._markers.pop(key, None)
        self._overrides.pop(key, None)
        self._blocked.discard(key)
        self._never.pop(key, None)
        for told in [k for k in self._told if k == key or k.startswith(f"{key}#")]:
            self._told.pop(told, None)
        self._set_state(key, None)

    async def _apply(self, view: GangView, decision: GangStep) -> None:
        """Apply one step, then wait for the watch events it causes or for a wake-up."""
        key = view.key
        if isinstance(decision, Wait):
            if decision.seconds is not None:
                self.queue.add_after(key, decision.seconds)
            return
        if isinstance(decision, SizeUnknown):
            await self._tell(view, "GangSizeUnknown", decision.message, warning=True)
            log.warning("gang.waiting", gang=key, reason="SizeUnknown", message=decision.message)
            return
        if isinstance(decision, WaitForMembers):
            await self._waiting_for_members(view, decision)
            return
        if isinstance(decision, DeleteClaims):
            await self._delete_claims(view, decision.names, reason=decision.reason, message=decision.message)
            self.queue.add_after(key, WRITE_RECHECK_SECONDS)
            return
        if isinstance(decision, DeleteNodes):
            await self._delete_nodes(view, decision.names)
            self.queue.add_after(key, WRITE_RECHECK_SECONDS)
            return
        if isinstance(decision, PlanAttempt):
            await self._plan(view, top_up=decision.top_up)
            return
        if isinstance(decision, Pin):
            await self._pin(view, decision.pods)
            self.queue.add_after(key, WRITE_RECHECK_SECONDS)
            return
        if isinstance(decision, Rollback):
            await self._rollback(view, decision)
            return
        if isinstance(decision, Replan):
            await self._replan(view, decision)
            return
        if isinstance(decision, Admit):
            await self._admit(view, decision.pods)
            return
        if isinstance(decision, MarkAdmitted):
            await self._mark_claims(
                view,
                decision.names,
                status=True,
                reason="GangAdmitted",
                message=f"gang {key} is admitted and running on this node: not consolidated while it runs",
            )
            return
        if isinstance(decision, MemberLost):
            await self._member_lost(view, decision)
            return
        if isinstance(decision, MarkFinished):
            await self._mark_claims(
                view,
                decision.names,
                status=False,
                reason="GangFinished",
                message=f"gang {key} has no running member any more: the node may be consolidated",
            )
            log.info("gang.finished", gang=key, nodeclaims=list(decision.names))
            return
        raise AssertionError(f"unhandled gang decision {decision!r}")

    # --- telling users -----------------------------------------------------------------------

    async def _tell(
        self,
        view: GangView,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        pods: Sequence[PodView] | None = None,
        once: bool = True,
    ) -> None:
        """An Event on each member (at most EVENT_PODS); with ``once``, not repeated while unchanged."""
        if once and self._told.get(view.key) == (reason, message):
            return
        self._told[view.key] = (reason, message)
        targets = list(pods if pods is not None else view.gated or view.released)[:EVENT_PODS]
        kind: Literal["Normal", "Warning"] = "Warning" if warning else "Normal"
        await asyncio.gather(*(self.ctx.events.emit(p.raw, reason=reason, message=message, type=kind) for p in targets))

    async def _condition(self, pods: Sequence[PodView], *, status: bool, reason: str, message: str) -> None:
        now = self.ctx.clock.now()
        patch = pod_condition_patch(status=status, reason=reason, message=message, now=now)

        async def one(pod: PodView) -> None:
            with contextlib.suppress(ApiError):
                await self.ctx.client.patch(
                    PODS,
                    pod.name,
                    patch,
                    namespace=pod.namespace,
                    subresource="status",
                    patch_type="strategic",
                )

        await asyncio.gather(*(one(p) for p in pods))

    async def _waiting_for_members(self, view: GangView, d: WaitForMembers) -> None:
        missing = d.size - d.present
        if d.warn:
            message = (
                f"gang {view.key} has {d.present} of {d.size} members after more than "
                f"{fmt_seconds(self.knobs.member_wait_seconds)}; "
                f"waiting for {missing} more before buying any node (create the missing pods, or fix "
                "joiner.sh/gang-size / the PodGroup's minMember)"
            )
            await self._tell(view, "GangWaitingForMembers", message, warning=True)
            log.info("gang.waiting", gang=view.key, reason="MembersMissing", present=d.present, size=d.size)
        else:
            log.debug("gang.waiting", gang=view.key, reason="MembersMissing", present=d.present, size=d.size)
        if d.recheck is not None:
            self.queue.add_after(view.key, d.recheck)

    # --- writes ------------------------------------------------------------------------------

    async def _patch_pods(
        self, pods: Sequence[PodView], patch_of: Callable[[PodView], Any], *, patch_type: PatchType = "merge"
    ) -> int:
        """Send each pod its patch, all at once; return how many succeeded."""

        async def one(pod: PodView) -> bool:
            patch = patch_of(pod)
            if patch is None:
                return False
            try:
                await self.ctx.client.patch(
                    PODS,
                    pod.name,
                    patch,
                    namespace=pod.namespace,
                    patch_type=patch_type,
                )
                return True
            except NotFoundError:
                return False
            except ApiError as err:  # a stale view (test failed) or a rejected change: decide again
                log.info("gang.pod_patch_failed", pod=pod.key, error=str(err))
                return False

        results = await asyncio.gather(*(one(p) for p in pods))
        return sum(1 for r in results if r)

    async def _delete_claims(self, view: GangView, names: Iterable[str], *, reason: str, message: str) -> int:
        async def one(name: str) -> bool:
            claim = view.claims.get(name)
            self.ctx.writer.forget(name)
            if claim is None or claim.deleting:
                return False
            return await delete_nodeclaim(self.ctx, claim, reason=reason, message=message)

        results = await asyncio.gather(*(one(n) for n in names))
        deleted = sum(1 for r in results if r)
        if deleted:
            log.info("gang.nodeclaims_deleted", gang=view.key, reason=reason, count=deleted, message=message)
        return deleted

    async def _delete_nodes(self, view: GangView, names: Iterable[str]) -> None:
        async def one(name: str) -> None:
            with contextlib.suppress(NotFoundError, ConflictError):
                await self.ctx.client.delete(NODES, name)

        names = list(names)
        await asyncio.gather(*(one(n) for n in names))
        log.info(
            "gang.nodes_deleted",
            gang=view.key,
            nodes=names,
            reason="the Node carries the gang's label but belongs to none of its NodeClaims",
        )

    async def _mark_claims(
        self, view: GangView, names: Iterable[str], *, status: bool, reason: str, message: str
    ) -> None:
        now = self.ctx.clock.now()

        async def one(name: str) -> None:
            claim = view.claims.get(name)
            if claim is None or name not in self.ctx.cluster.claim_views():
                return
            try:
                await self.ctx.client.patch(
                    NODECLAIMS,
                    name,
                    claim_admitted_patch(claim, status=status, reason=reason, message=message, now=now),
                    subresource="status",
                )
            except (ConflictError, NotFoundError):
                self.queue.add_after(view.key, 0.5)
            except ApiError as err:
                log.warning("gang.nodeclaim_mark_failed", nodeclaim=name, error=str(err))

        await asyncio.gather(*(one(n) for n in names))

    async def _pin(self, view: GangView, names: Sequence[str]) -> None:
        pending = view.pending
        assert pending is not None
        wanted = set(names)
        pods = [p for p in view.gated if p.name in wanted]
        await self._patch_pods(pods, lambda p: pin_patch(p, view.gid, pending))

    def _mark_unavailable(self, avoided: Iterable[Avoided]) -> None:
        """Every decider (and the launch) skips these offerings until each one's expiry."""
        unavailable = self.ctx.unavailable
        now = self.ctx.clock.now()
        for entry in avoided:
            if entry.until is None or entry.until <= now:
                continue
            for instance_type, zone, capacity_type in offering_keys([entry.offering]):
                offering = OfferingId(instance_type, zone, capacity_type)
                if not unavailable.is_unavailable(offering):
                    unavailable.mark(offering, ttl_seconds=(entry.until - now).total_seconds())

    def _next_seq(self, view: GangView) -> int:
        seqs = [r.seq for r in (view.pending, view.admitted) if r is not None]
        override = self._overrides.get(view.key)
        if override is not None:
            seqs.append(override[0].seq)
        return max(seqs, default=0) + 1

    # --- plan and provision ------------------------------------------------------------------

    async def _pools(
        self,
    ) -> tuple[Pools, dict[str, InstanceType], list[ExistingNode], list[NodePoolTemplate]]:
        """The valid NodePools, their instance types, the cluster's machines (in-flight NodeClaims
        included) and the NodePools as the solver sees them, their usage counted from those machines."""
        ctx = self.ctx
        pools = await valid_pools(ctx, component="gang")
        all_types = {it.name: it for _, its in pools.values() for it in its}
        existing = cluster_capacity(ctx.cluster, list(all_types.values()), extra_claims=ctx.writer.in_flight())
        templates: list[NodePoolTemplate] = []
        for name, (pool, its) in pools.items():
            try:
                templates.append(kubeconv.nodepool_from_dict(pool, its, usage=kubeconv.pool_usage(name, existing)))
            except ValueError as err:
                log.warning("gang.nodepool_invalid", nodepool=name, error=str(err))
        return pools, all_types, existing, templates

    def _request(
        self,
        view: GangView,
        *,
        pods: Sequence[Pod],
        pools: Pools,
        templates: Sequence[NodePoolTemplate],
        existing: Sequence[ExistingNode],
        avoid: Iterable[str],
        same_zone: bool | None,
    ) -> PlanRequest:
        ctx = self.ctx
        return PlanRequest(
            key=view.key,
            gid=view.gid,
            pods=tuple(pods),
            pools=tuple(templates),
            defaults={name: pool_gang_defaults(pool) for name, (pool, _) in pools.items()},
            existing=tuple(existing),
            daemons=tuple(daemon_templates(ctx.cluster, component="gang")),
            unavailable=frozenset((o.instance_type, o.zone, o.capacity_type) for o in ctx.unavailable.current()),
            avoid=offering_keys(avoid),
            same_zone=same_zone,
        )

    def _refused_by_bounds(self, result: GangPlan, pools: Pools, all_types: dict[str, InstanceType]) -> str | None:
        """The NodePools' budgets and limits.nodes: the whole plan or none of it."""
        ctx = self.ctx
        claims = [*ctx.cluster.claim_views().values(), *ctx.writer.in_flight()]
        bounds = pool_bounds({n: p for n, (p, _) in pools.items()}, claims, all_types)
        refused = apply_bounds(result.plan, bounds).refused
        return next(iter(refused.values()))[1] if refused else None

    async def _still(self, key: str, step: type[S]) -> tuple[GangView, S] | None:
        """The cache may have moved while we waited for the writer's lock: decide again on fresh
        state. None (the gang queued again) when ``step`` is no longer the one to take."""
        fresh = await self._view(key)
        current = decide(fresh, now=self.ctx.clock.now(), knobs=self.knobs)
        if not isinstance(current, step):
            self.queue.add_after(key, 0)
            return None
        return fresh, current

    async def _plan(self, view: GangView, *, top_up: bool) -> None:
        key = view.key
        ctx = self.ctx
        async with ctx.writer.lock:
            still = await self._still(key, PlanAttempt)
            if still is None:
                return
            view = still[0]
            fingerprint = self._fingerprint(view)
            if self._never.get(key) == fingerprint:
                # nothing it depends on changed since it was found never to fit: do not solve again
                self.queue.add_after(key, NEVER_FITS_RECHECK_SECONDS)
                return
            self._never.pop(key, None)
            pools, all_types, existing, templates = await self._pools()
            options = gang_options([*view.gated, *view.released])
            zone: str | None = None
            if top_up and view.admitted is not None and options.same_zone is not False:
                zone = next(
                    (z for n in view.admitted.nodeclaims if n in view.claims and (z := cl.zone_of(view.claims[n]))),
                    None,
                )
            # the pods are pinned to the gang's label: only its running nodes (top-up) may host them;
            # every node still counts for the NodePools' limits (through the usage above)
            allowed = cl.node_names(
                {n: view.claims[n] for n in (view.admitted.nodeclaims if view.admitted else ()) if n in view.claims}
            )
            placeable = tuple(n for n in existing if n.labels.get(LABEL_GANG) == view.gid and n.name in allowed)
            pods, problems = convert_pods(view.gated, view.gid, zone=zone)
            if problems:
                reason = f"gang {key}: " + "; ".join(problems[:3])
                await self._no_fit(view, NoFit(permanent=True, reason=reason), fingerprint=fingerprint)
                return
            now = ctx.clock.now()
            avoiding = (
                refreshed(
                    view.pending.avoid,
                    now=now,
                    last_attempt=view.pending.attempt,
                    ttl_seconds=ctx.settings.unavailable_offering_ttl_seconds,
                )
                if view.pending is not None and view.pending.phase == ROLLED_BACK
                else []
            )
            request = self._request(
                view,
                pods=pods,
                pools=pools,
                templates=templates,
                existing=placeable,
                avoid=[a.offering for a in avoiding],
                same_zone=options.same_zone,
            )
            started = ctx.clock.monotonic()
            result = plan_gang(request)
            solve_seconds = ctx.clock.monotonic() - started
            if isinstance(result, NoFit):
                await self._no_fit(view, result, fingerprint=fingerprint)
                return
            why = self._refused_by_bounds(result, pools, all_types)
            if why is not None:
                await self._no_fit(view, NoFit(permanent=False, reason=f"gang {key}: {why}"), fingerprint=fingerprint)
                return
            if result.avoided:
                # the NodeClaims list every instance type that fits, cheapest first: the launch must
                # skip the offerings earlier attempts failed on, as the plan did (for as long as the plan)
                self._mark_unavailable(avoiding)
            self._blocked.discard(key)
            await self._provision(
                view,
                result,
                pools={n: p for n, (p, _) in pools.items()},
                timeout_seconds=options.timeout_seconds,
                solve_seconds=solve_seconds,
            )

    async def _no_fit(self, view: GangView, result: NoFit, *, fingerprint: tuple[Any, ...] = ()) -> None:
        self._blocked.add(view.key)
        fresh = self._told.get(f"{view.key}#log") != ("NoFit", result.reason)
        self._told[f"{view.key}#log"] = ("NoFit", result.reason)
        if result.permanent:
            self._never[view.key] = fingerprint
            await self._tell(view, "GangUnschedulable", result.reason + "; no NodeClaim was created", warning=True)
            if fresh:
                await self._condition(view.gated, status=False, reason="Unschedulable", message=result.reason)
                log.warning("gang.unschedulable", gang=view.key, reason=result.reason, members=len(view.gated))
            self.queue.add_after(view.key, NEVER_FITS_RECHECK_SECONDS)
        else:
            await self._tell(view, "GangWaitingForCapacity", result.reason)
            if fresh:
                log.info(
                    "gang.waiting", gang=view.key, reason="Capacity", detail=result.reason, members=len(view.gated)
                )
            self.queue.add_after(view.key, BLOCKED_RECHECK_SECONDS)

    def _fingerprint(self, view: GangView) -> tuple[Any, ...]:
        """What a "can never fit" verdict depends on: the members and the NodePools and node classes."""
        cluster = self.ctx.cluster
        members = tuple(sorted(p.uid or "" for p in view.gated))
        pools = tuple(sorted((n, p["metadata"].get("resourceVersion")) for n, p in cluster.nodepools().items()))
        classes = tuple(sorted((n, c["metadata"].get("resourceVersion")) for n, c in cluster.nodeclasses().items()))
        return members, pools, classes

    async def _provision(
        self,
        view: GangView,
        result: GangPlan,
        *,
        pools: dict[str, Obj],
        timeout_seconds: float | None,
        solve_seconds: float = 0.0,
    ) -> None:
        ctx = self.ctx
        now = ctx.clock.now()
        plan = result.plan
        base = view.pending or view.admitted
        attempt = (max(r.attempt for r in (view.pending, view.admitted) if r is not None) if base else 0) + 1
        uids = [p.uid or "" for p in view.gated]
        aid = attempt_id(view.gid, attempt, uids)
        manifests: list[NewClaim] = []
        for i, node in enumerate(plan.new_nodes):
            name = claim_name(node.node_pool, aid, i)
            manifest = gang_claim_manifest(
                node,
                pools[node.node_pool],
                name=name,
                gid=view.gid,
                key=view.key,
                attempt=aid,
                same_zone=result.same_zone,
            )
            manifests.append(NewClaim(node, manifest))
        # every member names the attempt's new NodeClaims of its NodePool (same NodeClass, labels and
        # taints) and their offerings: a provider that can buy them in one all-or-nothing request
        # (gcp: bulkInsert with minCount) does so
        by_pool: dict[str, list[str]] = defaultdict(list)
        for m in manifests:
            meta = m.manifest["metadata"]
            by_pool[m.node.node_pool].append(f"{meta['name']}={meta['annotations'][ANNOTATION_GANG_OFFERING]}")
        for m in manifests:
            m.manifest["metadata"]["annotations"][ANNOTATION_GANG_CLAIMS] = ",".join(by_pool[m.node.node_pool])
        reused: list[str] = []
        for node_name, placed in plan.existing_placements.items():
            if not placed:
                continue
            claim = self._claim_named(node_name)
            if claim is not None:
                reused.append(claim)
        seconds = timeout_seconds or result.timeout_seconds or ctx.settings.gang_timeout_seconds
        rollbacks = view.pending.rollbacks if view.pending is not None else 0
        record = Record(
            seq=self._next_seq(view),
            attempt=attempt,
            id=aid,
            phase=PROVISIONING,
            nodeclaims=tuple([m.manifest["metadata"]["name"] for m in manifests] + sorted(set(reused))),
            started=now,
            deadline=now + timedelta(seconds=seconds),
            rollbacks=rollbacks,
            last_failure=view.pending.last_failure if view.pending is not None else "",
            # what earlier attempts failed on stays avoided for the unavailable-offering TTL
            avoid=tuple(
                refreshed(
                    view.pending.avoid,
                    now=now,
                    last_attempt=view.pending.attempt,
                    ttl_seconds=self.ctx.settings.unavailable_offering_ttl_seconds,
                )
            )
            if view.pending is not None
            else (),
            level=view.pending.level if view.pending is not None else 0,
            members=len(view.gated),
        )
        # 1. the record and the pin on every gated member, 2. the NodeClaims (through the writer, which
        # has later plans count them at once). Both at the same time: a NodeClaim whose attempt no member
        # records (a crash in between) belongs to no attempt, and the next reconcile deletes it.
        self._overrides[view.key] = (record, frozenset(uids))
        for m in manifests:
            self._seen_for(aid).add(m.manifest["metadata"]["name"])
        started = ctx.clock.monotonic()
        _, written = await asyncio.gather(
            self._patch_pods(view.gated, lambda p: pin_patch(p, view.gid, record)),
            ctx.writer.create(manifests, reason="gang", attempt=aid),
        )
        write_seconds = ctx.clock.monotonic() - started
        what = describe_plan(plan)
        log.info(
            "gang.planned",
            gang=view.key,
            attempt=attempt,
            attempt_id=aid,
            members=len(view.gated),
            nodeclaims=len(manifests),
            reused=len(reused),
            buys=what,
            same_zone=result.same_zone,
            avoided_failed_offerings=result.avoided,
            price_per_hour=round(sum(n.price for n in plan.new_nodes), 4),
            solve_seconds=round(solve_seconds, 4),
            write_seconds=round(write_seconds, 4),
        )
        if any(w.claim is None for w in written):
            # the apiserver refused a NodeClaim: nothing can come of this attempt
            self.queue.add_after(view.key, 0)
            return
        log.info(
            "gang.provisioning",
            gang=view.key,
            attempt=attempt,
            nodeclaims=list(record.nodeclaims),
            deadline_seconds=seconds,
            reason="every member placed in one solve; pods stay gated until every NodeClaim is Initialized",
        )
        await self._tell(
            view,
            "GangProvisioning",
            f"attempt {attempt}: buying {what} for the {len(view.gated)} members of gang {view.key}; "
            f"the pods stay gated until every node is Initialized (deadline {fmt_seconds(seconds)})",
        )
        self.queue.add_after(view.key, seconds)

    def _claim_named(self, node_name: str) -> str | None:
        cluster = self.ctx.cluster
        if node_name in cluster.claim_views():
            return node_name
        node = cluster.node_views().get(node_name)
        claim = cluster.claim_view_for_node(node) if node is not None else None
        return None if claim is None else claim.name

    # --- rollback ----------------------------------------------------------------------------

    async def _rollback(self, view: GangView, d: Rollback) -> None:
        ctx = self.ctx
        pending = view.pending
        assert pending is not None
        now = ctx.clock.now()
        rollbacks = pending.rollbacks + (1 if d.backoff else 0)
        # a refusal of capacity cost no machine time, and every decider (the next attempt included)
        # skips the refused offerings for the unavailable-offering TTL (marked below): the retry goes
        # elsewhere at once, and waits for capacity when nothing else fits. Timeouts and deleted
        # machines raise the backoff level and wait.
        level = pending.level + (1 if d.backoff and not d.capacity_only else 0)
        delay = (
            backoff_seconds(level, base=self.knobs.backoff_base_seconds, maximum=self.knobs.backoff_max_seconds)
            if d.backoff and not d.capacity_only
            else 0.0
        )
        record = Record(
            seq=self._next_seq(view),
            attempt=pending.attempt,
            id=pending.id,
            phase=ROLLED_BACK,
            nodeclaims=pending.nodeclaims,
            started=pending.started,
            deadline=pending.deadline,
            rollbacks=rollbacks,
            retry_at=now + timedelta(seconds=delay),
            last_failure=d.message,
            avoid=accumulate(
                pending.avoid,
                d.avoid,
                now=now,
                # a refusal of capacity blinks; a machine that launched and never registered or got
                # ready is a broken offering, avoided much longer (else slow failures alternate forever)
                ttl_seconds=ctx.settings.unavailable_offering_ttl_seconds
                if d.capacity_only
                else max(ctx.settings.unavailable_offering_ttl_seconds, BROKEN_OFFERING_AVOID_SECONDS),
                attempt=pending.attempt,
            ),
            level=level,
        )
        # the offerings that failed are avoided by every decider (and by the launch) for a while
        self._mark_unavailable(a for a in record.avoid if a.offering in d.avoid)
        uids = frozenset(p.uid or "" for p in view.gated)
        # 1. the pods learn first that the attempt is over (a crash after this only leaves claims to delete)
        self._overrides[view.key] = (record, uids)
        await self._patch_pods(view.gated, lambda p: record_patch(record))
        # 2. every NodeClaim of the attempt goes (not those a running part of the gang uses)
        running = set(view.admitted.nodeclaims) if view.admitted is not None else set()
        doomed = [n for n in pending.nodeclaims if n not in running]
        doomed += [n for n in view.claims if cl.attempt_of(view.claims[n]) == pending.id and n not in doomed]
        message = f"gang {view.key}: {d.message}"
        deleted = await self._delete_claims(view, doomed, reason="GangRolledBack", message=message)
        metrics.ROLLBACKS.labels(reason=d.reason).inc()
        retry = f"retrying in {fmt_seconds(delay)}" if delay else "retrying now"
        if d.avoid:
            retry += " avoiding " + ", ".join(d.avoid)
        text = (
            f"{d.message}. Deleted {deleted} NodeClaim(s) of the attempt; no member was started, all stay gated; "
            f"{retry}"
        )
        log.warning(
            "gang.rolled_back",
            gang=view.key,
            attempt=pending.attempt,
            reason=d.reason,
            failed=list(d.failed),
            message=d.message,
            deleted=deleted,
            rollbacks=rollbacks,
            retry_in=delay,
            backoff_level=level,
            avoid=list(d.avoid),
            avoiding=[a.offering for a in record.avoid],
        )
        await self._tell(view, "GangRolledBack", text, warning=d.backoff, once=False)
        await self._condition(view.gated, status=False, reason="RolledBack", message=text)
        self.queue.add_after(view.key, delay if delay else WRITE_RECHECK_SECONDS)

    # --- re-plan what the cloud refused ---------------------------------------------------------

    def _kept_nodes(
        self, view: GangView, kept: Sequence[str], instance_types: Sequence[InstanceType]
    ) -> list[ExistingNode]:
        """The attempt's machines that launched or are coming up, as the solver sees them: in flight
        until Initialized (their start-up taints do not keep the members off), with what runs on them."""
        cluster = self.ctx.cluster
        machines: list[StateNode] = []
        for name in kept:
            claim = view.claims.get(name)
            if claim is not None and not claim.deleting:
                machines.append(StateNode(node=cluster.node_view_for_claim(claim), claim=claim))
        names = {m.node.name for m in machines if m.node is not None}
        bound: dict[str, list[Pod]] = {}
        if names:
            for pod in cluster.pod_views():
                if pod.node_name in names and not pod.is_terminal:
                    bound.setdefault(pod.node_name, []).append(kubeconv.pod_from_dict(pod.raw, detect_gang=False))
        out: list[ExistingNode] = []
        for m in machines:
            pods = bound.get(m.node.name, []) if m.node is not None else []
            converted = existing_node(m, pods=pods, instance_types=instance_types)
            if converted is not None:
                out.append(converted)
        return out

    async def _replan(self, view: GangView, d: Replan) -> None:
        """Buy again only the NodeClaims the cloud refused, beside the attempt's machines that launched
        (in the attempt's zone, avoiding what refused); the members stay gated throughout. When the
        rest cannot be placed that way, the attempt is rolled back whole as before."""
        key = view.key
        ctx = self.ctx
        async with ctx.writer.lock:
            still = await self._still(key, Replan)
            if still is None:
                return
            view, d = still
            pending = view.pending
            assert pending is not None
            now = ctx.clock.now()
            refused = d.rollback.avoid
            avoid = accumulate(
                pending.avoid,
                refused,
                now=now,
                ttl_seconds=ctx.settings.unavailable_offering_ttl_seconds,
                attempt=pending.attempt,
            )
            self._mark_unavailable(a for a in avoid if a.offering in refused)
            pools, all_types, _, templates = await self._pools()
            zones = {cl.pinned_zone(view.claims[n]) for n in d.kept}
            zone = next(iter(zones)) if len(zones) == 1 else None
            why: str | None = None
            result: GangPlan | NoFit | None = None
            try:
                kept_nodes = self._kept_nodes(view, d.kept, list(all_types.values()))
                pods, problems = convert_pods(view.gated, view.gid, zone=zone)
                if problems:
                    why = "; ".join(problems[:3])
                else:
                    request = self._request(
                        view,
                        pods=pods,
                        pools=pools,
                        templates=templates,
                        existing=kept_nodes,
                        avoid=[a.offering for a in avoid if a.active(now)],
                        same_zone=zone is not None,
                    )
                    result = plan_gang(request)
            except ValueError as err:  # a malformed pod or Node in the cache: no partial plan
                why = str(err)
            if isinstance(result, NoFit):
                why = result.reason
            elif result is not None and not result.avoided:
                why = "only the offerings that refused would fit"
            elif result is not None:
                why = self._refused_by_bounds(result, pools, all_types)
            if why is not None or not isinstance(result, GangPlan):
                where = f" in {zone}" if zone else ""
                fallback = replace(
                    d.rollback,
                    message=f"{d.rollback.message}; they cannot be bought again beside the {len(d.kept)} that "
                    f"launched{where} ({why})",
                )
                log.info("gang.replan_failed", gang=key, attempt=pending.attempt, kept=list(d.kept), reason=why)
                await self._rollback(view, fallback)
                return
            replans = pending.replans + 1
            tag = f"{pending.id}r{replans}"
            pool_objs = {n: p for n, (p, _) in pools.items()}
            manifests = [
                NewClaim(
                    node,
                    gang_claim_manifest(
                        node,
                        pool_objs[node.node_pool],
                        name=claim_name(node.node_pool, tag, i),
                        gid=view.gid,
                        key=key,
                        attempt=pending.id,
                        same_zone=result.same_zone,
                    ),
                )
                for i, node in enumerate(result.plan.new_nodes)
            ]
            names = [m.manifest["metadata"]["name"] for m in manifests]
            record = replace(
                pending,
                seq=self._next_seq(view),
                nodeclaims=(*d.kept, *names),
                last_failure=d.rollback.message,
                avoid=avoid,
                replans=replans,
            )
            self._overrides[key] = (record, frozenset(p.uid or "" for p in view.gated))
            self._seen_for(pending.id).update(names)
            _, written = await asyncio.gather(
                self._patch_pods(view.gated, lambda p: pin_patch(p, view.gid, record)),
                ctx.writer.create(manifests, reason="gang", attempt=pending.id),
            )
        metrics.REPLANS.inc()
        what = describe_plan(result.plan)
        log.warning(
            "gang.replanned",
            gang=key,
            attempt=pending.attempt,
            replans=replans,
            refused=list(d.rollback.failed),
            kept=list(d.kept),
            buys=what,
            avoiding=[a.offering for a in avoid],
            reason="the cloud refused some NodeClaims for capacity; the machines that launched are kept",
        )
        text = (
            f"attempt {pending.attempt}: the cloud refused {len(d.rollback.failed)} NodeClaim(s) for capacity "
            f"({', '.join(refused) or ', '.join(d.rollback.failed)}); buying {what} in their place and keeping "
            f"the {len(d.kept)} that launched. The members stay gated until every node is Initialized"
        )
        await self._tell(view, "GangReplanned", text, once=False)
        if any(w.claim is None for w in written):
            self.queue.add_after(key, 0)  # the apiserver refused a NodeClaim: the next step says what now
            return
        left = (pending.deadline - now).total_seconds() if pending.deadline is not None else WRITE_RECHECK_SECONDS
        self.queue.add_after(key, max(left, 0.0))

    # --- admission ---------------------------------------------------------------------------

    async def _admit(self, view: GangView, names: Sequence[str]) -> None:
        ctx = self.ctx
        pending = view.pending
        assert pending is not None
        now = ctx.clock.now()
        if view.admitted is not None and view.admitted.id == pending.id:
            record = view.admitted  # finishing an admission a crash interrupted
        else:
            union = list(pending.nodeclaims)
            if view.admitted is not None:
                union += [n for n in view.admitted.nodeclaims if n not in union and n in view.claims]
            record = Record(
                seq=self._next_seq(view),
                attempt=pending.attempt,
                id=pending.id,
                phase=ADMITTED,
                nodeclaims=tuple(union),
                started=pending.started,
                rollbacks=pending.rollbacks,
                last_failure=pending.last_failure,
                admitted_at=now,
                replans=pending.replans,
            )
        wanted = set(names)
        pods = [p for p in view.gated if p.name in wanted]
        # every gate at once: kube-scheduler then binds every member in the same breath
        released = await self._patch_pods(pods, lambda p: ungate_patch(p, record), patch_type="json")
        self._overrides.pop(view.key, None)
        if released == 0:
            self.queue.add_after(view.key, WRITE_RECHECK_SECONDS)
            return
        size = view.size or view.members
        complete = completed_at([*view.gated, *view.released], size)
        seconds = (now - complete).total_seconds() if complete is not None else 0.0
        metrics.ADMISSION_SECONDS.observe(max(0.0, seconds))
        provisioned = (now - pending.started).total_seconds() if pending.started is not None else 0.0
        log.info(
            "gang.admitted",
            gang=view.key,
            attempt=pending.attempt,
            members=released,
            nodeclaims=len(record.nodeclaims),
            seconds_since_complete=round(seconds, 3),
            seconds_since_attempt=round(provisioned, 3),
            rollbacks=pending.rollbacks,
            reason="every NodeClaim of the gang is Initialized; scheduling gates removed together",
        )
        text = (
            f"all {len(record.nodeclaims)} node(s) of gang {view.key} are Initialized; removed the scheduling gate "
            f"from {released} member(s) together (attempt {pending.attempt}, "
            f"{fmt_seconds(provisioned)} after it started)"
        )
        await self._tell(view, "GangAdmitted", text, pods=pods)
        await self._condition(pods, status=True, reason="Admitted", message=text)
        await self._mark_claims(
            view,
            record.nodeclaims,
            status=True,
            reason="GangAdmitted",
            message=f"gang {view.key} is admitted and running on this node: not consolidated while it runs",
        )

    # --- after admission ---------------------------------------------------------------------

    async def _member_lost(self, view: GangView, d: MemberLost) -> None:
        admitted = view.admitted
        assert admitted is not None
        metrics.ROLLBACKS.labels(reason="MemberLost").inc()
        if d.policy == POLICY_RESTART_GANG:
            members = [*view.released, *view.gated]
            text = (
                f"{d.message}; policy {POLICY_RESTART_GANG}: deleting the {len(members)} remaining member(s) so "
                "their controller recreates them and the gang starts again as a unit"
            )
            log.warning("gang.member_lost", gang=view.key, lost=list(d.lost), policy=d.policy, message=d.message)
            await self._tell(view, "GangMemberLost", text, warning=True, pods=members, once=False)

            async def delete(pod: PodView) -> None:
                with contextlib.suppress(NotFoundError):
                    await self.ctx.client.delete(PODS, pod.name, namespace=pod.namespace)

            await asyncio.gather(*(delete(p) for p in members))
            remaining = [n for n in admitted.nodeclaims if n in view.claims and not view.claims[n].deleting]
            await self._mark_claims(view, remaining, status=False, reason="GangMemberLost", message=text)
            return
        # replace-member: the others keep running; a replacement member (gated) is provisioned alone
        record = replace(
            admitted, seq=self._next_seq(view), nodeclaims=tuple(n for n in admitted.nodeclaims if n not in d.lost)
        )
        text = (
            f"{d.message}; policy replace-member: the other members keep running, a replacement member is "
            "provisioned on its own when its pod appears (gated)"
        )
        log.warning("gang.member_lost", gang=view.key, lost=list(d.lost), policy=d.policy, message=d.message)
        await self._patch_pods(view.released, lambda p: record_patch(record))
        await self._tell(view, "GangMemberLost", text, warning=True, pods=view.released, once=False)
