"""The disruption controller: decides which NodeClaims to give back, and carries the decisions out.

Every ``--disruption-poll-interval`` seconds a pass builds a snapshot of the cache, lets the pure
planner (:mod:`controller.disruption.planner`) pick at most one command, refreshes the NodeClaim
conditions (``Consolidatable``, ``Drifted``, ``status.lastPodEventTime``) and tells the user what is
held back and why. Each command then runs as its own task (the command queue):

1. consolidations (Empty, Underutilized) wait ``--disruption-validation-delay`` seconds;
2. the command is validated again on a fresh snapshot (budgets, stability, safety, simulation);
3. its NodeClaims get the ``DisruptionReason`` condition and a ``Disrupting`` Event (NodeClaim and
   Node);
4. replacements are created through the one NodeClaim writer, under its lock (held from step 2 on
   when the command may buy any, so no other decision spends the same NodePool limit room), and
   must all reach ``Initialized``; if one fails or times out, the command is dropped, the
   replacements nobody uses are deleted, and nothing is drained;
5. just before acting, the candidates' pods must still fit on the remaining nodes and the
   replacements;
6. the candidates are deleted; the termination controller taints, drains (Eviction API, PDBs
   honoured) and removes them.

NodeClaims held by a running command count against their NodePool's budget and are left out of
later passes; replacements are left alone for a grace period after their command finished, so
the evicted pods have time to land on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any, Final, Literal

import structlog

from api.v1.conditions import CONSOLIDATABLE, DRIFTED, INITIALIZED
from api.v1.types import format_duration
from controller.clock import format_time, parse_time
from controller.context import Context
from controller.disruption import metrics
from controller.disruption.budgets import REASON_DRIFTED, REASON_EMPTY, REASON_EXPIRED, REASON_UNDERUTILIZED, REASONS
from controller.disruption.model import Command, Decision, Snapshot
from controller.disruption.planner import DEFAULT_OPTIONS, Options, plan, validate
from controller.disruption.quiet import node_signature, offerings_signature, quiet_until
from controller.disruption.safety import movable
from controller.disruption.snapshot import Memory, build_snapshot
from controller.kube.client import ConflictError, InvalidError, NotFoundError
from controller.kube.resources import NODECLAIMS
from controller.state.deletion import delete_nodeclaim, termination_reason
from controller.state.informer import EventType
from controller.state.manifest import nodeclaim_manifest
from controller.state.patches import ConditionUpdate, claim_status, matches
from controller.state.queue import RECONCILE_ERRORS
from controller.state.views import NodeClaimView, Obj, PodView
from controller.state.writer import CreateReason, NewClaim

log = structlog.get_logger()

DISRUPTION_REASON: Final = "DisruptionReason"
"""NodeClaim condition: True (reason Empty, Underutilized, Drifted or Expired) once a command picked it."""
ANNOTATION_REPLACEMENT_FOR: Final = "joiner.sh/disruption-replacement-for"
"""On a NodeClaim disruption created: the NodeClaims it replaces."""
REPLACEMENT_POLL_SECONDS: Final = 1.0
REPLACEMENT_GRACE_SECONDS: Final = 60.0
BLOCKED_EVENT_REPEAT_SECONDS: Final = 300.0
_FOREVER: Final = timedelta(days=3650)

CREATE_REASONS: Final[Mapping[str, CreateReason]] = {
    REASON_EMPTY: "consolidation",
    REASON_UNDERUTILIZED: "consolidation",
    REASON_DRIFTED: "drift",
    REASON_EXPIRED: "expiration",
}
"""Why the NodeClaim writer creates a command's replacements."""

LOG_EVENTS: Final = {
    REASON_EMPTY: "disruption.emptied",
    REASON_UNDERUTILIZED: "disruption.consolidated",
    REASON_DRIFTED: "disruption.drifted",
    REASON_EXPIRED: "disruption.expired",
}


# While pods land on a node (a burst binds them over minutes), each new pod moved lastPodEventTime
# and the PodsChanged message, and each pass wrote them: 1-2 NodeClaim status writes per machine, a
# few milliseconds of apiserver CPU each. Such a write, which changes no condition's status or reason,
# is held while the recorded time is less than this old: the controller decides from its own memory
# and from the pods' binding times, so what it holds back is only what a restart within the window
# would forget of a pod that left (stability counted from up to this much earlier).
POD_EVENT_RECORD_SECONDS: Final = 60.0


