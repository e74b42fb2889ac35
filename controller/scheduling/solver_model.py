"""The solver's internal model: the inputs indexed for one solve (resource universe, pools, slots,
groups of identical pods, topology terms), the mutable placement state (nodes, parts, state),
simulated candidate nodes, and the `SolveCache` that solves over the same pools share."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from controller.scheduling.instancetypes import InstanceType, Offering
from controller.scheduling.labels import (
    LABEL_NODEPOOL,
)
from controller.scheduling.model import (
    ExistingNode,
    NodePoolTemplate,
    OfferingKey,
    Pod,
)
from controller.scheduling.requirements import EVERYTHING, Requirement, Requirements
from controller.scheduling.resources import ONE_POD, PODS, Resources, is_accelerator
from controller.scheduling.solver_numeric import Vec
from controller.scheduling.taints import Taint, Toleration


class Universe:
    """The resource names that matter in this solve, mapped to tuple positions."""

    def __init__(self, names: Iterable[str]) -> None:
        ordered = sorted(set(names) | {PODS})
        self.names: tuple[str, ...] = tuple(ordered)
        self.index: dict[str, int] = {n: i for i, n in enumerate(ordered)}

    def vec(self, resources: Resources) -> Vec:
        out = [0] * len(self.names)
        for name, amount in resources.items:
            i = self.index.get(name)
            if i is not None:
                out[i] = amount
        return tuple(out)


class Pool:
    __slots__ = (
        "base",
        "blocking_taints",
        "idx",
        "limit_names",
        "limits",
        "min_value_reqs",
        "name",
        "slots",
        "template",
        "tier",
    )

    def __init__(self, template: NodePoolTemplate, idx: int) -> None:
        self.template = template
        self.idx = idx
        self.name = template.name
        self.tier = template.weight
        self.base = template.requirements.intersect(Requirements.from_labels(template.labels)).with_(
            Requirement.in_(LABEL_NODEPOOL, template.name)
        )
        self.blocking_taints = tuple(t for t in template.taints if t.blocks_scheduling())
        self.limits = template.limits
        self.limit_names: tuple[str, ...] = template.limits.names()
        self.min_value_reqs = tuple(r for r in self.base if r.min_values)
        self.slots: list[Slot] = []


# an instance type a pool may launch: its offerings, node-side requirements and daemonset overhead


SlotProto = tuple[InstanceType, tuple[Offering, ...], Requirements, Resources]


class SolveCache:
    """What solves over the same NodePools and nodes can share: each pool's launchable instance
    types (with offerings, requirements and daemonset overhead) and each node's requested total.

    Pass one to many `solve()` calls that differ only in their pods and in which nodes they leave
    out, as consolidation's simulations do. Entries are keyed by object identity and hold the
    object, so a rebuilt NodePoolTemplate or ExistingNode is a new entry, never a stale one.
    """

    def __init__(self) -> None:
        self._protos: dict[tuple[int, frozenset[OfferingKey], tuple[Pod, ...]], tuple[object, list[SlotProto]]] = {}
        self._used: dict[int, tuple[ExistingNode, Resources]] = {}

    def protos(
        self, template: NodePoolTemplate, unavailable: frozenset[OfferingKey], daemons: tuple[Pod, ...]
    ) -> list[SlotProto] | None:
        hit = self._protos.get((id(template), unavailable, daemons))
        return hit[1] if hit is not None and hit[0] is template else None

    def keep_protos(
        self,
        template: NodePoolTemplate,
        unavailable: frozenset[OfferingKey],
        daemons: tuple[Pod, ...],
        protos: list[SlotProto],
    ) -> None:
        self._protos[(id(template), unavailable, daemons)] = (template, protos)

    def used(self, node: ExistingNode) -> Resources:
        """The requests of the pods on ``node``, each with its pod slot."""
        hit = self._used.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        total = node.requested()
        self._used[id(node)] = (node, total)
        return total


class Slot:
    """A (NodePool, instance type) pair a new node can be made of."""

    __slots__ = (
        "alloc",
        "cap_limits",
        "idx",
        "it",
        "min_price",
        "node_side",
        "offerings",
        "overhead",
        "pool",
        "twin",
        "ub_value",
    )

    def __init__(
        self,
        *,
        idx: int,
        pool: Pool,
        it: InstanceType,
        alloc: Vec,
        overhead: Resources,
        node_side: Requirements,
        offerings: tuple[Offering, ...],
    ) -> None:
        self.idx = idx
        self.pool = pool
        self.it = it
        self.alloc = alloc
        self.overhead = overhead
        self.node_side = node_side
        self.offerings = offerings
        self.min_price = offerings[0].price
        self.cap_limits = tuple(it.capacity.get(n) for n in pool.limit_names)
        self.ub_value = float("inf")
        # slots of one twin class differ only in size and prices (see `CandidateTypes._build_twins`);
        # -1: in no class
        self.twin = -1


class Term:
    """A pod (anti-)affinity term or spread constraint of a group, with what it selects."""

    __slots__ = (
        "agg",
        "all_ns",
        "existing_node",
        "existing_total",
        "existing_zone",
        "honor_affinity",
        "honor_taints",
        "kind",
        "matched",
        "max_skew",
        "min_domains",
        "namespaces",
        "owner",
        "selector",
        "self_match",
        "topology_key",
    )

    def __init__(
        self,
        *,
        kind: str,
        owner: int,
        topology_key: str,
        selector: Requirements | None,
        namespaces: frozenset[str],
        all_ns: bool,
        max_skew: int = 0,
        min_domains: int | None = None,
        honor_affinity: bool = True,
        honor_taints: bool = False,
    ) -> None:
        self.kind = kind
        self.owner = owner
        self.topology_key = topology_key
        self.selector = selector
        self.namespaces = namespaces
        self.all_ns = all_ns
        self.max_skew = max_skew
        self.min_domains = min_domains
        self.honor_affinity = honor_affinity
        self.honor_taints = honor_taints
        self.matched: frozenset[int] = frozenset()
        self.agg = -1  # index of the running counts of what it matches (State.agg_zone / agg_total)
        self.self_match = False
        self.existing_node: dict[int, int] = {}
        self.existing_zone: dict[str, int] = {}
        self.existing_total = 0

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.selector is None:
            return False
        if not self.all_ns and namespace not in self.namespaces:
            return False
        return self.selector.matches(labels)

    def describe(self) -> str:
        if self.kind == "spread":
            return f"topology spread on {self.topology_key} (maxSkew {self.max_skew})"
        what = "pod affinity" if self.kind == "aff" else "pod anti-affinity"
        return f"{what} on {self.topology_key}"


@dataclass(frozen=True, eq=False)
class ZoneRule:
    """Zonal spread terms that count the same pods over the same eligible zones with the same
    skew: what a pod the selector matches must respect when it joins a zone holding an owner."""

    term: Term  # one of them: its ``matched``/``existing_zone`` give the counts
    max_skew: int
    domains: frozenset[str]
    min_zero: bool  # fewer eligible zones than minDomains: the global minimum counts as 0
    owners: frozenset[int]


@dataclass(frozen=True, eq=False)
class HostRule:
    """Hostname spread terms that count the same pods with the same bound ``maxSkew + min``."""

    term: Term
    bound: int
    owners: frozenset[int]


class Group:
    __slots__ = (
        "blocked_nodes",
        "blocked_zones",
        "cands",
        "conflict_host",
        "conflict_zone",
        "deferred",
        "gang",
        "gpu",
        "host_aff",
        "host_anti",
        "host_m",
        "host_matchers",
        "host_spread",
        "idx",
        "kmax",
        "nz",
        "per_node_only",
        "pods",
        "rep",
        "req",
        "req_res",
        "required",
        "slot_set",
        "tol_key",
        "variants",
        "w",
        "zone_aff",
        "zone_anti",
        "zone_matchers",
        "zone_pin",
        "zone_spread",
    )

    def __init__(self, idx: int, pods: list[Pod], universe: Universe) -> None:
        rep = pods[0]
        self.idx = idx
        self.pods = pods
        self.rep = rep
        self.req_res = rep.requests + ONE_POD
        self.req = universe.vec(self.req_res)
        # the dimensions the group requests (None: all of them), for `fit_count_group`
        nz = tuple(i for i, r in enumerate(self.req) if r)
        self.nz: tuple[int, ...] | None = None if len(nz) == len(self.req) else nz
        self.gpu = sum(v for n, v in rep.requests.items if is_accelerator(n))
        self.gang = rep.gang
        self.tol_key: tuple[Toleration, ...] = rep.tolerations
        self.required, self.variants = pod_variants(rep)
        self.host_spread: list[Term] = []
        self.zone_spread: Term | None = None
        self.host_aff: list[Term] = []
        self.zone_aff: list[Term] = []
        self.host_anti: list[Term] = []
        self.zone_anti: list[Term] = []
        self.host_m: dict[int, int] = {}
        # spread rules (of any group, this one's too) whose selector matches this group's pods
        self.zone_matchers: list[ZoneRule] = []
        self.host_matchers: list[HostRule] = []
        self.conflict_host: set[int] = set()
        self.conflict_zone: set[int] = set()
        self.blocked_nodes: set[int] = set()
        self.blocked_zones: set[str] = set()
        self.per_node_only = False
        self.zone_pin = False
        self.deferred = False
        self.w = 0.0
        self.cands: dict[int, list[tuple[float, Slot, int]]] = {}
        self.kmax: dict[int, int] = {}
        self.slot_set: frozenset[int] = frozenset()  # the keys of kmax, once they are known


def pod_variants(pod: Pod) -> tuple[list[Requirements], list[Requirements]]:
    """(required terms, variants to try in order: each preferred term on top, then required only)."""
    required = list(pod.node_requirements) or [Requirements()]
    required = [t for t in required if t.is_satisfiable()]
    variants: list[Requirements] = []
    seen: set[Requirements] = set()
    for pref in sorted(pod.preferred, key=lambda p: -p.weight):
        for term in required:
            merged = term.intersect(pref.requirements)
            if merged.is_satisfiable() and merged not in seen:
                seen.add(merged)
                variants.append(merged)
    for term in required:
        if term not in seen:
            seen.add(term)
            variants.append(term)
    return required, variants


class Node:
    __slots__ = (
        "closed",
        "content",
        "cordoned",
        "existing",
        "free",
        "gang",
        "idx",
        "in_flight",
        "labels",
        "mult",
        "placed",
        "pool",
        "reqs",
        "slot",
        "sub",
        "taints",
        "zone",
    )

    def __init__(self) -> None:
        self.idx = 0
        self.sub = 0
        self.closed = False
        self.existing: ExistingNode | None = None
        self.in_flight = False
        self.cordoned = False
        self.slot: Slot | None = None
        self.pool: Pool | None = None
        self.free: list[int] = []
        self.placed: dict[int, int] = {}
        self.content: list[list[int]] = []
        self.reqs = EVERYTHING
        self.zone: str | None = None
        self.gang: str | None = None
        self.mult = 1
        self.labels: Mapping[str, str] = {}
        self.taints: tuple[Taint, ...] = ()

    def copy(self) -> Node:
        n = Node()
        n.idx = self.idx
        n.sub = self.sub
        n.closed = self.closed
        n.existing = self.existing
        n.in_flight = self.in_flight
        n.cordoned = self.cordoned
        n.slot = self.slot
        n.pool = self.pool
        n.free = list(self.free)
        n.placed = dict(self.placed)
        n.content = [list(c) for c in self.content]
        n.reqs = self.reqs
        n.zone = self.zone
        n.gang = self.gang
        n.mult = self.mult
        n.labels = self.labels
        n.taints = self.taints
        return n


class Part:
    """Pods of one group that must go to one zone (or anywhere: ``zone`` None)."""

    __slots__ = ("group", "placed", "quota", "reason", "remaining", "variants", "zone")

    def __init__(self, group: Group, zone: str | None, quota: int, variants: list[Requirements]) -> None:
        self.group = group
        self.zone = zone
        self.quota = quota
        self.placed = 0
        self.remaining = quota
        self.variants = variants
        self.reason: str | None = None

    def set_quota(self, quota: int) -> None:
        self.quota = quota
        self.remaining = quota - self.placed


class State:
    """Everything a placement changes. ``new`` is append-only (all new nodes, replica batches
    included); ``open`` is the first-fit scan order of the new nodes that still have room."""

    def __init__(self) -> None:
        self.existing: list[Node] = []
        self.new: list[Node] = []
        self.open: list[Node] = []
        self.closed = 0
        self.usage: list[dict[str, int]] = []
        self.placed_zone: dict[tuple[int, str], int] = {}
        self.placed_total: dict[int, int] = {}
        # the same counts summed over each set of groups some term matches (``Term.agg``), kept
        # up to date with placed_zone / placed_total so a term's count is one look-up
        self.agg_zone: list[dict[str, int]] = []
        self.agg_total: list[int] = []
        # nodes per zone so far, existing and new (replicas counted): a pinned node's zone among equal
        # prices goes to the zone with the fewest (`Packing._pin_zone`)
        self.zone_nodes: dict[str, int] = {}
        self.node_counter = 0
        self.split_counter = 0

    def copy(self) -> State:
        s = State()
        s.existing = [n.copy() for n in self.existing]
        s.new = [n.copy() for n in self.new]
        same = {id(old): new for old, new in zip(self.new, s.new, strict=True)}
        s.open = [same[id(n)] for n in self.open]
        s.closed = self.closed
        s.usage = [dict(u) for u in self.usage]
        s.placed_zone = dict(self.placed_zone)
        s.placed_total = dict(self.placed_total)
        s.agg_zone = [dict(a) for a in self.agg_zone]
        s.agg_total = list(self.agg_total)
        s.zone_nodes = dict(self.zone_nodes)
        s.node_counter = self.node_counter
        s.split_counter = self.split_counter
        return s

    def count_zone_nodes(self, zone: str, nodes: int) -> None:
        """``nodes`` more nodes (a batch's replicas) are in ``zone``."""
        self.zone_nodes[zone] = self.zone_nodes.get(zone, 0) + nodes


class Sim:
    """The outcome of simulating one candidate node."""

    __slots__ = ("node", "pattern", "price", "ratio", "slot", "value")

    def __init__(self, node: Node, slot: Slot, pattern: list[tuple[Part, int]], price: float, value: float) -> None:
        self.node = node
        self.slot = slot
        self.pattern = pattern
        self.price = price
        self.value = value
        self.ratio = price / value if value > 0 else float("inf")


class SlotIndex:
    """Which slots have at least ``used`` in every dimension, as a bitmask, fast.

    Per dimension the slots are sorted by allocatable; the slots at or above a value form a
    suffix whose bitmask is precomputed, so a query is one bisection and one AND per dimension.
    """

    def __init__(self, allocs: Sequence[Vec], dims: int) -> None:
        self.values: list[list[int]] = []
        self.masks: list[list[int]] = []
        for d in range(dims):
            order = sorted(range(len(allocs)), key=lambda i: allocs[i][d])
            self.values.append([allocs[i][d] for i in order])
            masks = [0] * (len(order) + 1)
            acc = 0
            for pos in range(len(order) - 1, -1, -1):
                acc |= 1 << order[pos]
                masks[pos] = acc
            self.masks.append(masks)
        self.all = (1 << len(allocs)) - 1

    def fitting(self, used: Sequence[int]) -> int:
        mask = self.all
        for d, need in enumerate(used):
            if need > 0:
                mask &= self.masks[d][bisect_left(self.values[d], need)]
                if not mask:
                    return 0
        return mask
