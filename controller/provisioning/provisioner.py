"""Pending pods -> solver -> NodeClaims.

Decide, then write: `decide()` reads one consistent view of the cache and returns the solver's
Plan (no writes); `apply()` has the one NodeClaim writer turn the plan's new machines into
NodeClaim objects (the durable record of intent), under the writer's lock held since `decide()`
began, and tells each pod that fits nowhere why, with an Event. The lifecycle
controller launches NodeClaims; kube-scheduler binds the pods. A crash between two writes leaves
NodeClaims that the next solve counts as in-flight capacity, so nothing is bought twice.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import structlog

from controller import metrics
from controller.clock import TokenBucket
from controller.context import Context
from controller.provisioning.batcher import Batcher
from controller.provisioning.nominator import Nominator
from controller.provisioning.pacing import Pacer
from controller.provisioning.places import Places
from controller.scheduling.binding_order import deal_in_order, interleave_zones
from controller.scheduling.bounds import PoolBounds, apply_bounds
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.kubeconv import Unplannable
from controller.scheduling.labels import LABEL_ZONE
from controller.scheduling.model import ExistingNode, NewNodeClaim, NodePoolTemplate, Plan, Pod
from controller.scheduling.resources import sum_resources
from controller.scheduling.solver import solve
from controller.scheduling.tiermix import Bend
from controller.scheduling.tiermix import apply as apply_tier_mix
from controller.scheduling.warm import is_virtual, virtual_pool
from controller.state.buffers import BufferReport
from controller.state.inputs import OfferedPools, machines, manifests, offered_pools, solver_inputs
from controller.state.manifest import nodeclaim_manifest
from controller.state.nodepools import tier_mix
from controller.state.spend import pool_bounds
from controller.state.views import DEFAULT_SCHEDULER, ControllerRef, Obj, PodView
from controller.state.workloads import WORKLOAD_KINDS
from controller.state.writer import NewClaim, Written

log = structlog.get_logger()
RESYNC_SECONDS = 5.0
# a burst still arriving: the longest gap between two of its pods (the ReplicaSet controller's steps)
ARRIVAL_GAP_SECONDS = 3.0
# Events on pods written at once: after a large decision there is one per pod, and they must not
# crowd out the writes that launch the machines
EVENT_CONCURRENCY = 4
# "Nominated" Events on pods, at most this many a second (and this many at once), as Karpenter
# limits its own: a 1,000-pod burst wrote 422 of them (of joiner's 1,513 requests; Karpenter 71)
# while its nominations, which kube-scheduler reads, waited for the same apiserver. The NodeClaim's
# Event and the pod's nomination say where every pod is planned; warnings are never limited.
NOMINATED_EVENTS_PER_SECOND = 5.0
NOMINATED_EVENTS_BURST = 10

PODS_PENDING = metrics.gauge("joiner_pods_pending", "Pods kube-scheduler marked unschedulable, at the last solve.")
PODS_UNSCHEDULABLE = metrics.gauge(
    "joiner_provisioner_unschedulable_pods", "Pending pods that no NodePool could serve at the last solve."
)
TIER_MIX_BENT = metrics.counter(
    "joiner_tier_mix_bent_total",
    "NodeClaims bought as another capacity type than their NodePool's tier mix wanted (spot short, ...).",
    ("nodepool", "wanted", "bought"),
)
SOLVE_SECONDS = metrics.histogram("joiner_provisioner_solve_duration_seconds", "Time the solver took per batch.")
BATCH_SIZE = metrics.histogram(
    "joiner_provisioner_batch_size",
    "Pending pods per solved batch.",
    buckets=(1, 5, 10, 50, 100, 500, 1000, 5000, 20000),
)


@dataclass(frozen=True, slots=True)
class Batch:
    """One decided batch: the pods it was made for, the solver's plan for them, the valid NodePools."""

    plan: Plan
    pending: dict[str, PodView]  # pod key -> pod, the pods this plan was made for
    pools: dict[str, Obj]  # NodePool name -> NodePool, the valid ones
    # pod key -> (Event reason, message) for pods refused by a NodePool's budget or limits.nodes
    refused: dict[str, tuple[str, str]] = field(default_factory=dict)
    bends: tuple[Bend, ...] = ()  # machines bought off their pool's tier mix, and why
    pacer: Pacer | None = None  # the pods of crossed zonal spreads, told at the pace their counts allow


