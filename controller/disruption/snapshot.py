"""From the cluster cache to a planner :class:`~controller.disruption.model.Snapshot`.

Everything time-dependent is read from the injected clock by the caller and passed in as ``now``.
The cache's dicts are converted here, in the event loop, so the planner (which may run in a
worker thread) only ever sees frozen values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import structlog

from api.v1.conditions import GPU_IDLE, INITIALIZED
from api.v1.labels import (
    ANNOTATION_NODEPOOL_HASH,
    ANNOTATION_PLANNED_PRICE,
    ANNOTATION_REBALANCE_RECOMMENDED,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    TAINT_DISRUPTED,
)
from api.v1.nodepool import DEFAULT_CONSOLIDATE_AFTER
from api.v1.types import parse_duration
from controller.clock import format_time, parse_time
from controller.cloudprovider.types import CloudProviderError
from controller.context import Context
from controller.disruption.budgets import BudgetError, parse_budgets
from controller.disruption.model import WHEN_EMPTY_OR_UNDERUTILIZED, NodeState, PoolPolicy, Snapshot
from controller.disruption.safety import idle_gpu_reclaimable, movable, safety_blockers, unowned_pods
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.kubeconv import Unplannable
from controller.scheduling.model import ExistingNode, Pod
from controller.scheduling.warm import place_buffer, virtual_pool, with_virtual_pods
from controller.state import inputs
from controller.state.bookings import Booking
from controller.state.cluster import ClusterState
from controller.state.existing import existing_node
from controller.state.inputs import OfferedPools, offered_pools
from controller.state.nodepools import nodepool_hash, tier_mix
from controller.state.views import NodeClaimView, NodePoolView, Obj, PodView, StateNode

log = structlog.get_logger()


def pool_policy(pool: Mapping[str, Any]) -> PoolPolicy:
    """A NodePool's disruption settings; unreadable ones give a policy with ``problem`` set."""
    name = str((pool.get("metadata") or {}).get("name") or "")
    disruption = (pool.get("spec") or {}).get("disruption") or {}
    try:
        after = parse_duration(str(disruption.get("consolidateAfter") or DEFAULT_CONSOLIDATE_AFTER))
        budgets = parse_budgets(disruption)
    except (BudgetError, ValueError) as err:
        return PoolPolicy(name=name, problem=f"spec.disruption: {err}")
    return PoolPolicy(
        name=name,
        consolidation_policy=str(disruption.get("consolidationPolicy") or WHEN_EMPTY_OR_UNDERUTILIZED),
        consolidate_after=after,
        budgets=budgets,
        tier_mix=tier_mix(pool),
    )


def offering_price(labels: Mapping[str, str], instance_types: Iterable[InstanceType]) -> float | None:
    """$/hour of the offering a node's labels name (instance type, zone, capacity type)."""
    name = labels.get(LABEL_INSTANCE_TYPE)
    zone = labels.get(LABEL_ZONE)
    capacity_type = labels.get(LABEL_CAPACITY_TYPE)
    for it in instance_types:
        if it.name != name:
            continue
        for offering in it.offerings:
            if offering.zone == zone and offering.capacity_type == capacity_type:
                return offering.price
    return None


def drift_of(claim: NodeClaimView, pool: Mapping[str, Any] | None) -> str | None:
    """Why the NodeClaim no longer matches its NodePool's template, or None.

    NodeClaims made before the hash annotation existed cannot be compared and never drift this way.
    """
    if pool is None:
        return None
    recorded = claim.annotations.get(ANNOTATION_NODEPOOL_HASH)
    if not recorded:
        return None
    current = nodepool_hash(pool)
    if recorded != current:
        return (
            f"NodePool {(pool.get('metadata') or {}).get('name')} spec.template changed since the NodeClaim "
            f"was made (hash {recorded} -> {current})"
        )
    return None