def coalesced(
    claim: NodeClaimView, updates: Sequence[ConditionUpdate], *, seen: datetime | None, recorded: datetime | None
) -> bool:
    """Whether a status write can wait: it only moves lastPodEventTime (and a condition's message,
    its status and reason unchanged) and the recorded time is under POD_EVENT_RECORD_SECONDS old. Pure."""
    if seen is None or recorded is None or seen.replace(microsecond=0) <= recorded:
        return False  # no newer pod event to hold back: whatever changed is written at once
    if (seen - recorded).total_seconds() >= POD_EVENT_RECORD_SECONDS:
        return False
    for update in updates:
        cond = claim.condition(update.type)
        if cond is None or (cond.status, cond.reason) != (update.status, update.reason):
            return False
    return True


class DisruptionController:
    def __init__(self, ctx: Context, *, options: Options = DEFAULT_OPTIONS, offload: bool = True) -> None:
        self.ctx = ctx
        self.options = options
        self.offload = offload  # plan in a worker thread, so a long pass never stalls the event loop
        self.pod_events: dict[str, datetime] = {}  # Node name -> last pod bound to or removed from it
        self.last_bind: datetime | None = None  # when a pod was last bound to any node
        self.active: dict[str, Command] = {}  # NodeClaim -> the command holding it
        self.protected: dict[str, datetime] = {}  # replacement NodeClaim -> left alone until
        self.running: set[asyncio.Task[None]] = set()
        self._announced: dict[tuple[str, str], tuple[str, float]] = {}
        ctx.cluster.subscribe_views("Pod", self._on_pod)  # here, not in run(): a restarted run() must not add a second
        # passes over a cluster at rest are skipped (controller/disruption/quiet.py): count changes
        self.changes = 0
        self._pass_changes = -1  # `changes` when the last pass started
        self._quiet_until: datetime | None = None
        self._pass_offerings: frozenset[Any] = frozenset()
        kinds = ("NodeClaim", "NodePool", "KWOKNodeClass", "EC2NodeClass", "GCENodeClass", "AKSNodeClass")
        for kind in (*kinds, "DaemonSet", "PodDisruptionBudget"):
            ctx.cluster.subscribe(kind, self._on_change)
        ctx.cluster.subscribe("Node", self._on_node)

    # --- wiring ------------------------------------------------------------------------------

    async def run(self) -> None:
        cluster = self.ctx.cluster
        await cluster.wait_synced()
        await self.recover()
        RECONCILE_ERRORS.labels("disruption")  # served at 0 from the start
        try:
            while True:
                try:
                    if self.due():
                        await self.reconcile()
                    else:
                        metrics.PASSES_SKIPPED.inc()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("disruption.pass_failed")
                    RECONCILE_ERRORS.labels("disruption").inc()
                await self.ctx.clock.sleep(self.ctx.settings.disruption_poll_interval_seconds)
        finally:
            for task in list(self.running):
                task.cancel()

    async def recover(self) -> None:
        """Commands live in memory: after a restart, finish what the objects say was under way.

        A replacement (annotation ``joiner.sh/disruption-replacement-for``) is left alone for as long
        as it may still take to come up, plus the grace its pods get to land, so a pass does not take
        it for an empty node. A NodeClaim still marked ``DisruptionReason=True`` and not being deleted
        lost its command: the mark is cleared (reason ``Interrupted``), and the next pass decides
        afresh, counting the replacement as the capacity it is."""
        now = self.ctx.clock.now()
        settings = self.ctx.settings
        coming_up = timedelta(
            seconds=settings.launch_timeout_seconds
            + settings.registration_timeout_seconds
            + settings.initialization_timeout_seconds
        )
        grace = timedelta(seconds=REPLACEMENT_GRACE_SECONDS)
        claims = self.ctx.cluster.claim_views()
        for name, claim in claims.items():
            if claim.deleting or name in self.protected:
                continue
            if claim.annotations.get(ANNOTATION_REPLACEMENT_FOR):
                self.protected[name] = now + grace + (timedelta(0) if claim.initialized else coming_up)
                log.info(
                    "disruption.replacement_recovered",
                    nodeclaim=name,
                    protected_until=format_time(self.protected[name]),
                )
        for name, claim in claims.items():
            if claim.deleting or name in self.active or not claim.is_true(DISRUPTION_REASON):
                continue
            why = "the controller restarted before the command finished; the next pass decides again"
            await self._write_status(claim, [ConditionUpdate(DISRUPTION_REASON, "False", "Interrupted", why)])
            log.info("disruption.command_interrupted", nodeclaim=name)

    def _on_change(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        self.changes += 1

    def _on_node(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        if etype != "MODIFIED" or old is None or node_signature(obj) != node_signature(old):
            self.changes += 1

    def due(self) -> bool:
        """Whether a pass may find something the last one did not: the cluster changed, a running
        command holds nodes, an offering's unavailability changed, or a time threshold came."""
        if self.changes != self._pass_changes or self.running or self._quiet_until is None:
            return True
        if offerings_signature(self.ctx.unavailable.current()) != self._pass_offerings:
            return True
        return self.ctx.clock.now() >= self._quiet_until

    def _on_pod(self, etype: EventType, obj: PodView, old: PodView | None) -> None:
        self.changes += 1
        informer = self.ctx.cluster.informers.get("Pod")
        if informer is None or not informer.synced.is_set() or obj.is_daemon:
            return  # the initial list is not news; pods' own times cover it

        def bound(pod: PodView | None) -> str | None:
            if pod is None or pod.is_terminal:
                return None
            return pod.node_name

        before = bound(old if old is not None else (obj if etype == "DELETED" else None))
        after = None if etype == "DELETED" else bound(obj)
        if before == after:
            return
        now = self.ctx.clock.now()
        for node in (before, after):
            if node:
                self.pod_events[node] = now
        if after:
            self.last_bind = now

    # --- a pass ------------------------------------------------------------------------------

    def memory(self) -> Memory:
        now = self.ctx.clock.now()
        for name, until in list(self.protected.items()):
            if until <= now:
                del self.protected[name]
        return Memory(
            pod_events=dict(self.pod_events),
            active=frozenset(self.active),
            protected=dict(self.protected),
            last_bind=self.last_bind,
        )

    async def snapshot(self) -> Snapshot:
        return await build_snapshot(self.ctx, self.memory())

    async def _plan(self, snap: Snapshot) -> Decision:
        if self.offload:
            return await asyncio.to_thread(plan, snap, self.options)
        return plan(snap, self.options)

    async def reconcile(self) -> Decision:
        """One pass: plan, publish what was found, start the command (if any)."""
        started = self.ctx.clock.monotonic()
        self._pass_changes = self.changes
        self._pass_offerings = offerings_signature(self.ctx.unavailable.current())
        snap = await self.snapshot()
        decision = await self._plan(snap)
        self._quiet_until = quiet_until(snap, decision)
        metrics.PASS_SECONDS.observe(max(0.0, self.ctx.clock.monotonic() - started))
        metrics.SIMULATIONS.inc(decision.simulations)
        self._observe(decision)
        self._forget_gone()
        await self._sync_status(snap)
        await self._announce_blocked(decision)
        for command in decision.commands:
            self.start(command)
        return decision

    def _observe(self, decision: Decision) -> None:
        blocked: dict[str, int] = {}
        for b in decision.blocked:
            blocked[b.reason] = blocked.get(b.reason, 0) + 1
        for reason in REASONS:
            metrics.CANDIDATES.labels(reason).set(decision.eligible.get(reason, 0))
            metrics.BLOCKED.labels(reason).set(blocked.get(reason, 0))
        for (pool, reason), allowed in decision.allowed.items():
            metrics.ALLOWED.labels(pool, reason).set(-1 if allowed is None else allowed)
            for action in ("delete", "replace"):  # served at 0 before the first one, so rate() sees it
                metrics.DECISIONS.labels(pool, reason, action)

    def _forget_gone(self) -> None:
        nodes = self.ctx.cluster.node_views()
        for name in [n for n in self.pod_events if n not in nodes]:
            del self.pod_events[name]
        claims = self.ctx.cluster.claim_views()
        for key in [k for k in self._announced if k[0] not in claims]:
            del self._announced[key]

    # --- visibility --------------------------------------------------------------------------

    async def _sync_status(self, snap: Snapshot) -> None:
        """Consolidatable, Drifted and lastPodEventTime on each NodeClaim, written only on change."""
        claims = self.ctx.cluster.claim_views()
        now = snap.now
        for n in snap.nodes:
            claim = claims.get(n.claim)
            if claim is None or n.deleting:
                continue
            updates: list[ConditionUpdate] = []
            policy = snap.pools.get(n.pool)
            if policy is not None and policy.consolidates and policy.consolidate_after is not None:
                after = policy.consolidate_after
                since = n.stable_since
                if since is None or now - since >= after:
                    updates.append(
                        ConditionUpdate(
                            CONSOLIDATABLE,
                            "True",
                            "Consolidatable",
                            f"no pod was scheduled on or removed from Node {n.node} for consolidateAfter "
                            f"({format_duration(after)})",
                        )
                    )
                else:
                    updates.append(
                        ConditionUpdate(
                            CONSOLIDATABLE,
                            "False",
                            "PodsChanged",
                            f"pods changed on Node {n.node} at {format_time(since)}; a candidate from "
                            f"{format_time(since + after)}",
                        )
                    )
            elif claim.condition(CONSOLIDATABLE) is not None:
                updates.append(
                    ConditionUpdate(
                        CONSOLIDATABLE, "False", "ConsolidationDisabled", "its NodePool's consolidateAfter is Never"
                    )
                )
            if n.drift is not None:
                updates.append(ConditionUpdate(DRIFTED, "True", "Drifted", n.drift))
            elif claim.is_true(DRIFTED):
                updates.append(ConditionUpdate(DRIFTED, "False", "NotDrifted", "it matches its NodePool again"))
            updates = [u for u in updates if not matches(claim, u)]
            extra: Obj = {}
            seen = self.pod_events.get(n.node)
            recorded = parse_time(claim.last_pod_event_time)
            # the field holds whole seconds: compare at that grain, or every pass rewrites it
            if seen is not None and (recorded is None or seen.replace(microsecond=0) > recorded):
                extra["lastPodEventTime"] = format_time(seen)
            if (updates or extra) and not coalesced(claim, updates, seen=seen, recorded=recorded):
                await self._write_status(claim, updates, extra=extra)

    async def _write_status(
        self, claim: NodeClaimView, updates: list[ConditionUpdate], *, extra: Obj | None = None
    ) -> None:
        body = {
            "metadata": {"resourceVersion": claim.resource_version or None},
            "status": {**(extra or {}), **claim_status(claim.raw, updates, now=self.ctx.clock.now())},
        }
        try:
            await self.ctx.client.patch(NODECLAIMS, claim.name, body, subresource="status")
        except (ConflictError, NotFoundError, InvalidError) as err:
            log.debug("disruption.status_not_written", nodeclaim=claim.name, error=str(err))

    async def _announce_blocked(self, decision: Decision) -> None:
        now = self.ctx.clock.monotonic()
        for b in decision.blocked:
            key = (b.claim, b.reason)
            gist = re.sub(r"\d+", "#", b.why)  # counts move all the time; say it again only if the reason does
            last = self._announced.get(key)
            if last is not None and last[0] == gist and now - last[1] < BLOCKED_EVENT_REPEAT_SECONDS:
                continue
            self._announced[key] = (gist, now)
            log.info("disruption.blocked", nodeclaim=b.claim, node=b.node, reason=b.reason, why=b.why)
            message = f"Not disrupted ({b.reason}): {b.why}"
            await self._emit_both(claim_name=b.claim, node_name=b.node, reason="DisruptionBlocked", message=message)

    async def _emit_both(
        self, *, claim_name: str, node_name: str | None, reason: str, message: str, warning: bool = False
    ) -> None:
        kind: Literal["Normal", "Warning"] = "Warning" if warning else "Normal"
        claim = self.ctx.cluster.claim_views().get(claim_name)
        if claim is not None:
            await self.ctx.events.emit(claim.raw, reason=reason, message=message, type=kind)
        node = self.ctx.cluster.node_views().get(node_name) if node_name else None
        if node is not None:
            await self.ctx.events.emit(node.raw, reason=reason, message=message, type=kind)

    # --- the command queue ---------------------------------------------------------------------

    def start(self, command: Command) -> asyncio.Task[None]:
        for claim in command.candidates:
            self.active[claim] = command
        task = asyncio.create_task(self._execute(command), name=f"disruption-{command.candidates[0]}")
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        metrics.ACTIVE.set(len(self.running))
        log.info(
            "disruption.decided",
            reason=command.reason,
            nodeclaims=list(command.candidates),
            replacements=[r.choice.instance_type for r in command.replacements],
            saving_per_hour=round(command.saving, 4),
            pods=len(command.pods),
            detail=command.describe(),
        )
        return task

    async def _execute(self, command: Command) -> None:
        held = command.candidates
        made: list[str] = []
        marked = False
        try:
            settings = self.ctx.settings
            if command.reason in (REASON_EMPTY, REASON_UNDERUTILIZED):
                await self.ctx.clock.sleep(settings.disruption_validation_delay_seconds)
            async with self._deciding(command):
                checked = validate(await self.snapshot(), command, replacements_ready=False, options=self.options)
                if isinstance(checked, str):
                    await self._abort(command, why=checked, made=made, marked=False)
                    return
                command = checked
                for claim in command.candidates:
                    self.active[claim] = command
                await self._mark(command)
                marked = True
                launched = await self._launch(command, made) if command.replacements else None
            if command.replacements:
                why = launched
                if why is None:
                    why = await self._await_initialized(made)
                if why is None:
                    again = validate(await self.snapshot(), command, replacements_ready=True, options=self.options)
                    why = again if isinstance(again, str) else None
                if why is not None:
                    await self._abort(command, why=why, made=made, marked=True)
                    return
            await self._disrupt(command)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.exception("disruption.command_failed", reason=command.reason, nodeclaims=list(command.candidates))
            with contextlib.suppress(Exception):
                await self._abort(command, why=f"unexpected error: {err}", made=made, marked=marked)
        finally:
            for claim in held:
                self.active.pop(claim, None)
            until = self.ctx.clock.now() + timedelta(seconds=REPLACEMENT_GRACE_SECONDS)
            for name in made:
                self.protected[name] = until
            metrics.ACTIVE.set(max(0, len(self.running) - 1))

    def _deciding(self, command: Command) -> AbstractAsyncContextManager[None]:
        """A command that may buy replacements is validated and its replacements written under the
        NodeClaim writer's lock (its snapshot counting every NodeClaim just created), so it never spends
        NodePool limit room that the provisioner or a gang spends at the same time. Emptying only frees room."""
        return contextlib.nullcontext() if command.reason == REASON_EMPTY else self.ctx.writer.lock

    async def _mark(self, command: Command) -> None:
        message = command.describe()
        claims = self.ctx.cluster.claim_views()
        for claim_name, node_name in zip(command.candidates, command.nodes, strict=True):
            claim = claims.get(claim_name)
            if claim is not None:
                await self._write_status(claim, [ConditionUpdate(DISRUPTION_REASON, "True", command.reason, message)])
            await self._emit_both(claim_name=claim_name, node_name=node_name, reason="Disrupting", message=message)

    async def _launch(self, command: Command, made: list[str]) -> str | None:
        """Create the replacements, one after the other, through the NodeClaim writer (whose lock the
        caller holds since validating); None, or why it failed."""
        for node in command.replacements:
            pool = self.ctx.cluster.nodepools().get(node.node_pool)
            if pool is None:
                return f"NodePool {node.node_pool} of a replacement is gone"
            manifest = nodeclaim_manifest(node, pool)
            manifest["metadata"]["annotations"][ANNOTATION_REPLACEMENT_FOR] = ",".join(command.candidates)
            [written] = await self.ctx.writer.create(
                [NewClaim(node, manifest)], reason=CREATE_REASONS[command.reason], replaces=list(command.candidates)
            )
            claim = written.claim
            if claim is None:
                return f"creating a replacement NodeClaim failed: {written.error}"
            name = written.name
            made.append(name)
            self.protected[name] = self.ctx.clock.now() + _FOREVER
            await self.ctx.events.emit(
                claim,
                reason="DisruptionReplacement",
                message=f"Replaces {', '.join(command.candidates)} ({command.reason}); the old node(s) are "
                f"drained once this one is Initialized",
            )
        return None

    async def _await_initialized(self, names: list[str]) -> str | None:
        """Wait until every replacement is Initialized; None, or why one will not be."""
        settings = self.ctx.settings
        limit = (
            settings.launch_timeout_seconds
            + settings.registration_timeout_seconds
            + settings.initialization_timeout_seconds
            + 60.0
        )
        started = self.ctx.clock.monotonic()
        while True:
            claims = self.ctx.cluster.claim_views()
            waiting = []
            for name in names:
                claim = claims.get(name)
                if claim is None:  # not in the cache yet, or gone already: ask the apiserver
                    try:
                        claim = NodeClaimView.of(await self.ctx.client.get(NODECLAIMS, name))
                    except NotFoundError:
                        return f"replacement NodeClaim {name} was deleted before it initialized"
                if claim.deleting:
                    return (
                        f"replacement NodeClaim {name} was deleted before it initialized ({termination_reason(claim)})"
                    )
                if not claim.is_true(INITIALIZED):
                    waiting.append(name)
            if not waiting:
                return None
            if self.ctx.clock.monotonic() - started > limit:
                return f"replacement(s) {', '.join(waiting)} did not initialize within {limit:.0f}s"
            await self.ctx.clock.sleep(REPLACEMENT_POLL_SECONDS)

    async def _disrupt(self, command: Command) -> None:
        claims = self.ctx.cluster.claim_views()
        message = f"Disrupted: {command.describe()}"
        pods = 0
        for claim_name, node_name, pool in zip(command.candidates, command.nodes, command.pools, strict=True):
            claim = claims.get(claim_name)
            if claim is None:
                continue
            moving = len(movable(self.ctx.cluster.pod_views_on_node(node_name)))
            deleted = await delete_nodeclaim(self.ctx, claim, reason=command.reason, message=message, warning=False)
            if not deleted:
                continue
            pods += moving
            metrics.DECISIONS.labels(pool, command.reason, command.action).inc()
            metrics.EVICTED_PODS.labels(command.reason).inc(moving)
            node = self.ctx.cluster.node_views().get(node_name)
            if node is not None:
                await self.ctx.events.emit(node.raw, reason="Disrupted", message=message)
        if command.reason in (REASON_EMPTY, REASON_UNDERUTILIZED) and command.saving > 0:
            metrics.SAVINGS.labels(command.reason).inc(command.saving)
        log.info(
            LOG_EVENTS[command.reason],
            reason=command.reason,
            nodeclaims=list(command.candidates),
            nodes=list(command.nodes),
            nodepools=sorted(set(command.pools)),
            replacements=[r.choice.instance_type for r in command.replacements],
            price_per_hour_before=round(command.old_price, 4),
            price_per_hour_after=round(command.new_price, 4),
            saving_per_hour=round(command.saving, 4),
            pods=pods,
            detail=command.detail,
        )

    async def _abort(self, command: Command, *, why: str, made: Iterable[str], marked: bool) -> None:
        metrics.ABORTED.labels(command.reason).inc()
        log.info(
            "disruption.blocked",
            reason=command.reason,
            nodeclaims=list(command.candidates),
            why=why,
            stage="aborted before draining" if marked else "validation",
        )
        if marked:
            claims = self.ctx.cluster.claim_views()
            for claim_name, node_name in zip(command.candidates, command.nodes, strict=True):
                claim = claims.get(claim_name)
                if claim is not None:
                    await self._write_status(claim, [ConditionUpdate(DISRUPTION_REASON, "False", "Aborted", why)])
                await self._emit_both(
                    claim_name=claim_name,
                    node_name=node_name,
                    reason="DisruptionAborted",
                    message=f"{command.reason} disruption dropped, nothing was drained: {why}",
                    warning=True,
                )
        for name in made:
            claim = self.ctx.cluster.claim_views().get(name)
            if claim is None or claim.deleting:
                continue
            node = self.ctx.cluster.node_view_for_claim(claim)
            if node is not None and movable(self.ctx.cluster.pod_views_on_node(node.name)):
                continue  # pods found it useful meanwhile: keep it, consolidation will judge it later
            await delete_nodeclaim(
                self.ctx,
                claim,
                reason="DisruptionAborted",
                message=f"Replacement no longer needed: {why}",
                warning=False,
            )
            self.protected.pop(name, None)