def pacer_of(
    plan: Plan, pods: Sequence[Pod], existing: Sequence[ExistingNode], pending: Mapping[str, Any]
) -> Pacer | None:
    """The pacing of the plan's pending pods (`controller.provisioning.pacing`): each pod's zone, on a
    new NodeClaim or on a node or NodeClaim already there (placed now, or keeping its place)."""
    zone_of: dict[str, str] = {}
    models = {p.key: p for p in pods}
    for node in plan.new_nodes:
        for key in node.pods:
            zone_of[key] = node.choice.zone
    zones = {n.name: n.labels.get(LABEL_ZONE) for n in existing}
    for name, keys in plan.existing_placements.items():
        zone = zones.get(name)
        if zone:
            zone_of.update(dict.fromkeys(keys, zone))
    for n in existing:
        zone = n.labels.get(LABEL_ZONE)
        for pod in n.pods:
            if zone and pod.key in pending:
                zone_of[pod.key] = zone
                models.setdefault(pod.key, pod)
    return Pacer.of({k: p for k, p in models.items() if k in pending}, zone_of)


class Provisioner:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.batcher = Batcher(
            clock=ctx.clock,
            idle_seconds=ctx.settings.batch_idle_seconds,
            max_seconds=ctx.settings.batch_max_seconds,
            arriving=self._scheduler_has_untried_pods,
        )
        # where each pending pod was planned (pod key -> NodeClaim), and for how long it keeps that place
        self.places = Places(ctx)
        # creates the NodeClaims, and counts the ones just created (by anyone) until the cache shows them
        self._writer = ctx.writer
        self._event_tasks: set[asyncio.Task[None]] = set()
        self._untried_timer: asyncio.Task[None] | None = None
        # tells kube-scheduler where each pod was planned (status.nominatedNodeName)
        self.pacer: Pacer | None = None  # of the plan being told
        self.nominator = Nominator(
            ctx,
            nominations=lambda: self.places.nominations,
            claim=self.places.claim,
            told=self.places.told,
            pacer=lambda: self.pacer,
        )
        self._buffers_seen: dict[str, BufferReport | None] = {}  # pool -> the buffer report last acted on
        # when the last pod kube-scheduler had not tried arrived, per workload that made it (None: a pod
        # whose maker the cache cannot count, see `controller.state.workloads`), or the workload was
        # made or resized
        self._arrivals: dict[ControllerRef | None, float] = {}
        self._workload_listeners = {kind: functools.partial(self._on_workload, kind) for kind in sorted(WORKLOAD_KINDS)}
        self._nominated_events = TokenBucket(ctx.clock, rate=NOMINATED_EVENTS_PER_SECOND, burst=NOMINATED_EVENTS_BURST)

    # --- triggers --------------------------------------------------------------------------
    def _on_pod(self, etype: str, pod: PodView, old: PodView | None) -> None:
        if etype == "DELETED":
            return
        if pod.node_name and old is not None and not old.node_name:
            self.places.bound()
        if pod.is_unschedulable:
            if old is not None and old.awaits_scheduler and self._may_plan_untried(old):
                # kube-scheduler's first verdict on a pod the open batch plans anyway once it waited
                # --plan-untried-after: in a burst these come for seconds after the last pod arrived
                # (one every few milliseconds), and each would keep the batch open
                self.batcher.poke()
            else:
                self.batcher.trigger()
        elif etype == "ADDED" and self._may_plan_untried(pod):
            owner = pod.controller if pod.controller is not None and pod.controller.kind in WORKLOAD_KINDS else None
            self._arrivals[owner] = self.ctx.clock.monotonic()
            self._arm_untried()

    def _on_workload(self, kind: str, etype: str, obj: Obj, old: Obj | None) -> None:
        """A ReplicaSet, StatefulSet or Job made or resized: its pods are on their way (the first may
        not have arrived yet when the ones of a Deployment applied with it already have)."""
        meta = obj.get("metadata") or {}
        if etype == "DELETED" or (
            old is not None and (old.get("metadata") or {}).get("generation") == meta.get("generation")
        ):
            return  # a status write: not a new size
        namespace, name, uid = (str(meta.get(k) or "") for k in ("namespace", "name", "uid"))
        owner = ControllerRef(kind, namespace, name, uid)
        if self.ctx.cluster.workload_complete(owner) is False:
            self._arrivals[owner] = self.ctx.clock.monotonic()

    def _may_plan_untried(self, pod: PodView) -> bool:
        return (
            self.ctx.settings.plan_untried_after_seconds is not None
            and pod.awaits_scheduler
            and pod.scheduler_name == DEFAULT_SCHEDULER
            and not pod.is_daemon
        )

    def _arm_untried(self) -> None:
        """Look again once a pod kube-scheduler has not reached yet may be planned (one timer at a time)."""
        if self._untried_timer is not None and not self._untried_timer.done():
            return
        after = self.ctx.settings.plan_untried_after_seconds or 0.0

        async def fire() -> None:
            await self.ctx.clock.sleep(after + 0.05)
            # an open batch plans them when it closes (it waits while a burst is arriving); one that
            # closes first leaves the timer to be armed again (`_rearm_untried`)
            self.batcher.poke()

        self._untried_timer = asyncio.create_task(fire(), name="provisioner-untried")

    def _provisionable(self, pod: PodView, now: datetime) -> bool:
        """Marked unschedulable by kube-scheduler, or (see ``plan_untried_after_seconds``) waiting for
        it longer than that: in a large burst kube-scheduler takes minutes to try every pod, and the
        solver places the ones that fit on existing or in-flight capacity there, buying nothing."""
        if pod.is_daemon or self._preempting(pod):
            return False
        if pod.is_unschedulable:
            return True
        after = self.ctx.settings.plan_untried_after_seconds
        if after is None or not self._may_plan_untried(pod):
            return False
        created = pod.created
        if created is not None and (now - created).total_seconds() >= after:
            return True
        # the whole burst of its workload is in: no reason to wait for kube-scheduler to reach it
        return pod.controller is not None and self.ctx.cluster.workload_complete(pod.controller) is True

    def _preempting(self, pod: PodView) -> bool:
        """kube-scheduler nominated the pod to a Node where it preempts lower-priority pods: it binds
        there once they are gone, and the pods it evicts are provisioned for as they come back
        pending. A nomination of joiner's own (its plan's Node) is not one."""
        name = pod.nominated_node_name
        if not name or self.nominator.wrote(pod.key) == name or self.nominator.desired(pod.key) == name:
            return False
        planned = self.places.nominations.get(pod.key)
        if planned is not None and name == planned:
            return False
        return name in self.ctx.cluster.node_views()

    def _rearm_untried(self) -> None:
        """After a batch: pods kube-scheduler has not tried that the batch could not plan yet (too
        fresh) get the timer again, which the open batch did not need."""
        now = self.ctx.clock.now()
        if any(self._may_plan_untried(p) and not self._provisionable(p, now) for p in self.ctx.cluster.pod_views()):
            self._arm_untried()

    def _on_capacity_change(self, etype: str, obj: Obj, old: Obj | None) -> None:
        # a NodeClaim that went away (insufficient capacity, timeout), or a NodePool or NodeClass
        # whose spec changed, may leave pods that need a new decision; status writes (the NodePool
        # status controller's, on every launch) do not
        if (
            etype == "DELETED"
            or old is None
            or (
                obj.get("kind") != "NodeClaim"
                and obj["metadata"].get("generation") != old["metadata"].get("generation")
            )
        ):
            self.batcher.trigger()

    def _on_buffer(self, pool: str) -> None:
        # a warm buffer that came short (a pod took warm room, a window opened) needs a decision
        report = self.ctx.buffers.report(pool)
        if report is not self._buffers_seen.get(pool):
            self._buffers_seen[pool] = report
            if report is not None and report.missing:
                self.batcher.trigger()

    def _scheduler_has_untried_pods(self) -> bool:
        """More of the burst is on its way: a quiet second must not close the batch yet.

        While untried pods are planned (``plan_untried_after_seconds``): a workload whose pods
        kube-scheduler has not tried yet arrived within the last ``ARRIVAL_GAP_SECONDS`` (or the
        untried wait, if longer), as this process saw them arrive, still lacks pods (its owner's
        count, :mod:`controller.state.workloads`), or cannot be counted (a bare pod, a kind not
        watched). The ReplicaSet controller creates a burst in steps (1, 2, 4, ... pods, each once
        the last is seen), up to two seconds apart on a loaded machine. Once every workload of the
        burst holds all its pods, and none of its pods came within the idle period (a workload
        applied with it may not have its ReplicaSet yet), the batch may close, however far behind
        kube-scheduler is (at 1,000 pods it had tried 600 of them 6 s after the last was created,
        and the batch used to wait for it to the 10 s maximum), and it plans their untried pods at
        once. One that cannot be counted is waited for until it was quiet for the gap. Creation
        times have a one-second resolution, so the watch's arrival is used: closing once the last
        pod's ``creationTimestamp`` was 2 s old split a burst in two plans.

        Without planning untried pods: pods created within the last batch window that kube-scheduler
        has not tried yet. (Older ones belong to a scheduler that is not running; they must not hold
        every batch open.)"""
        after = self.ctx.settings.plan_untried_after_seconds
        if after is not None:
            gap = max(ARRIVAL_GAP_SECONDS, after + 0.5)
            mono = self.ctx.clock.monotonic()
            arriving = False
            for owner, at in list(self._arrivals.items()):
                if mono - at >= gap:
                    del self._arrivals[owner]  # quiet for longer than any step of a burst: it is in
                elif owner is None or self.ctx.cluster.workload_complete(owner) is not True:
                    arriving = True
                elif mono - at < self.ctx.settings.batch_idle_seconds:
                    # all in, but only just: another workload applied with it may not exist yet
                    # (its Deployment's ReplicaSet comes a moment later on a busy apiserver)
                    arriving = True
            return arriving
        now = self.ctx.clock.now()
        window = self.ctx.settings.batch_max_seconds + 1.0
        for pod in self.ctx.cluster.pod_views():
            if pod.awaits_scheduler:
                created = pod.created
                if created is not None and (now - created).total_seconds() <= window:
                    return True
        return False

    async def run(self) -> None:
        cluster = self.ctx.cluster
        cluster.subscribe_views("Pod", self._on_pod)
        cluster.subscribe_views("Node", self.places.on_node)
        cluster.subscribe("NodeClaim", self._on_capacity_change)
        cluster.subscribe("NodePool", self._on_capacity_change)
        cluster.subscribe("KWOKNodeClass", self._on_capacity_change)
        cluster.subscribe("EC2NodeClass", self._on_capacity_change)
        cluster.subscribe("GCENodeClass", self._on_capacity_change)
        cluster.subscribe("AKSNodeClass", self._on_capacity_change)
        for kind, listener in self._workload_listeners.items():
            cluster.subscribe(kind, listener)
        self.ctx.buffers.subscribe(self._on_buffer)
        await cluster.wait_synced()
        self.batcher.trigger()  # pods that were pending before we started
        resync = asyncio.create_task(self._resync(), name="provisioner-resync")
        nominator = asyncio.create_task(self.nominator.run(), name="provisioner-nominator")
        try:
            while True:
                opened = await self.batcher.wait()
                log.debug("provisioner.batch_closed", open_seconds=round(opened, 3))
                await self.reconcile()
                self._rearm_untried()
        finally:
            resync.cancel()
            nominator.cancel()

    async def _resync(self) -> None:
        """Look again every few seconds while pods stay pending: a pod kube-scheduler gave up on produces no new event,
        yet its nomination may have expired or the capacity it was counted on may have gone."""
        while True:
            await self.ctx.clock.sleep(RESYNC_SECONDS)
            now = self.ctx.clock.now()
            if any(self._provisionable(p, now) for p in self.ctx.cluster.pod_views()):
                self.batcher.trigger()

    async def reconcile(self) -> Plan | None:
        async with self._writer.lock:
            decision = await self.decide()
            try:
                if decision is not None:
                    if self.nominator.enabled:
                        self.ctx.planned.begin()  # its Nodes stay closed until their pods are known
                    await self.apply(decision)
                else:  # nothing pending to plan: no pool refuses anything
                    self.ctx.refusals.record(pools=self.ctx.cluster.nodepools(), unschedulable={})
            finally:
                self.ctx.planned.publish(self.places.nominations if self.nominator.enabled else {})
            self.nominator.sync()  # the plan may have moved pods, released or made nominations
            return decision.plan if decision is not None else None

    # --- decide ----------------------------------------------------------------------------
    async def decide(self) -> Batch | None:
        cluster = self.ctx.cluster
        await cluster.wait_synced()
        now = self.ctx.clock.now()
        # a ProvisioningRequest's pods that its booking placed are its own to nominate, not planned again
        booked = self.ctx.bookings.claimed_pods(now)
        pending_objs = {p.key: p for p in cluster.pod_views() if p.key not in booked and self._provisionable(p, now)}
        PODS_PENDING.set(sum(1 for p in pending_objs.values() if p.is_unschedulable))
        buffer_pods = self.ctx.buffers.pods()
        if not pending_objs and not buffer_pods:
            PODS_UNSCHEDULABLE.set(0)
            return None
        pods: list[Pod] = []
        unreadable: dict[str, str] = {}  # told to the pod as FailedProvisioning, like an unschedulable one
        for key, obj in pending_objs.items():
            try:
                pods.append(cluster.scheduling_pod(obj))
            except Unplannable as err:
                # kube-scheduler would place it on no node joiner buys (a claim not bound, ...): no node helps
                log.info("provisioner.pod_not_plannable", pod=key, reason=str(err))
                unreadable[key] = f"joiner cannot provision this pod: {err}"
            except ValueError as err:
                log.warning("provisioner.pod_unreadable", pod=key, error=str(err))
                unreadable[key] = f"joiner cannot provision this pod: {err}"
        pools = await offered_pools(cluster, self.ctx.cloud, component="provisioner")
        # the machines (with the ones just created); the room booked for ProvisioningRequests' pods
        # still to come counts as taken
        existing = self.ctx.bookings.hold(machines(cluster, pools, in_flight=self._writer.in_flight()), now)
        self.places.adopt(pending_objs)  # the first decision of this process keeps an earlier one's places
        pods, existing = self.places.with_nominations(pods, existing, live=set(pending_objs))
        buffer_pods = [p for p in buffer_pods if virtual_pool(p) in pools]
        if not pods and not unreadable and not buffer_pods:
            return None
        inputs = solver_inputs(
            cluster, pools, existing=existing, unavailable=self.ctx.unavailable.current(), component="provisioner"
        )
        templates, daemons, unavailable = inputs.templates, inputs.daemons, inputs.unavailable
        all_types = dict(inputs.instance_types)
        started = time.perf_counter()
        plan = solve(
            pods=pods,
            node_pools=templates,
            existing_nodes=existing,
            daemon_pods=daemons,
            unavailable=unavailable,
        )
        if buffer_pods:
            plan = self._with_buffer(
                plan,
                buffer_pods=buffer_pods,
                pods=pods,
                templates=templates,
                existing=existing,
                daemons=daemons,
                unavailable=unavailable,
                types=all_types,
            )
        mixes = {name: mix for name, (pool, _) in pools.items() if (mix := tier_mix(pool.raw)) is not None}
        plan, bends = apply_tier_mix(plan, mixes=mixes, existing=existing, instance_types=all_types)
        bounded = apply_bounds(plan, self._bounds(pools, plan, all_types))
        # written zone by zone in turn, and a spread kind's pods dealt in the order kube-scheduler binds them
        plan = replace(bounded.plan, new_nodes=tuple(interleave_zones(bounded.plan.new_nodes)))
        plan = deal_in_order(
            plan, {p.key: p for p in pods}, self.nominator.rank, existing={n.name: n.labels for n in existing}
        )
        pacer = pacer_of(plan, pods, existing, pending_objs)
        self._report_buffers(plan, buffer_pods)
        elapsed = time.perf_counter() - started
        SOLVE_SECONDS.observe(elapsed)
        BATCH_SIZE.observe(len(pods))
        PODS_UNSCHEDULABLE.set(sum(1 for k in plan.unschedulable if not is_virtual(k)))
        log.info(
            "provisioner.solved",
            pods=len(pods),
            new_nodeclaims=len(plan.new_nodes),
            on_existing=sum(len(v) for v in plan.existing_placements.values()),
            unschedulable=len(plan.unschedulable),
            price_per_hour=round(plan.total_price, 4),
            seconds=round(elapsed, 4),
        )
        if unreadable:
            plan = replace(plan, unschedulable={**plan.unschedulable, **unreadable})
        refused = {k: why for k, why in bounded.refused.items() if not is_virtual(k)}
        return Batch(
            plan=plan,
            pending=pending_objs,
            pools=manifests(pools),
            refused=refused,
            bends=tuple(bends),
            pacer=pacer,
        )

    # --- warm buffers and bounds ------------------------------------------------------------
    def _with_buffer(
        self,
        plan: Plan,
        *,
        buffer_pods: Sequence[Pod],
        pods: Sequence[Pod],
        templates: Sequence[NodePoolTemplate],
        existing: Sequence[ExistingNode],
        daemons: Sequence[Pod],
        unavailable: frozenset[tuple[str, str, str]],
        types: dict[str, InstanceType],
    ) -> Plan:
        """The real pods' plan, then the warm buffers' placeholders planned on what it leaves: room on
        existing and in-flight nodes the real pods do not take first, then new NodeClaims (after the
        real pods' ones, so limits and budgets serve real pods first)."""
        by_key = {p.key: p for p in pods}
        taken = {name: [by_key[k] for k in keys if k in by_key] for name, keys in plan.existing_placements.items()}
        after = [replace(n, pods=(*n.pods, *taken[n.name])) if taken.get(n.name) else n for n in existing]
        bought: dict[str, list[NewNodeClaim]] = {}
        for node in plan.new_nodes:
            bought.setdefault(node.node_pool, []).append(node)
        pools = []
        for t in templates:
            extra = [
                types[n.choice.instance_type].capacity
                for n in bought.get(t.name, ())
                if n.choice.instance_type in types
            ]
            pools.append(replace(t, usage=t.usage + sum_resources(extra)) if extra else t)
        warm = solve(
            pods=buffer_pods, node_pools=pools, existing_nodes=after, daemon_pods=daemons, unavailable=unavailable
        )
        start = len(plan.new_nodes)
        refills = tuple(replace(n, name=f"{n.name}-buffer", index=start + i) for i, n in enumerate(warm.new_nodes))
        return replace(
            plan,
            new_nodes=(*plan.new_nodes, *refills),
            unschedulable={**plan.unschedulable, **warm.unschedulable},
            total_price=plan.total_price + warm.total_price,
        )

    def _bounds(self, pools: OfferedPools, plan: Plan, types: dict[str, InstanceType]) -> dict[str, PoolBounds]:
        """Each pool's budget and limits.nodes, with what its NodeClaims (cached, just created) hold."""
        wanted = {node.node_pool for node in plan.new_nodes}
        claims = [*self.ctx.cluster.claim_views().values(), *self._writer.in_flight()]
        return pool_bounds({name: pools[name].view.raw for name in wanted}, claims, types)

    def _report_buffers(self, plan: Plan, buffer_pods: Sequence[Pod]) -> None:
        """Tell the book which pools' buffers could not be completed, and why (the first reason)."""
        short: dict[str, str] = {}
        for pod in buffer_pods:
            why = plan.unschedulable.get(pod.key)
            if why is not None:
                short.setdefault(virtual_pool(pod), why)
        for pool in {virtual_pool(p) for p in buffer_pods}:
            self.ctx.buffers.set_limited(pool, short.get(pool))

    # --- write -----------------------------------------------------------------------------
    async def apply(self, decision: Batch) -> list[Obj]:
        """Write the plan's NodeClaims (under the writer's lock, held since deciding), then tell the
        pods, off the critical path."""
        self.pacer = decision.pacer
        requests = [
            NewClaim(node, nodeclaim_manifest(node, decision.pools[node.node_pool]))
            for node in decision.plan.new_nodes
            if not all(is_virtual(k) for k in node.pods)
        ]
        refills = [
            NewClaim(node, nodeclaim_manifest(node, decision.pools[node.node_pool]))
            for node in decision.plan.new_nodes
            if all(is_virtual(k) for k in node.pods)
        ]
        written = (
            await self._writer.create(requests, reason="provisioning", on_written=self._written) if requests else []
        )
        if refills:  # the warm buffers' machines
            written += await self._writer.create(refills, reason="capacity")
        created: list[Obj] = []
        created_names: dict[str, str] = {}
        events: list[tuple[PodView, str, str, bool]] = []
        for outcome in written:
            claim = outcome.claim
            if claim is None:
                continue
            node = outcome.request.node
            name = claim["metadata"]["name"]
            created.append(claim)
            created_names[node.name] = name
            message = (
                f"Pod should schedule on nodeclaim/{name} "
                f"({node.choice.instance_type}, {node.choice.zone}, {node.choice.capacity_type})"
            )
            events += [(pod, "Nominated", message, False) for k in node.pods if (pod := decision.pending.get(k))]
        self.ctx.refusals.record(
            pools=decision.pools,
            unschedulable={k: v for k, v in decision.plan.unschedulable.items() if k in decision.pending},
        )
        for key, reason in decision.plan.unschedulable.items():
            pod = decision.pending.get(key)
            if pod is None:
                continue
            event_reason = decision.refused[key][0] if key in decision.refused else "FailedProvisioning"
            log.info("provisioner.pod_unschedulable", pod=key, reason=reason, event_reason=event_reason)
            events.append((pod, event_reason, reason, True))
        self.places.nominate(decision.plan, created_names)
        await self._tell_bends(decision, created_names)
        if events:
            task = asyncio.create_task(self._tell(events), name="provisioner-events")
            self._event_tasks.add(task)
            task.add_done_callback(self._event_tasks.discard)
        return created

    def _written(self, outcome: Written) -> None:
        """A NodeClaim of the plan being written was created: with reservations on, its pods are
        published at once, so they get its toleration and its Node opens reserved to them while the
        plan's other NodeClaims are still being written (a GPU burst's 156 took 6 s on the race's
        2-core cluster)."""
        if outcome.claim is None or not self.ctx.planned.reserve:
            return
        name = outcome.claim["metadata"]["name"]
        keys = [key for key in outcome.request.node.pods if not is_virtual(key)]
        for key in keys:
            self.places.nominations[key] = name
            self.nominator.queue.add(key)
        self.ctx.planned.add(name, keys)

    async def _tell_bends(self, decision: Batch, created: dict[str, str]) -> None:
        """Each NodeClaim bought off its pool's tier mix: a metric, a log line, an Event on the NodePool."""
        for bend in decision.bends:
            name = created.get(bend.node)
            if name is None:
                continue
            TIER_MIX_BENT.labels(bend.node_pool, bend.wanted, bend.bought).inc()
            log.info(
                "provisioner.tier_mix_bent",
                nodepool=bend.node_pool,
                nodeclaim=name,
                wanted=bend.wanted,
                bought=bend.bought,
                why=bend.why,
            )
            pool = decision.pools.get(bend.node_pool)
            if pool is not None:
                message = (
                    f"nodeclaim/{name} bought as {bend.bought} where the tier mix wanted {bend.wanted}: {bend.why}"
                )
                await self.ctx.events.emit(pool, reason="TierMixBent", message=message, type="Warning")

    def _still_pending(self, pod: PodView) -> bool:
        current = self.ctx.cluster.pod_view(pod.key)
        return current is not None and not current.node_name and not current.deleting and not current.is_terminal

    async def _tell(self, events: list[tuple[PodView, str, str, bool]]) -> None:
        """Events on the pods: the decision is already written, so these never hold up the next batch."""
        limit = asyncio.Semaphore(EVENT_CONCURRENCY)

        async def emit(pod: PodView, reason: str, message: str, warning: bool) -> None:
            async with limit:
                if not self._still_pending(pod):
                    return  # "should schedule on ..." says nothing once it has (a large burst can outpace us)
                if not warning and reason == "Nominated" and not self._nominated_events.take():
                    return
                await self.ctx.events.emit(
                    pod.raw, reason=reason, message=message, type="Warning" if warning else "Normal"
                )

        await asyncio.gather(*(emit(*event) for event in events))