def rebalance_of(claim: NodeClaimView, pool: Mapping[str, Any] | None) -> str | None:
    """Why a recorded EC2 rebalance recommendation makes the NodeClaim drifted, or None: only when
    its NodePool's ``spec.disruption.rebalanceRecommendation`` is ``Replace``."""
    when = claim.annotations.get(ANNOTATION_REBALANCE_RECOMMENDED)
    if pool is None or not when:
        return None
    disruption = ((pool.get("spec") or {}).get("disruption")) or {}
    if not isinstance(disruption, Mapping) or disruption.get("rebalanceRecommendation") != "Replace":
        return None
    return f"EC2 recommended rebalancing the spot instance at {when} (elevated risk of interruption)"


def expiry_of(claim: NodeClaimView) -> datetime | None:
    """creationTimestamp + spec.expireAfter (None for ``Never`` or when unreadable)."""
    created = claim.created
    raw = claim.expire_after
    if created is None or not raw:
        return None
    try:
        after = parse_duration(raw)
    except ValueError:
        return None
    return None if after is None else created + after


def is_pending(pod: PodView) -> bool:
    """Not bound yet, not finished or going away, not held by a scheduling gate, not a daemon pod."""
    return not (pod.node_name or pod.scheduling_gates or pod.deleting or pod.is_terminal or pod.is_daemon)


@dataclass(frozen=True, slots=True)
class Memory:
    """What the controller remembers between passes: last pod event per Node, NodeClaims held by
    running commands, replacements protected until a time."""

    pod_events: Mapping[str, datetime]
    active: frozenset[str]
    protected: Mapping[str, datetime]
    last_bind: datetime | None = None  # when kube-scheduler last bound a pod (seen by the watch)


# kube-scheduler is "working through a backlog" when it bound a pod this recently and some pending pod
# is at most BACKLOG_POD_AGE old (a pod kube-scheduler keeps refusing does not hold consolidation off
# for ever while other pods come and go)
BINDING_WINDOW = timedelta(seconds=15)
BACKLOG_POD_AGE = timedelta(minutes=10)


def scheduler_backlog(now: datetime, last_bind: datetime | None, pending: Iterable[PodView]) -> bool:
    """kube-scheduler bound a pod within ``BINDING_WINDOW`` and a pending pod is younger than
    ``BACKLOG_POD_AGE``: the pods waiting may well land on the nodes that exist, so moving pods
    off those nodes (consolidation) waits, and so do its simulations of every pending pod."""
    if last_bind is None or now - last_bind > BINDING_WINDOW:
        return False
    for pod in pending:
        created = pod.created
        if created is not None and now - created <= BACKLOG_POD_AGE:
            return True
    return False


def _latest(*times: datetime | None) -> datetime | None:
    present = [t for t in times if t is not None]
    return max(present) if present else None


def _convert(cluster: ClusterState, pods: Iterable[PodView]) -> list[Pod]:
    out = []
    for pod in pods:
        try:
            out.append(cluster.scheduling_pod(pod))
        except Unplannable as err:  # pending, and no node would take it now (told by the provisioner)
            log.debug("disruption.pod_not_plannable", pod=pod.name, reason=str(err))
        except ValueError as err:
            log.warning("disruption.pod_unreadable", pod=pod.name, error=str(err))
    return out


async def pools_and_policies(ctx: Context) -> tuple[dict[str, Obj], dict[str, PoolPolicy], OfferedPools]:
    """NodePools (not being deleted) with their policies, and those that may launch now with the
    instance types they offer (an invalid one has a policy that says why, and offers nothing)."""
    objs: dict[str, Obj] = {}
    policies: dict[str, PoolPolicy] = {}
    for name, view in sorted(ctx.cluster.nodepool_views().items()):
        if not view.deleting:
            objs[name] = view.raw
            policies[name] = pool_policy(view.raw)

    def invalid(view: NodePoolView) -> None:
        policies[view.name] = PoolPolicy(name=view.name, problem=f"invalid NodePool: {view.invalid}")

    offered = await offered_pools(ctx.cluster, ctx.cloud, component="disruption", on_invalid=invalid, quiet=True)
    return objs, policies, offered


