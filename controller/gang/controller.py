"""The gang controller: gated gang pods -> one solve -> NodeClaims under one gang id -> every node
Initialized -> all gates removed together. Or, when anything fails: every NodeClaim deleted, pods
kept gated, retry with backoff.

Each reconcile reads one view of a gang (``reader.py``: its pods, their durable record, its
NodeClaims), asks the pure ``decide`` for the next step and applies it; a step that writes a record
or buys machines is worked out by the pure ``attempt.py`` from the view and the capacity read under
the writer's lock, and applied here as it is (``effects.py`` sends the writes). The writes come back
as watch events that queue the gang again. Plans of different gangs are made one at a time, each
counting the NodeClaims the previous ones created, so two gangs competing for a NodePool's limits
never both get half.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, TypeVar

import structlog

from controller.context import Context
from controller.gang import metrics
from controller.gang.attempt import (
    CannotRebuy,
    Provision,
    Rebuy,
    Release,
    ReplaceMember,
    RestartGang,
    RollBackAttempt,
    lose_member,
    members_missing,
    plan_attempt,
    provision,
    rebuy,
    refused_avoid,
    release,
    roll_back,
)
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
    decide,
    interrupted_admission,
)
from controller.gang.effects import GangEffects
from controller.gang.patches import pin_patch, record_patch, ungate_patch
from controller.gang.planner import NoFit, describe_plan
from controller.gang.podgroups import PodGroupSizes
from controller.gang.reader import GangReader, gang_of_claim
from controller.state.informer import EventType
from controller.state.views import NodeClaimView, Obj, PodView
from controller.state.writer import NewClaim, Written

log = structlog.get_logger()

S = TypeVar("S", PlanAttempt, Replan)

WRITE_RECHECK_SECONDS: Final = 5.0
BLOCKED_RECHECK_SECONDS: Final = 30.0
NEVER_FITS_RECHECK_SECONDS: Final = 300.0


def _admitted_message(key: str) -> str:
    return f"gang {key} is admitted and running on this node: not consolidated while it runs"


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
            gang_timeout_seconds=ctx.settings.gang_timeout_seconds,
            unavailable_ttl_seconds=ctx.settings.unavailable_offering_ttl_seconds,
        )
        self.reader = GangReader(ctx, self.sizes)
        self.effects = GangEffects(ctx, self.queue)
        self._workers = workers
        self._blocked: set[str] = set()
        self._never: dict[str, tuple[Any, ...]] = {}  # gangs that can never fit, and what that depended on
        self._states: dict[str, str] = {}

    # --- wiring ------------------------------------------------------------------------------

    async def run(self) -> None:
        cluster = self.ctx.cluster
        cluster.subscribe_views("Pod", self._on_pod)
        cluster.subscribe_views("NodeClaim", self._on_claim)
        cluster.subscribe("NodePool", self._on_pool)
        await cluster.wait_synced()
        for pod in list(cluster.pod_views()):
            left, _ = self.reader.index(pod)
            if left is not None:
                self.queue.add(left)
        await self.resume_admissions()
        for claim in list(cluster.claim_views().values()):
            gang = gang_of_claim(claim)
            if gang is not None:
                self.queue.add(gang)
        for key in list(self.reader.members):
            self.queue.add(key)
        await self.queue.run(self.reconcile, workers=self._workers)

    async def resume_admissions(self) -> int:
        """Before anything else at start-up: finish every admission the previous controller (or
        leader) left half-done, its gates removed from some members only. Returns how many gangs."""
        resumed = 0
        for key in sorted(self.reader.members):
            view = await self.reader.view(key)
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

    def _on_pod(self, etype: EventType, obj: PodView, old: PodView | None) -> None:
        left, key = self.reader.index(obj, deleted=etype == "DELETED")
        if left is not None:
            self.queue.add(left)
        if key is not None:
            self.queue.add(key)

    def _on_claim(self, etype: EventType, obj: NodeClaimView, old: NodeClaimView | None) -> None:
        gang = gang_of_claim(obj)
        if etype == "DELETED" and gang is not None:
            self.reader.claim_deleted(obj)
        if gang is not None:
            self.queue.add(gang)
        if etype == "DELETED":  # capacity freed: gangs waiting for it may fit now
            for key in list(self._blocked):
                self.queue.add(key)

    def _on_pool(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        for key in list(self._blocked):
            self.queue.add(key)

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
        view = await self.reader.view(key)
        self._set_state(key, view.state())
        await self._apply(view, decide(view, now=self.ctx.clock.now(), knobs=self.knobs))
        if not view.gated and not view.released and not view.claims:
            self._forget(key)
        return None

    def _forget(self, key: str) -> None:
        if not self.reader.forget(key):
            return
        self._blocked.discard(key)
        self._never.pop(key, None)
        self.effects.forget(key)
        self._set_state(key, None)

    async def _apply(self, view: GangView, decision: GangStep) -> None:
        """Apply one step, then wait for the watch events it causes or for a wake-up."""
        key = view.key
        if isinstance(decision, Wait):
            if decision.seconds is not None:
                self.queue.add_after(key, decision.seconds)
            return
        if isinstance(decision, SizeUnknown):
            await self.effects.tell(view, "GangSizeUnknown", decision.message, warning=True)
            log.warning("gang.waiting", gang=key, reason="SizeUnknown", message=decision.message)
            return
        if isinstance(decision, WaitForMembers):
            await self._waiting_for_members(view, decision)
            return
        if isinstance(decision, DeleteClaims):
            await self.effects.delete_claims(view, decision.names, reason=decision.reason, message=decision.message)
            self.queue.add_after(key, WRITE_RECHECK_SECONDS)
            return
        if isinstance(decision, DeleteNodes):
            await self.effects.delete_nodes(view, decision.names)
            self.queue.add_after(key, WRITE_RECHECK_SECONDS)
            return
        if isinstance(decision, PlanAttempt):
            await self._plan(view, decision)
            return
        if isinstance(decision, Pin):
            await self._pin(view, decision)
            self.queue.add_after(key, WRITE_RECHECK_SECONDS)
            return
        if isinstance(decision, Rollback):
            await self._roll_back(view, roll_back(view, decision, now=self.ctx.clock.now(), knobs=self.knobs))
            return
        if isinstance(decision, Replan):
            await self._replan(view, decision)
            return
        if isinstance(decision, Admit):
            await self._release(view, release(view, decision.pods, now=self.ctx.clock.now()))
            return
        if isinstance(decision, MarkAdmitted):
            await self.effects.mark_claims(
                view, decision.names, status=True, reason="GangAdmitted", message=_admitted_message(key)
            )
            return
        if isinstance(decision, MemberLost):
            metrics.ROLLBACKS.labels(reason="MemberLost").inc()
            lost = lose_member(view, decision)
            if isinstance(lost, RestartGang):
                await self._restart_gang(view, lost)
            else:
                await self._replace_member(view, lost)
            return
        if isinstance(decision, MarkFinished):
            await self.effects.mark_claims(
                view,
                decision.names,
                status=False,
                reason="GangFinished",
                message=f"gang {key} has no running member any more: the node may be consolidated",
            )
            log.info("gang.finished", gang=key, nodeclaims=list(decision.names))
            return
        raise AssertionError(f"unhandled gang decision {decision!r}")

    async def _still(self, key: str, step: type[S]) -> tuple[GangView, S] | None:
        """The cache may have moved while we waited for the writer's lock: decide again on fresh
        state. None (the gang queued again) when ``step`` is no longer the one to take."""
        fresh = await self.reader.view(key)
        current = decide(fresh, now=self.ctx.clock.now(), knobs=self.knobs)
        if not isinstance(current, step):
            self.queue.add_after(key, 0)
            return None
        return fresh, current

    # --- before an attempt -------------------------------------------------------------------

    async def _waiting_for_members(self, view: GangView, d: WaitForMembers) -> None:
        if d.warn:
            message = members_missing(view, d, knobs=self.knobs)
            await self.effects.tell(view, "GangWaitingForMembers", message, warning=True)
            log.info("gang.waiting", gang=view.key, reason="MembersMissing", present=d.present, size=d.size)
        else:
            log.debug("gang.waiting", gang=view.key, reason="MembersMissing", present=d.present, size=d.size)
        if d.recheck is not None:
            self.queue.add_after(view.key, d.recheck)

    async def _plan(self, view: GangView, d: PlanAttempt) -> None:
        """Under the writer's lock: read the capacity, solve (``plan_attempt``), and start the attempt
        (``provision``) or say why not."""
        key = view.key
        ctx = self.ctx
        async with ctx.writer.lock:
            still = await self._still(key, PlanAttempt)
            if still is None:
                return
            view = still[0]
            fingerprint = self.reader.fingerprint(view)
            if self._never.get(key) == fingerprint:
                # nothing it depends on changed since it was found never to fit: do not solve again
                self.queue.add_after(key, NEVER_FITS_RECHECK_SECONDS)
                return
            self._never.pop(key, None)
            capacity = await self.reader.inputs(view.gid)
            started = ctx.clock.monotonic()
            solved = plan_attempt(view, capacity, top_up=d.top_up, now=ctx.clock.now(), knobs=self.knobs)
            solve_seconds = ctx.clock.monotonic() - started
            if isinstance(solved, NoFit):
                await self._no_fit(view, solved, fingerprint=fingerprint)
                return
            self._blocked.discard(key)
            step = provision(view, solved, capacity, now=ctx.clock.now(), knobs=self.knobs)
            await self._provision(view, step, solve_seconds=solve_seconds)

    async def _no_fit(self, view: GangView, result: NoFit, *, fingerprint: tuple[Any, ...] = ()) -> None:
        self._blocked.add(view.key)
        fresh = self.effects.news(f"{view.key}#log", ("NoFit", result.reason))
        if result.permanent:
            self._never[view.key] = fingerprint
            await self.effects.tell(
                view, "GangUnschedulable", result.reason + "; no NodeClaim was created", warning=True
            )
            if fresh:
                await self.effects.condition(view.gated, status=False, reason="Unschedulable", message=result.reason)
                log.warning("gang.unschedulable", gang=view.key, reason=result.reason, members=len(view.gated))
            self.queue.add_after(view.key, NEVER_FITS_RECHECK_SECONDS)
        else:
            await self.effects.tell(view, "GangWaitingForCapacity", result.reason)
            if fresh:
                log.info(
                    "gang.waiting", gang=view.key, reason="Capacity", detail=result.reason, members=len(view.gated)
                )
            self.queue.add_after(view.key, BLOCKED_RECHECK_SECONDS)

    async def _create(self, view: GangView, step: Provision | Rebuy) -> list[Written]:
        """The record and the pin on the gated members, and the step's NodeClaims (through the writer,
        which has later plans count them at once), both at the same time: a NodeClaim whose attempt no
        member records (a crash in between) belongs to no attempt, and the next reconcile deletes it."""
        record = step.record
        self.reader.wrote(view.key, record, view.gated)
        self.reader.created(record.id, [str(m["metadata"]["name"]) for _, m in step.claims])
        _, written = await asyncio.gather(
            self.effects.patch_pods(view.gated, lambda p: pin_patch(p, view.gid, record)),
            self.ctx.writer.create([NewClaim(n, m) for n, m in step.claims], reason="gang", attempt=record.id),
        )
        return written

    async def _provision(self, view: GangView, step: Provision, *, solve_seconds: float = 0.0) -> None:
        ctx = self.ctx
        record, plan = step.record, step.result.plan
        # the NodeClaims list every instance type that fits, cheapest first: the launch must skip the
        # offerings earlier attempts failed on, as the plan did (for as long as the plan)
        self.effects.mark_unavailable(step.mark)
        started = ctx.clock.monotonic()
        written = await self._create(view, step)
        write_seconds = ctx.clock.monotonic() - started
        log.info(
            "gang.planned",
            gang=view.key,
            attempt=record.attempt,
            attempt_id=record.id,
            members=len(view.gated),
            nodeclaims=len(step.claims),
            reused=len(step.reused),
            buys=describe_plan(plan),
            same_zone=step.result.same_zone,
            avoided_failed_offerings=step.result.avoided,
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
            attempt=record.attempt,
            nodeclaims=list(record.nodeclaims),
            deadline_seconds=step.timeout_seconds,
            reason="every member placed in one solve; pods stay gated until every NodeClaim is Initialized",
        )
        await self.effects.tell(view, "GangProvisioning", step.text())
        self.queue.add_after(view.key, step.timeout_seconds)

    # --- an attempt in progress ----------------------------------------------------------------

    async def _pin(self, view: GangView, d: Pin) -> None:
        pending = view.pending
        assert pending is not None
        wanted = set(d.pods)
        pods = [p for p in view.gated if p.name in wanted]
        await self.effects.patch_pods(pods, lambda p: pin_patch(p, view.gid, pending))

    async def _roll_back(self, view: GangView, step: RollBackAttempt) -> None:
        d, record = step.rollback, step.record
        # the offerings that failed are avoided by every decider (and by the launch) for a while
        self.effects.mark_unavailable(step.mark)
        # 1. the pods learn first that the attempt is over (a crash after this only leaves claims to delete)
        self.reader.wrote(view.key, record, view.gated)
        await self.effects.patch_pods(view.gated, lambda p: record_patch(record))
        # 2. every NodeClaim of the attempt goes (not those a running part of the gang uses)
        deleted = await self.effects.delete_claims(view, step.doomed, reason="GangRolledBack", message=step.message)
        metrics.ROLLBACKS.labels(reason=d.reason).inc()
        text = step.text(deleted)
        log.warning(
            "gang.rolled_back",
            gang=view.key,
            attempt=record.attempt,
            reason=d.reason,
            failed=list(d.failed),
            message=d.message,
            deleted=deleted,
            rollbacks=record.rollbacks,
            retry_in=step.delay,
            backoff_level=record.level,
            avoid=list(d.avoid),
            avoiding=[a.offering for a in record.avoid],
        )
        await self.effects.tell(view, "GangRolledBack", text, warning=d.backoff, once=False)
        await self.effects.condition(view.gated, status=False, reason="RolledBack", message=text)
        self.queue.add_after(view.key, step.delay if step.delay else WRITE_RECHECK_SECONDS)

    async def _replan(self, view: GangView, d: Replan) -> None:
        """Under the writer's lock: mark what the cloud refused, read the capacity beside the kept
        machines, let ``rebuy`` decide, and apply its step (or the rollback it falls back to)."""
        key = view.key
        ctx = self.ctx
        async with ctx.writer.lock:
            still = await self._still(key, Replan)
            if still is None:
                return
            view, d = still
            now = ctx.clock.now()
            avoid = refused_avoid(view, d, now=now, knobs=self.knobs)
            self.effects.mark_unavailable(a for a in avoid if a.offering in d.rollback.avoid)
            capacity, unreadable = await self.reader.kept_inputs(view, d.kept)
            step = rebuy(view, d, capacity, avoid=avoid, now=now, unreadable=unreadable)
            if isinstance(step, CannotRebuy):
                pending = view.pending
                assert pending is not None
                log.info("gang.replan_failed", gang=key, attempt=pending.attempt, kept=list(d.kept), reason=step.why)
                now = ctx.clock.now()
                await self._roll_back(view, roll_back(view, step.rollback, now=now, knobs=self.knobs))
                return
            written = await self._create(view, step)
        await self._rebought(view, step, written)

    async def _rebought(self, view: GangView, step: Rebuy, written: list[Written]) -> None:
        d, record = step.replan, step.record
        metrics.REPLANS.inc()
        log.warning(
            "gang.replanned",
            gang=view.key,
            attempt=record.attempt,
            replans=record.replans,
            refused=list(d.rollback.failed),
            kept=list(d.kept),
            buys=describe_plan(step.result.plan),
            avoiding=[a.offering for a in record.avoid],
            reason="the cloud refused some NodeClaims for capacity; the machines that launched are kept",
        )
        await self.effects.tell(view, "GangReplanned", step.text(), once=False)
        if any(w.claim is None for w in written):
            self.queue.add_after(view.key, 0)  # the apiserver refused a NodeClaim: the next step says what now
            return
        self.queue.add_after(view.key, step.recheck)

    # --- admission and after -----------------------------------------------------------------

    async def _release(self, view: GangView, step: Release) -> None:
        record = step.record
        # every gate at once: kube-scheduler then binds every member in the same breath
        released = await self.effects.patch_pods(step.pods, lambda p: ungate_patch(p, record), patch_type="json")
        self.reader.cached(view.key)
        if released == 0:
            self.queue.add_after(view.key, WRITE_RECHECK_SECONDS)
            return
        metrics.ADMISSION_SECONDS.observe(max(0.0, step.since_complete))
        log.info(
            "gang.admitted",
            gang=view.key,
            attempt=step.attempt,
            members=released,
            nodeclaims=len(record.nodeclaims),
            seconds_since_complete=round(step.since_complete, 3),
            seconds_since_attempt=round(step.since_started, 3),
            rollbacks=step.rollbacks,
            reason="every NodeClaim of the gang is Initialized; scheduling gates removed together",
        )
        text = step.text(released)
        await self.effects.tell(view, "GangAdmitted", text, pods=step.pods)
        await self.effects.condition(step.pods, status=True, reason="Admitted", message=text)
        await self.effects.mark_claims(
            view, record.nodeclaims, status=True, reason="GangAdmitted", message=_admitted_message(view.key)
        )

    async def _restart_gang(self, view: GangView, step: RestartGang) -> None:
        d = step.lost
        log.warning("gang.member_lost", gang=view.key, lost=list(d.lost), policy=d.policy, message=d.message)
        await self.effects.tell(view, "GangMemberLost", step.text, warning=True, pods=step.pods, once=False)
        await self.effects.delete_pods(step.pods)
        await self.effects.mark_claims(view, step.remaining, status=False, reason="GangMemberLost", message=step.text)

    async def _replace_member(self, view: GangView, step: ReplaceMember) -> None:
        d = step.lost
        log.warning("gang.member_lost", gang=view.key, lost=list(d.lost), policy=d.policy, message=d.message)
        await self.effects.patch_pods(view.released, lambda p: record_patch(step.record))
        await self.effects.tell(view, "GangMemberLost", step.text, warning=True, pods=view.released, once=False)