async def build_snapshot(ctx: Context, memory: Memory) -> Snapshot:
    """One consistent view of the cache for the planner."""
    cluster = ctx.cluster
    now = ctx.clock.now()
    pool_objs, policies, offered = await pools_and_policies(ctx)
    pool_types = {name: pool.instance_types for name, pool in offered.items()}
    all_types = inputs.all_types(offered)
    pdbs = list(cluster.pdbs())

    nodes: list[NodeState] = []
    other: list[ExistingNode] = []
    managed_nodes: set[str] = set()
    # NodeClaims just created (by any decider) that the cache does not show yet are capacity on its way
    claims = {
        **{v.name: v for v in ctx.writer.in_flight()},
        **cluster.claim_views(),
    }
    for name, claim in sorted(claims.items()):
        pool_name = claim.nodepool
        node = cluster.node_view_for_claim(claim)
        if node is None or not claim.initialized:
            if node is not None:
                managed_nodes.add(node.name)
            if claim.deleting:
                continue
            bound = [] if node is None else cluster.pod_views_on_node(node.name)
            in_flight = _in_flight(
                cluster,
                StateNode(node=node, claim=claim),
                pods=[p for p in bound if not p.is_terminal],
                types=pool_types.get(pool_name) or tuple(all_types.values()),
            )
            if in_flight is not None:
                other.append(in_flight)
            continue
        node_name = node.name
        managed_nodes.add(node_name)
        pods = [p for p in cluster.pod_views_on_node(node_name) if not p.is_terminal]
        view = existing_node(StateNode(node=node, claim=claim), pods=_convert(cluster, pods), cache=cluster)
        assert view is not None  # a Node always converts (or raises)
        price = offering_price({**claim.labels, **node.labels}, pool_types.get(pool_name) or all_types.values())
        if price is None:
            try:
                price = float(claim.annotations.get(ANNOTATION_PLANNED_PRICE) or 0.0)
            except ValueError:
                price = 0.0
        stable = _latest(
            claim.transition_time(INITIALIZED),
            parse_time(claim.last_pod_event_time),
            memory.pod_events.get(node_name),
            *(p.bound_at for p in pods if not p.is_daemon),
        )
        drift = drift_of(claim, pool_objs.get(pool_name)) or rebalance_of(claim, pool_objs.get(pool_name))
        if drift is None and not claim.deleting:
            try:
                provider_drift = await ctx.cloud.is_drifted(claim.raw)
            except CloudProviderError as err:
                log.debug("disruption.drift_unknown", nodeclaim=name, error=str(err))
                provider_drift = None
            if provider_drift:
                drift = f"the node class changed: {provider_drift}"
        reclaimable = idle_gpu_reclaimable(pods) if claim.is_true(GPU_IDLE) else []
        unowned = [key for key in unowned_pods(pods) if key not in reclaimable]
        nodes.append(
            NodeState(
                claim=name,
                pool=pool_name,
                view=view,
                movable=tuple(_convert(cluster, [p for p in movable(pods) if p.key not in reclaimable])),
                price=price,
                created=claim.created,
                initialized=True,
                ready=node.ready,
                deleting=claim.deleting or node.deleting or node.has_taint(TAINT_DISRUPTED),
                stable_since=stable,
                expires_at=expiry_of(claim),
                drift=drift,
                blockers=tuple(safety_blockers(claim=claim, node=node, pods=pods, pdbs=pdbs)),
                consolidation_blockers=(
                    *(f"pod {key} has no controller: evicting it would delete it for good" for key in unowned[:3]),
                    *booking_blockers(ctx.bookings.active(now), node_name),
                ),
                protected_until=memory.protected.get(name),
                instance_type=str(node.labels.get(LABEL_INSTANCE_TYPE) or claim.labels.get(LABEL_INSTANCE_TYPE) or ""),
                reclaimable=tuple(reclaimable),
            )
        )

    live_pods = [p for p in cluster.pod_views() if not p.is_terminal]
    unmanaged = {n for n in cluster.node_views() if n not in managed_nodes}
    if unmanaged:
        by_node: dict[str, list[PodView]] = {}
        for p in live_pods:
            if p.node_name in unmanaged:
                by_node.setdefault(p.node_name, []).append(p)
        for n in sorted(unmanaged):
            unmanaged_node = cluster.node_views()[n]
            if unmanaged_node.deleting:
                continue
            try:
                converted = existing_node(
                    StateNode(node=unmanaged_node), pods=_convert(cluster, by_node.get(n, ())), cache=cluster
                )
            except ValueError as err:
                log.warning("disruption.node_unreadable", node=n, error=str(err))
                continue
            assert converted is not None
            other.append(converted)

    nodes, other = keep_buffers(ctx.buffers.pods(), nodes, other)
    nodes, other = keep_bookings(ctx.bookings.active(now), nodes, other)
    # the what-if's machines: the candidates and the rest; every one counts for the NodePools' usage
    what_if = inputs.solver_inputs(
        cluster,
        offered,
        existing=[*other, *(n.view for n in nodes)],
        unavailable=ctx.unavailable.current(),
        component="disruption",
        invalid_event="nodepool_unreadable",
    )
    pending = [p for p in live_pods if is_pending(p)]
    return Snapshot(
        now=now,
        nodes=tuple(nodes),
        pools=policies,
        templates=what_if.templates,
        other_capacity=tuple(other),
        daemons=what_if.daemons,
        pending=tuple(_convert(cluster, pending)),
        unavailable=what_if.unavailable,
        active=memory.active,
        scheduler_backlog=scheduler_backlog(now, memory.last_bind, pending),
    )


def keep_buffers(
    buffer_pods: Sequence[Pod], nodes: Sequence[NodeState], other: Sequence[ExistingNode]
) -> tuple[list[NodeState], list[ExistingNode]]:
    """The warm buffers' placeholders put where they sit (`scheduling.warm.place_buffer`): the nodes
    holding them carry them as pods (their room counts as used when pods are moved) and are marked
    ``keeps_buffer``, so neither emptiness nor consolidation removes what the buffer must keep."""
    if not buffer_pods:
        return list(nodes), list(other)
    placement = place_buffer(buffer_pods, [*(n.view for n in nodes), *other])
    kept = [
        replace(
            n,
            view=replace(n.view, pods=(*n.view.pods, *held)),
            keeps_buffer=tuple(sorted({virtual_pool(p) for p in held})),
        )
        if (held := placement.held.get(n.node))
        else n
        for n in nodes
    ]
    return kept, with_virtual_pods(other, placement)


def booking_blockers(bookings: Sequence[Booking], node: str) -> list[str]:
    """Why a node that holds capacity booked for a ProvisioningRequest is not consolidated."""
    return [
        f"it holds capacity booked for ProvisioningRequest {b.request} until {format_time(b.until)}"
        for b in bookings
        if node in b.nodes
    ]


def keep_bookings(
    bookings: Sequence[Booking], nodes: Sequence[NodeState], other: Sequence[ExistingNode]
) -> tuple[list[NodeState], list[ExistingNode]]:
    """The room booked for ProvisioningRequests counted as used: a consolidation does not move pods
    into it (the booked nodes themselves are blocked from consolidation)."""
    held: dict[str, list[Pod]] = {}
    for b in bookings:
        for node, pods in b.held.items():
            held.setdefault(node, []).extend(pods)
    if not held:
        return list(nodes), list(other)
    kept = [
        replace(n, view=replace(n.view, pods=(*n.view.pods, *held[n.node]))) if n.node in held else n for n in nodes
    ]
    return kept, [replace(o, pods=(*o.pods, *held[o.name])) if o.name in held else o for o in other]


def _in_flight(
    cluster: ClusterState, machine: StateNode, *, pods: Iterable[PodView], types: Iterable[InstanceType]
) -> ExistingNode | None:
    """A NodeClaim that is not an initialized node yet, as the capacity it will bring."""
    try:
        return existing_node(machine, pods=_convert(cluster, pods), instance_types=tuple(types), cache=cluster)
    except ValueError as err:
        claim = machine.claim
        log.warning("disruption.nodeclaim_unreadable", nodeclaim=claim.name if claim else None, error=str(err))
        return None
