"""The solver: pending pods + NodePools + existing capacity -> a Plan of NodeClaims to buy.

Pure: no I/O, no clock, no logging. See ``docs/solver.md`` for the algorithm. In short:

1. Identical pods (same scheduling-relevant spec and labels) form a *group*; groups are solved
   in bulk. Groups are ordered GPU-first, then by their standalone cost per pod, descending.
2. Each group is split into *parts* by zone when it has a zonal topology spread constraint
   (water-filling the zone counts, so every placement respects ``maxSkew``).
3. Phase 1 puts pods on existing nodes, then on in-flight NodeClaims (free capacity first).
4. Phase 2 opens new nodes: for the next part, each candidate (NodePool, instance type) is
   simulated by first-fit-decreasing packing of that part and the parts after it; the candidate
   with the lowest price per unit of packed value wins (value = the pods' standalone costs). The
   resulting node *pattern* is replicated as often as the remaining pods allow.
5. Every new node is then shrunk to the cheapest instance type of its pool that still fits its
   pods, and gets the full, price-ordered list of instance types that could host it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from operator import le
from typing import Final

from controller.scheduling.instancetypes import InstanceType, Offering
from controller.scheduling.labels import (
    INSTANCE_TYPE_KEYS,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
)
from controller.scheduling.model import (
    ExistingNode,
    Gang,
    InstanceCandidate,
    InstanceChoice,
    NewNodeClaim,
    NodePoolTemplate,
    OfferingKey,
    Plan,
    Pod,
    PodAffinityTerm,
    TopologySpread,
)
from controller.scheduling.quantity import format_human
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.resources import ONE_POD, PODS, Resources, is_accelerator, sum_resources
from controller.scheduling.taints import Taint, Toleration, first_untolerated

Vec = tuple[int, ...]

_EPS: Final = 1e-9
_MAX_FILL_MISSES: Final = 48
"""During a fill simulation, stop scanning later parts after this many did not fit."""
_MAX_STREAK: Final = 16
"""When choosing an instance type, stop after this many simulated candidates did not improve."""
_MAX_STREAK_PILOT: Final = 48
"""The same, near the end of a phase, where pilot rollouts make every good candidate count."""
_ROLLOUT_MAX_PODS: Final = 64
"""Pilot rollouts run when at most this many pods are left to place in the current phase."""
_ROLLOUT_CANDIDATES: Final = 4
"""How many instance types (best price per value first) a pilot step completes and compares."""
_ROLLOUT_VARIANTS: Final = 4
"""How many packings of each of those instance types it completes."""
_ROLLOUT_FIRSTS: Final = 4
"""Fill orders tried per instance type in a pilot step: each of the next parts first."""
_ROLLOUT_BUDGET: Final = 400
"""Rollouts per solve: small problems are fully covered, large ones only pay for their tail."""
_MAX_STREAK_ROLLOUT: Final = 6
"""Candidates without improvement before a choice inside a rollout settles (a quicker greedy)."""
_UNPLACED_PENALTY: Final = 1e6
_IMPROVE_MAX_NODES: Final = 40
"""Plans with at most this many new nodes get the re-solve local search (each node alone)."""
_IMPROVE_MAX_PAIRS: Final = 12
"""... and, with at most this many, pairs of nodes too."""
"""Cost of leaving a pod unplaced in a rollout (dominates any price)."""
_METADATA_NAME: Final = "metadata.name"
"""Pseudo label key for ``matchFields`` on the node name."""
_NO_ZONES: Final[frozenset[str]] = frozenset()


# ---------------------------------------------------------------------------------------------
# helpers


def _fit_count(free: Sequence[int], req: Vec) -> int:
    """How many copies of ``req`` fit in ``free`` (``req`` always asks for a pod slot)."""
    best = -1
    for f, r in zip(free, req, strict=True):
        if r:
            if f < r:
                return 0
            q = f // r
            if best < 0 or q < best:
                best = q
    return best if best >= 0 else 1 << 30


def _fits(req: Sequence[int], free: Sequence[int]) -> bool:
    return all(map(le, req, free))


class _Universe:
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


# ---------------------------------------------------------------------------------------------
# static model of pools, slots, terms, groups


class _Pool:
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
        self.slots: list[_Slot] = []


# an instance type a pool may launch: its offerings, node-side requirements and daemonset overhead
_SlotProto = tuple[InstanceType, tuple[Offering, ...], Requirements, Resources]


class SolveCache:
    """What solves over the same NodePools and nodes can share: each pool's launchable instance
    types (with offerings, requirements and daemonset overhead) and each node's requested total.

    Pass one to many `solve()` calls that differ only in their pods and in which nodes they leave
    out, as consolidation's simulations do. Entries are keyed by object identity and hold the
    object, so a rebuilt NodePoolTemplate or ExistingNode is a new entry, never a stale one.
    """

    def __init__(self) -> None:
        self._protos: dict[tuple[int, frozenset[OfferingKey], tuple[Pod, ...]], tuple[object, list[_SlotProto]]] = {}
        self._used: dict[int, tuple[ExistingNode, Resources]] = {}

    def protos(
        self, template: NodePoolTemplate, unavailable: frozenset[OfferingKey], daemons: tuple[Pod, ...]
    ) -> list[_SlotProto] | None:
        hit = self._protos.get((id(template), unavailable, daemons))
        return hit[1] if hit is not None and hit[0] is template else None

    def keep_protos(
        self,
        template: NodePoolTemplate,
        unavailable: frozenset[OfferingKey],
        daemons: tuple[Pod, ...],
        protos: list[_SlotProto],
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


class _Slot:
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
        "ub_value",
    )

    def __init__(
        self,
        *,
        idx: int,
        pool: _Pool,
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


class _Term:
    """A pod (anti-)affinity term or spread constraint of a group, with what it selects."""

    __slots__ = (
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


class _Group:
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
        "host_spread",
        "idx",
        "kmax",
        "per_node_only",
        "pods",
        "rep",
        "req",
        "req_res",
        "required",
        "tol_key",
        "variants",
        "w",
        "zone_aff",
        "zone_anti",
        "zone_pin",
        "zone_spread",
    )

    def __init__(self, idx: int, pods: list[Pod], universe: _Universe) -> None:
        rep = pods[0]
        self.idx = idx
        self.pods = pods
        self.rep = rep
        self.req_res = rep.requests + ONE_POD
        self.req = universe.vec(self.req_res)
        self.gpu = sum(v for n, v in rep.requests.items if is_accelerator(n))
        self.gang = rep.gang
        self.tol_key: tuple[Toleration, ...] = rep.tolerations
        self.required, self.variants = _variants(rep)
        self.host_spread: list[_Term] = []
        self.zone_spread: _Term | None = None
        self.host_aff: list[_Term] = []
        self.zone_aff: list[_Term] = []
        self.host_anti: list[_Term] = []
        self.zone_anti: list[_Term] = []
        self.host_m: dict[int, int] = {}
        self.conflict_host: set[int] = set()
        self.conflict_zone: set[int] = set()
        self.blocked_nodes: set[int] = set()
        self.blocked_zones: set[str] = set()
        self.per_node_only = False
        self.zone_pin = False
        self.deferred = False
        self.w = 0.0
        self.cands: dict[int, list[tuple[float, _Slot, int]]] = {}
        self.kmax: dict[int, int] = {}


def _variants(pod: Pod) -> tuple[list[Requirements], list[Requirements]]:
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


# ---------------------------------------------------------------------------------------------
# mutable state


class _Node:
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
        self.slot: _Slot | None = None
        self.pool: _Pool | None = None
        self.free: list[int] = []
        self.placed: dict[int, int] = {}
        self.content: list[list[int]] = []
        self.reqs = Requirements()
        self.zone: str | None = None
        self.gang: str | None = None
        self.mult = 1
        self.labels: Mapping[str, str] = {}
        self.taints: tuple[Taint, ...] = ()

    def copy(self) -> _Node:
        n = _Node()
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


class _Part:
    """Pods of one group that must go to one zone (or anywhere: ``zone`` None)."""

    __slots__ = ("group", "placed", "quota", "reason", "remaining", "variants", "zone")

    def __init__(self, group: _Group, zone: str | None, quota: int, variants: list[Requirements]) -> None:
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


class _State:
    """Everything a placement changes. ``new`` is append-only (all new nodes, replica batches
    included); ``open`` is the first-fit scan order of the new nodes that still have room."""

    def __init__(self) -> None:
        self.existing: list[_Node] = []
        self.new: list[_Node] = []
        self.open: list[_Node] = []
        self.closed = 0
        self.usage: list[dict[str, int]] = []
        self.placed_zone: dict[tuple[int, str], int] = {}
        self.placed_total: dict[int, int] = {}
        self.node_counter = 0
        self.split_counter = 0

    def copy(self) -> _State:
        s = _State()
        s.existing = [n.copy() for n in self.existing]
        s.new = [n.copy() for n in self.new]
        same = {id(old): new for old, new in zip(self.new, s.new, strict=True)}
        s.open = [same[id(n)] for n in self.open]
        s.closed = self.closed
        s.usage = [dict(u) for u in self.usage]
        s.placed_zone = dict(self.placed_zone)
        s.placed_total = dict(self.placed_total)
        s.node_counter = self.node_counter
        s.split_counter = self.split_counter
        return s


class _Sim:
    """The outcome of simulating one candidate node."""

    __slots__ = ("node", "pattern", "price", "ratio", "slot", "value")

    def __init__(self, node: _Node, slot: _Slot, pattern: list[tuple[_Part, int]], price: float, value: float) -> None:
        self.node = node
        self.slot = slot
        self.pattern = pattern
        self.price = price
        self.value = value
        self.ratio = price / value if value > 0 else float("inf")


# ---------------------------------------------------------------------------------------------
# the solver


def solve(
    *,
    pods: Sequence[Pod],
    node_pools: Sequence[NodePoolTemplate],
    existing_nodes: Sequence[ExistingNode] = (),
    daemon_pods: Sequence[Pod] = (),
    unavailable: Collection[OfferingKey] = frozenset(),
    gangs: Sequence[Gang] = (),
    cache: SolveCache | None = None,
) -> Plan:
    """Decide where pending ``pods`` go and which NodeClaims to buy. Pure and deterministic.

    ``existing_nodes`` include in-flight NodeClaims (``in_flight=True``); ``daemon_pods`` are
    daemonset pod templates (their requests are added to every new node they would run on);
    ``unavailable`` offerings (instance type, zone, capacity type) are avoided; pods whose
    ``gang`` is set are placed all-or-nothing per gang (``gangs`` gives per-gang options);
    ``cache`` shares work between solves over the same pools and nodes (see `SolveCache`).
    """
    avoid = frozenset(unavailable)
    cache = cache if cache is not None else SolveCache()
    plan = _Solver(
        pods=pods,
        node_pools=node_pools,
        existing_nodes=existing_nodes,
        daemon_pods=daemon_pods,
        unavailable=avoid,
        gangs=gangs,
        cache=cache,
    ).run()
    if 1 < len(plan.new_nodes) <= _IMPROVE_MAX_NODES:
        plan = _improve(
            plan,
            pods=pods,
            node_pools=node_pools,
            existing_nodes=existing_nodes,
            daemon_pods=daemon_pods,
            unavailable=avoid,
            cache=cache,
        )
    return plan


def _improve(
    plan: Plan,
    *,
    pods: Sequence[Pod],
    node_pools: Sequence[NodePoolTemplate],
    existing_nodes: Sequence[ExistingNode],
    daemon_pods: Sequence[Pod],
    unavailable: frozenset[OfferingKey],
    cache: SolveCache,
) -> Plan:
    """Local search on small plans: re-solve the pods of one node, or of two nodes of the same
    pool, on their own; keep the result when it is cheaper.

    Only nodes whose pods carry no topology or pod (anti-)affinity terms, are selected by
    nobody's terms, belong to no gang, and come from a pool without limits take part, so a
    replacement can never break a constraint that involves other nodes.
    """
    by_key = {p.key: p for p in pods}
    terms: list[PodAffinityTerm | TopologySpread] = []
    for p in (*pods, *(b for n in existing_nodes for b in n.pods)):
        terms.extend((*p.spread, *p.affinity, *p.anti_affinity))
    pools = {p.name: p for p in node_pools}

    def movable(node: NewNodeClaim) -> bool:
        if node.gang is not None or pools[node.node_pool].limits:
            return False
        for key in node.pods:
            p = by_key[key]
            if p.spread or p.affinity or p.anti_affinity:
                return False
            for t in terms:
                if isinstance(t, TopologySpread):
                    if t.selects(p.labels):
                        return False
                elif t.selects(p.namespace, p.labels):
                    return False
        return True

    no_better: set[tuple[object, ...]] = set()

    def resolve(group: Sequence[NewNodeClaim]) -> tuple[NewNodeClaim, ...] | None:
        # plans repeat nodes (the same mix of interchangeable pods on the same machine): a mix that
        # could not be made cheaper once is not solved again
        mix = Counter(by_key[k].scheduling_key() for n in group for k in n.pods)
        signature = (group[0].node_pool, frozenset(mix.items()), tuple(sorted(n.choice.price for n in group)))
        if signature in no_better:
            return None
        better = _resolve(group)
        if better is None:
            no_better.add(signature)
        return better

    def _resolve(group: Sequence[NewNodeClaim]) -> tuple[NewNodeClaim, ...] | None:
        sub = _Solver(
            pods=[by_key[k] for n in group for k in n.pods],
            node_pools=[pools[group[0].node_pool]],
            existing_nodes=(),
            daemon_pods=daemon_pods,
            unavailable=unavailable,
            gangs=(),
            cache=cache,
        ).run()
        if sub.unschedulable or sub.total_price >= sum(n.choice.price for n in group) - 1e-9:
            return None
        return sub.new_nodes

    nodes = list(plan.new_nodes)
    ok = [movable(n) for n in nodes]
    changed = False
    for i in range(len(nodes)):
        if ok[i]:
            better = resolve([nodes[i]])
            if better is not None:
                nodes[i : i + 1] = [better[0]]
                ok[i] = False
                extra = list(better[1:])
                nodes.extend(extra)
                ok.extend(False for _ in extra)
                changed = True
    if len(nodes) <= _IMPROVE_MAX_PAIRS:
        i = 0
        while i < len(nodes):
            j = i + 1
            merged = False
            while j < len(nodes):
                if ok[i] and ok[j] and nodes[i].node_pool == nodes[j].node_pool:
                    better = resolve([nodes[i], nodes[j]])
                    if better is not None:
                        nodes[i] = better[0]
                        del nodes[j]
                        del ok[j]
                        ok[i] = False
                        extra = list(better[1:])
                        nodes.extend(extra)
                        ok.extend(False for _ in extra)
                        changed = merged = True
                        break
                j += 1
            if not merged:
                i += 1
    if not changed:
        return plan
    renamed: list[NewNodeClaim] = []
    per_pool: dict[str, int] = {}
    for index, node in enumerate(nodes):
        per_pool[node.node_pool] = per_pool.get(node.node_pool, 0) + 1
        renamed.append(replace(node, name=f"{node.node_pool}-{per_pool[node.node_pool]}", index=index))
    return Plan(
        new_nodes=tuple(renamed),
        existing_placements=plan.existing_placements,
        unschedulable=plan.unschedulable,
        total_price=round(sum(n.choice.price for n in renamed), 6),
    )


class _Solver:
    def __init__(
        self,
        *,
        pods: Sequence[Pod],
        node_pools: Sequence[NodePoolTemplate],
        existing_nodes: Sequence[ExistingNode],
        daemon_pods: Sequence[Pod],
        unavailable: frozenset[OfferingKey],
        gangs: Sequence[Gang],
        cache: SolveCache | None = None,
    ) -> None:
        self._cache = cache if cache is not None else SolveCache()
        seen: set[str] = set()
        unique: list[Pod] = []
        for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
            if pod.key not in seen:
                seen.add(pod.key)
                unique.append(pod)
        self.pods = unique
        self.templates = sorted(node_pools, key=lambda p: (-p.weight, p.name))
        self.existing_nodes = sorted(existing_nodes, key=lambda n: (n.in_flight, n.name))
        self.daemon_pods = tuple(daemon_pods)
        self.unavailable = unavailable
        self.gang_opts = {g.id: g for g in gangs}
        names: set[str] = set()
        for pod in self.pods:
            names.update(pod.requests.names())
        self.u = _Universe(names)
        self.reasons: dict[int, str] = {}
        self.unschedulable: dict[str, str] = {}
        self._compat_cache: dict[tuple[Requirements, int], bool] = {}
        self._offer_cache: dict[tuple[Requirement | None, Requirement | None, int], tuple[Offering, ...]] = {}
        self._inter_cache: dict[tuple[Requirements, Requirements], Requirements | None] = {}
        self._taint_cache: dict[tuple[tuple[Toleration, ...], tuple[Taint, ...]], Taint | None] = {}
        self._taken: dict[int, int] = {}
        self._suffix_min: list[Vec] = []
        self._min_req: list[tuple[int, int]] = []
        self._journal: dict[int, tuple[_Node, _Node]] | None = None
        self._rollouts_left = _ROLLOUT_BUDGET
        self._in_rollout = False
        self._cand_cache: dict[object, list[tuple[_Slot, tuple[Offering, ...]]]] = {}
        self._slot_indexes: dict[int, _SlotIndex] = {}
        self._info_cache: dict[
            tuple[tuple[int, int], ...],
            tuple[
                list[tuple[_Slot, tuple[Offering, ...]]],
                tuple[tuple[InstanceCandidate, ...], InstanceChoice, tuple[Requirement, ...]],
            ],
        ] = {}
        self._zones: frozenset[str] = frozenset()

    # -- setup ----------------------------------------------------------------------------

    def _build_pools(self) -> None:
        self.pools: list[_Pool] = []
        self.slots: list[_Slot] = []
        type_keys: set[str] = set(INSTANCE_TYPE_KEYS)
        for template in self.templates:
            for it in template.instance_types:
                type_keys.update(it.labels)
        self.type_keys = type_keys
        for template in self.templates:
            pool = _Pool(template, len(self.pools))
            self.pools.append(pool)
            for it, offerings, node_side, overhead in self._slot_protos(pool, type_keys):
                alloc = self.u.vec(it.allocatable - overhead)
                if any(a < 0 for a in alloc):
                    alloc = tuple(max(a, 0) for a in alloc)
                slot = _Slot(
                    idx=len(self.slots),
                    pool=pool,
                    it=it,
                    alloc=alloc,
                    overhead=overhead,
                    node_side=node_side,
                    offerings=offerings,
                )
                pool.slots.append(slot)
                self.slots.append(slot)
        tiers = sorted({p.tier for p in self.pools}, reverse=True)
        self.tiers = tiers

    def _slot_protos(self, pool: _Pool, type_keys: set[str]) -> list[_SlotProto]:
        """The instance types a pool may launch now, with their offerings, node-side requirements and
        daemonset overhead. They depend only on the pool, the unavailable offerings and the daemonsets,
        so the sub-solves of `_improve` (and solves given one `SolveCache`) share them."""
        cached = self._cache.protos(pool.template, self.unavailable, self.daemon_pods)
        if cached is not None:
            return cached
        protos: list[_SlotProto] = []
        zone_req = pool.base.get(LABEL_ZONE)
        ct_req = pool.base.get(LABEL_CAPACITY_TYPE)
        custom = Requirements(r for r in pool.base if r.key not in type_keys)
        for it in sorted(pool.template.instance_types, key=lambda t: t.name):
            if any(
                not r.allows(it.labels.get(r.key))
                for r in pool.base
                if r.key in type_keys and r.key not in (LABEL_ZONE, LABEL_CAPACITY_TYPE)
            ):
                continue
            offerings = tuple(
                sorted(
                    (
                        o
                        for o in it.offerings
                        if o.available
                        and (it.name, o.zone, o.capacity_type) not in self.unavailable
                        and (zone_req is None or zone_req.allows(o.zone))
                        and (ct_req is None or ct_req.allows(o.capacity_type))
                    ),
                    key=lambda o: (o.price, o.zone, o.capacity_type),
                )
            )
            if not offerings:
                continue
            node_side = custom.intersect(Requirements.from_labels(it.labels)).with_(
                Requirement.in_(LABEL_NODEPOOL, pool.name),
                Requirement(LABEL_ZONE, False, frozenset(o.zone for o in offerings)),
                Requirement(LABEL_CAPACITY_TYPE, False, frozenset(o.capacity_type for o in offerings)),
            )
            protos.append((it, offerings, node_side, self._daemon_overhead(pool, node_side)))
        self._cache.keep_protos(pool.template, self.unavailable, self.daemon_pods, protos)
        return protos

    def _daemon_overhead(self, pool: _Pool, node_side: Requirements) -> Resources:
        total: list[Resources] = []
        for daemon in self.daemon_pods:
            if first_untolerated(daemon.tolerations, pool.template.taints) is not None:
                continue
            terms = daemon.node_requirements or (Requirements(),)
            if any(t.compatible_with_node(node_side) is None for t in terms):
                total.append(daemon.requests + ONE_POD)
        return sum_resources(total)

    def _build_groups(self) -> None:
        by_key: dict[tuple[object, ...], list[Pod]] = {}
        for pod in self.pods:
            by_key.setdefault(pod.scheduling_key(), []).append(pod)
        self.groups = [_Group(i, pods, self.u) for i, pods in enumerate(by_key.values())]

    def _build_state(self) -> None:
        st = _State()
        for i, en in enumerate(self.existing_nodes):
            n = _Node()
            n.idx = i
            n.existing = en
            n.in_flight = en.in_flight
            n.cordoned = en.unschedulable
            alloc = self.u.vec(en.allocatable)
            used = self.u.vec(self._cache.used(en))
            n.free = [a - b for a, b in zip(alloc, used, strict=True)]
            labels = dict(en.labels)
            labels[_METADATA_NAME] = en.name
            labels.setdefault(LABEL_HOSTNAME, en.name)
            n.labels = labels
            n.zone = en.labels.get(LABEL_ZONE)
            n.taints = tuple(t for t in en.taints if t.blocks_scheduling())
            st.existing.append(n)
        st.usage = [{name: p.template.usage.get(name) for name in p.limit_names} for p in self.pools]
        self.state = st

    def _build_terms(self) -> None:
        """Turn pods' spread/affinity terms into _Terms and precompute what they select."""
        self.terms: list[_Term] = []
        existing_pods: list[tuple[int, str | None, Pod]] = []
        for n in self.state.existing:
            if n.existing is not None:
                existing_pods.extend((n.idx, n.zone, p) for p in n.existing.pods)
        for g in self.groups:
            rep = g.rep
            for sp in rep.spread:
                term = self._spread_term(g, sp)
                if term.topology_key == LABEL_HOSTNAME:
                    g.host_spread.append(term)
                elif term.topology_key == LABEL_ZONE:
                    if g.zone_spread is None:
                        g.zone_spread = term
                    else:
                        continue
                else:
                    continue
                self.terms.append(term)
            for kind, terms in (("aff", rep.affinity), ("anti", rep.anti_affinity)):
                for at in terms:
                    term = self._affinity_term(g, kind, at)
                    if term.topology_key not in (LABEL_HOSTNAME, LABEL_ZONE):
                        continue
                    target = {
                        ("aff", LABEL_HOSTNAME): g.host_aff,
                        ("aff", LABEL_ZONE): g.zone_aff,
                        ("anti", LABEL_HOSTNAME): g.host_anti,
                        ("anti", LABEL_ZONE): g.zone_anti,
                    }[(kind, term.topology_key)]
                    target.append(term)
                    self.terms.append(term)
        for term in self.terms:
            term.matched = frozenset(h.idx for h in self.groups if term.selects(h.rep.namespace, h.rep.labels))
            term.self_match = term.owner in term.matched
            for node_idx, zone, pod in existing_pods:
                if term.selects(pod.namespace, pod.labels):
                    term.existing_node[node_idx] = term.existing_node.get(node_idx, 0) + 1
                    if zone is not None:
                        term.existing_zone[zone] = term.existing_zone.get(zone, 0) + 1
                    term.existing_total += 1
        # anti-affinity is symmetric: a pod may not land next to a pod whose anti-affinity selects it
        for g in self.groups:
            for term in g.host_anti:
                for h in term.matched:
                    g.conflict_host.add(h)
                    self.groups[h].conflict_host.add(g.idx)
            for term in g.zone_anti:
                for h in term.matched:
                    g.conflict_zone.add(h)
                    self.groups[h].conflict_zone.add(g.idx)
        for node_idx, zone, pod in existing_pods:
            for at in pod.anti_affinity:
                for g in self.groups:
                    if at.selects(g.rep.namespace, g.rep.labels):
                        if at.topology_key == LABEL_HOSTNAME:
                            g.blocked_nodes.add(node_idx)
                        elif at.topology_key == LABEL_ZONE and zone is not None:
                            g.blocked_zones.add(zone)
        zone_selected: set[int] = set()
        for term in self.terms:
            if term.topology_key == LABEL_ZONE:
                zone_selected.update(term.matched)
        for _node_idx, _zone, pod in existing_pods:
            for at in pod.anti_affinity:
                if at.topology_key == LABEL_ZONE:
                    zone_selected.update(g.idx for g in self.groups if at.selects(g.rep.namespace, g.rep.labels))
        for g in self.groups:
            if g.zone_aff or g.zone_anti or g.conflict_zone or g.idx in zone_selected:
                g.zone_pin = True
            if g.zone_aff or g.zone_anti or g.host_aff or g.conflict_zone:
                g.per_node_only = True
            if any(not t.self_match for t in (*g.host_aff, *g.zone_aff)):
                g.deferred = True

    def _spread_term(self, g: _Group, sp: TopologySpread) -> _Term:
        return _Term(
            kind="spread",
            owner=g.idx,
            topology_key=sp.topology_key,
            selector=sp.selector,
            namespaces=frozenset({g.rep.namespace}),
            all_ns=False,
            max_skew=max(1, sp.max_skew),
            min_domains=sp.min_domains,
            honor_affinity=sp.honor_node_affinity,
            honor_taints=sp.honor_node_taints,
        )

    def _affinity_term(self, g: _Group, kind: str, at: PodAffinityTerm) -> _Term:
        return _Term(
            kind=kind,
            owner=g.idx,
            topology_key=at.topology_key,
            selector=at.selector,
            namespaces=at.namespaces or frozenset({g.rep.namespace}),
            all_ns=at.all_namespaces,
        )

    # -- cached predicates ------------------------------------------------------------------

    def _untolerated(self, tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> Taint | None:
        key = (tolerations, taints)
        if key not in self._taint_cache:
            self._taint_cache[key] = first_untolerated(tolerations, taints)
        return self._taint_cache[key]

    def _compat(self, reqs: Requirements, slot: _Slot) -> bool:
        key = (reqs, slot.idx)
        hit = self._compat_cache.get(key)
        if hit is None:
            hit = reqs.compatible_with_node(slot.node_side) is None
            self._compat_cache[key] = hit
        return hit

    def _offerings(self, reqs: Requirements, slot: _Slot) -> tuple[Offering, ...]:
        zr = reqs.get(LABEL_ZONE)
        cr = reqs.get(LABEL_CAPACITY_TYPE)
        if zr is None and cr is None:
            return slot.offerings
        key = (zr, cr, slot.idx)
        hit = self._offer_cache.get(key)
        if hit is None:
            hit = tuple(
                o
                for o in slot.offerings
                if (zr is None or zr.allows(o.zone)) and (cr is None or cr.allows(o.capacity_type))
            )
            self._offer_cache[key] = hit
        return hit

    def _intersect(self, a: Requirements, b: Requirements) -> Requirements | None:
        if not b.items:
            return a
        key = (a, b)
        if key in self._inter_cache:
            return self._inter_cache[key]
        merged = a.intersect(b)
        out = merged if merged.is_satisfiable() else None
        self._inter_cache[key] = out
        return out

    # -- static candidates ---------------------------------------------------------------------

    def _prepare_candidates(self, groups: Sequence[_Group]) -> None:
        by_pattern: dict[tuple[tuple[Requirements, ...], tuple[Toleration, ...]], list[tuple[_Slot, int, float]]] = {}
        for g in groups:
            key = (tuple(g.variants), g.tol_key)
            compat = by_pattern.get(key)
            if compat is None:
                compat = []
                for slot in self.slots:
                    if self._untolerated(g.tol_key, slot.pool.blocking_taints) is not None:
                        continue
                    for vi, variant in enumerate(g.variants):
                        if self._compat(variant, slot):
                            offers = self._offerings(variant, slot)
                            if offers:
                                compat.append((slot, vi, offers[0].price))
                                break
                by_pattern[key] = compat
            best_w = float("inf")
            for slot, vi, price in compat:
                k = _fit_count(slot.alloc, g.req)
                if k <= 0:
                    continue
                k = min(k, self._self_cap(g))
                g.kmax[slot.idx] = k
                g.cands.setdefault(slot.pool.tier, []).append((price, slot, vi))
                best_w = min(best_w, price / k)
            g.w = best_w if best_w < float("inf") else 0.0

    def _self_cap(self, g: _Group) -> int:
        cap = 1 << 30
        if g.idx in g.conflict_host:
            cap = 1
        for term in g.host_spread:
            if term.self_match:
                cap = min(cap, term.max_skew + g.host_m.get(id(term), 0))
        return max(cap, 1)

    def _bounds(self, groups: Sequence[_Group]) -> None:
        """Upper bounds on the value a node of each slot can hold, for pruning candidates.

        Over the groups a slot can host, any resource every one of them requests bounds the
        value: sum(k_g * w_g) <= alloc_r * max_g(w_g / req_g[r]).
        """
        if not groups:
            return
        n_dims = len(self.u.names)
        dens: dict[int, list[float]] = {}
        needs: dict[int, list[bool]] = {}
        for g in groups:
            for slot_idx in g.kmax:
                d = dens.get(slot_idx)
                if d is None:
                    d = dens[slot_idx] = [0.0] * n_dims
                    needs[slot_idx] = [True] * n_dims
                nd = needs[slot_idx]
                for i, r in enumerate(g.req):
                    if r:
                        ratio = g.w / r
                        if ratio > d[i]:
                            d[i] = ratio
                    else:
                        nd[i] = False
        for slot in self.slots:
            ub = float("inf")
            d = dens.get(slot.idx)
            if d is not None:
                nd = needs[slot.idx]
                for i in range(n_dims):
                    if nd[i]:
                        ub = min(ub, slot.alloc[i] * d[i])
            slot.ub_value = ub
        for g in groups:
            for tier, cands in g.cands.items():
                ranked = []
                for price, slot, vi in cands:
                    ub = slot.ub_value
                    lb = price / ub if 0.0 < ub < float("inf") else 0.0
                    ranked.append((lb, slot, vi))
                ranked.sort(key=lambda c: (c[0], c[1].min_price, c[1].idx))
                g.cands[tier] = ranked

    # -- main ----------------------------------------------------------------------------------

    def run(self) -> Plan:
        self._build_pools()
        self._build_groups()
        self._build_state()
        self._build_terms()
        zones = {n.zone for n in self.state.existing if n.zone is not None}
        for slot in self.slots:
            zones.update(o.zone for o in slot.offerings)
        self._zones = frozenset(zones)
        for g in self.groups:
            self._hostname_minimums(g)
        self._prepare_candidates(self.groups)
        self._bounds(self.groups)
        if self.groups:
            dims = range(len(self.u.names))
            lows = [min(g.req[d] for g in self.groups) for d in dims]
            self._min_req = [(d, lows[d]) for d in dims if lows[d] > 0]

        gang_ids = sorted({g.gang for g in self.groups if g.gang is not None})
        for gang_id in gang_ids:
            self._place_gang(gang_id, [g for g in self.groups if g.gang == gang_id])
        rest = [g for g in self.groups if g.gang is None]
        parts = self._place_groups(rest, zone=None)
        for part in parts:
            if part.remaining > 0:
                self._fail_part(part)
        return self._finalize()

    def _order(self, groups: Sequence[_Group]) -> list[_Group]:
        return sorted(
            groups,
            key=lambda g: (g.deferred, g.gpu == 0, -g.gpu, -g.w, -sum(g.req), g.idx),
        )

    def _hostname_minimums(self, g: _Group) -> None:
        for term in g.host_spread:
            counts = []
            for n in self.state.existing:
                if n.cordoned:
                    continue
                if term.honor_affinity and not any(v.matches(n.labels) for v in g.required):
                    continue
                if term.honor_taints and self._untolerated(g.tol_key, n.taints) is not None:
                    continue
                counts.append(term.existing_node.get(n.idx, 0))
            m = min(counts) if counts else 0
            if self.pools:
                m = 0
            g.host_m[id(term)] = m

    # -- placing groups --------------------------------------------------------------------------

    def _place_groups(self, groups: Sequence[_Group], *, zone: str | None) -> list[_Part]:
        """Phase 1 (existing, then in-flight) and phase 2 (new nodes) for these groups."""
        ordered = self._order(groups)
        parts: list[_Part] = []
        for g in ordered:
            parts.extend(self._make_parts(g, zone))
        for in_flight in (False, True):
            for part in parts:
                if part.remaining > 0:
                    self._fill_existing(part, in_flight=in_flight)
        active = [p for p in parts if p.remaining > 0]
        self._suffix_min = _suffix_minima([p.group.req for p in active], len(self.u.names))
        for i, part in enumerate(active):
            if part.remaining > 0:
                self._fill_new(part)
            if part.remaining > 0:
                self._open(part, active, i)
        if zone is None:
            self._redistribute(parts)
        return parts

    def _make_parts(self, g: _Group, zone: str | None) -> list[_Part]:
        total = sum(1 for _ in g.pods) - self.state.placed_total.get(g.idx, 0)
        variants = g.variants
        if zone is not None:
            zr = Requirement.in_(LABEL_ZONE, zone)
            variants = [v.with_(zr) for v in variants]
            variants = [v for v in variants if v.is_satisfiable()]
        if g.zone_spread is None or total <= 0:
            return [_Part(g, zone, total, variants)]
        term = g.zone_spread
        domains = self._zone_domains(g, term)
        if zone is not None:
            domains = {z: c for z, c in domains.items() if z == zone} or {zone: 0}
        if not domains:
            return [_Part(g, zone, total, variants)]
        caps = None
        if term.min_domains is not None and len(domains) < term.min_domains:
            # fewer eligible zones than minDomains: the global minimum counts as zero
            caps = {z: max(0, term.max_skew - c) for z, c in domains.items()}
        quotas = _water_fill(domains, total, caps=caps)
        out = []
        leftover = total - sum(quotas.values())
        if leftover > 0:
            stuck = _Part(g, zone, leftover, [])
            stuck.reason = (
                f"{term.describe()}: only {len(domains)} zones are eligible but minDomains is "
                f"{term.min_domains}, so each zone takes at most {term.max_skew} matching pods"
            )
            out.append(stuck)
        for z in sorted(quotas):
            if quotas[z] <= 0:
                continue
            zr = Requirement.in_(LABEL_ZONE, z)
            zv = [v.with_(zr) for v in g.variants]
            zv = [v for v in zv if v.is_satisfiable()]
            part = _Part(g, z, quotas[z], zv)
            out.append(part)
        return out

    def _zone_counts(self, term: _Term) -> dict[str, int]:
        counts = dict(term.existing_zone)
        for (h, z), c in self.state.placed_zone.items():
            if h in term.matched:
                counts[z] = counts.get(z, 0) + c
        return counts

    def _zone_domains(self, g: _Group, term: _Term) -> dict[str, int]:
        """Eligible zones for the group's zonal spread, with current matching-pod counts."""
        zones: set[str] = set()
        for n in self.state.existing:
            if n.zone is None or n.cordoned:
                continue
            if term.honor_affinity and not any(v.matches(n.labels) for v in g.required):
                continue
            if term.honor_taints and self._untolerated(g.tol_key, n.taints) is not None:
                continue
            zones.add(n.zone)
        for cands in g.cands.values():
            for _lb, slot, _vi in cands:
                for variant in g.required:
                    if self._compat(variant, slot):
                        zones.update(o.zone for o in self._offerings(variant, slot))
                        break
        zones -= g.blocked_zones
        counts = self._zone_counts(term)
        return {z: counts.get(z, 0) for z in sorted(zones)}

    # -- constraint checks ----------------------------------------------------------------

    def _host_count(self, term: _Term, node: _Node) -> int:
        count = term.existing_node.get(node.idx, 0) if node.existing is not None else 0
        matched = term.matched
        for h, c in node.placed.items():
            if h in matched:
                count += c
        return count

    def _zone_count(self, term: _Term, zone: str) -> int:
        count = term.existing_zone.get(zone, 0)
        for h in term.matched:
            count += self.state.placed_zone.get((h, zone), 0)
        return count

    def _global_count(self, term: _Term) -> int:
        count = term.existing_total
        for h in term.matched:
            count += self.state.placed_total.get(h, 0)
        return count

    def _node_cap(self, node: _Node, g: _Group) -> int:
        """How many pods of ``g`` the node's pod-level constraints allow (hostname scope)."""
        cap = 1 << 30
        if node.existing is not None and node.idx in g.blocked_nodes:
            return 0
        if g.conflict_host:
            for h in node.placed:
                if h in g.conflict_host:
                    return 0
            if node.existing is not None:
                for term in g.host_anti:
                    if term.existing_node.get(node.idx, 0):
                        return 0
            if g.idx in g.conflict_host:
                cap = 1
        for term in g.host_spread:
            limit = term.max_skew + g.host_m.get(id(term), 0) - self._host_count(term, node)
            if limit <= 0:
                return 0
            if term.self_match:
                cap = min(cap, limit)
        for term in g.host_aff:
            if self._host_count(term, node) > 0:
                continue
            if term.self_match and self._global_count(term) == 0:
                continue
            return 0
        return cap

    def _allowed_zones(self, g: _Group) -> frozenset[str] | None:
        """Zones the group may use now because of zone-scoped pod (anti-)affinity; None: any."""
        if not (g.zone_aff or g.zone_anti or g.conflict_zone or g.blocked_zones):
            return None
        all_zones = self._all_zones()
        allowed = set(all_zones) - g.blocked_zones
        for term in g.zone_anti:
            allowed = {z for z in allowed if self._zone_count(term, z) == 0}
        if g.conflict_zone:
            for h in g.conflict_zone:
                if h == g.idx:
                    continue
                allowed = {z for z in allowed if self.state.placed_zone.get((h, z), 0) == 0}
        for term in g.zone_aff:
            if self._global_count(term) == 0 and term.self_match:
                continue
            allowed = {z for z in allowed if self._zone_count(term, z) > 0}
        return frozenset(allowed)

    def _all_zones(self) -> frozenset[str]:
        return self._zones

    # -- existing nodes ------------------------------------------------------------------------

    def _fill_existing(self, part: _Part, *, in_flight: bool) -> None:
        g = part.group
        req = g.req
        allowed = self._allowed_zones(g)
        for node in self.state.existing:
            if part.remaining <= 0:
                return
            if node.in_flight != in_flight or node.cordoned:
                continue
            if part.zone is not None and node.zone != part.zone:
                continue
            if allowed is not None and node.zone not in allowed:
                continue
            k = _fit_count(node.free, req)
            if k <= 0:
                continue
            if self._untolerated(g.tol_key, node.taints) is not None:
                continue
            if not any(v.matches(node.labels) for v in part.variants):
                continue
            k = min(k, part.remaining, self._node_cap(node, g))
            if k <= 0:
                continue
            if g.per_node_only:
                k = min(k, self._per_node_zone_cap(g))
            self._add(node, part, k)
            if g.per_node_only:
                allowed = self._allowed_zones(g)

    def _per_node_zone_cap(self, g: _Group) -> int:
        if g.idx in g.conflict_zone:
            return 1
        return 1 << 30

    # -- new nodes ------------------------------------------------------------------------------

    def _can_add_new(self, node: _Node, part: _Part, limit: int) -> tuple[int, Requirements]:
        """How many pods of the part fit on a new node (per replica), and the node's new reqs."""
        g = part.group
        slot = node.slot
        assert slot is not None
        if node.gang != g.gang:
            return 0, node.reqs
        if g.kmax.get(slot.idx) is None:
            return 0, node.reqs
        k = _fit_count(node.free, g.req)
        if k <= 0:
            return 0, node.reqs
        k = min(k, limit, self._node_cap(node, g))
        if k <= 0:
            return 0, node.reqs
        new_reqs: Requirements | None = None
        for variant in part.variants:
            if not variant.items:
                new_reqs = node.reqs
                break
            if not self._compat(variant, slot):
                continue
            merged = self._intersect(node.reqs, variant)
            if merged is None or not self._offerings(merged, slot):
                continue
            new_reqs = merged
            break
        if new_reqs is None:
            return 0, node.reqs
        if g.zone_pin or g.per_node_only:
            allowed = self._allowed_zones(g)
            offers = self._offerings(new_reqs, slot)
            zones = sorted({o.zone for o in offers if allowed is None or o.zone in allowed})
            if not zones:
                return 0, node.reqs
            if len(zones) > 1 or new_reqs.get(LABEL_ZONE) is None:
                best = min((o for o in offers if o.zone in zones), key=lambda o: (o.price, o.zone))
                pinned = self._intersect(new_reqs, Requirements((Requirement.in_(LABEL_ZONE, best.zone),)))
                if pinned is None:
                    return 0, node.reqs
                new_reqs = pinned
            if g.idx in g.conflict_zone:
                k = min(k, 1)
        if slot.pool.min_value_reqs and not self._min_values_ok(node, g, k, new_reqs):
            lo, hi = 0, k
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._min_values_ok(node, g, mid, new_reqs):
                    lo = mid
                else:
                    hi = mid - 1
            k = lo
        return k, new_reqs

    def _min_values_ok(self, node: _Node, g: _Group, k: int, reqs: Requirements) -> bool:
        if k <= 0:
            return True
        assert node.slot is not None
        pool = node.slot.pool
        used = [a - f + k * r for a, f, r in zip(node.slot.alloc, node.free, g.req, strict=True)]
        fitting = [s for s in pool.slots if self._slot_hosts(s, used, reqs)]
        for mreq in pool.min_value_reqs:
            values = {s.it.labels.get(mreq.key) for s in fitting} - {None}
            if mreq.key == LABEL_INSTANCE_TYPE:
                values = {s.it.name for s in fitting}
            if len(values) < (mreq.min_values or 0):
                return False
        return True

    def _slot_hosts(self, slot: _Slot, used: Sequence[int], reqs: Requirements) -> bool:
        return _fits(used, slot.alloc) and self._compat(reqs, slot) and bool(self._offerings(reqs, slot))

    def _add(self, node: _Node, part: _Part, k: int, reqs: Requirements | None = None) -> None:
        """Put k pods of the part on each of the node's replicas."""
        if self._journal is not None:
            self._touch(node)
        g = part.group
        free = node.free
        for i, r in enumerate(g.req):
            if r:
                free[i] -= k * r
        if node.existing is None and not node.closed:
            for d, m in self._min_req:
                if free[d] < m:
                    node.closed = True
                    self.state.closed += 1
                    break
        node.placed[g.idx] = node.placed.get(g.idx, 0) + k
        if node.content and node.content[-1][0] == g.idx:
            node.content[-1][1] += k
        else:
            node.content.append([g.idx, k])
        if reqs is not None and reqs is not node.reqs:
            node.reqs = reqs
            if node.existing is None:
                zr = reqs.get(LABEL_ZONE)
                if zr is not None:
                    node.zone = zr.single_value()
        total = k * node.mult
        part.placed += total
        part.remaining -= total
        st = self.state
        st.placed_total[g.idx] = st.placed_total.get(g.idx, 0) + total
        if node.zone is not None:
            key = (g.idx, node.zone)
            st.placed_zone[key] = st.placed_zone.get(key, 0) + total

    def _fill_new(self, part: _Part) -> None:
        """First fit into the new nodes already opened in this plan (replica batches split as needed)."""
        st = self.state
        if st.closed > 64 and st.closed * 2 > len(st.open):
            st.open = [n for n in st.open if not n.closed]
            st.closed = 0
        nodes = st.open
        g = part.group
        req = g.req
        i = 0
        while i < len(nodes) and part.remaining > 0:
            node = nodes[i]
            if node.closed or node.gang != g.gang or not all(map(le, req, node.free)):
                i += 1
                continue
            k, reqs = self._can_add_new(node, part, part.remaining)
            if k <= 0:
                i += 1
                continue
            full = min(node.mult, part.remaining // k)
            if g.per_node_only:
                full = min(full, 1)
            if full >= node.mult:
                self._add(node, part, k, reqs)
                i += 1
                continue
            # only some replicas take pods: split them off, then look at the rest again
            if self._journal is not None:
                self._touch(node)
            split = node.copy()
            split.mult = full
            st.split_counter += 1
            split.sub = st.split_counter
            node.mult -= full
            self._add(split, part, k, reqs)
            nodes.insert(i, split)
            st.new.append(split)
            i += 1

    def _limit_room(self, slot: _Slot) -> int:
        """How many more nodes of this slot the pool's limits allow."""
        pool = slot.pool
        if not pool.limit_names:
            return 1 << 30
        usage = self.state.usage[pool.idx]
        room = 1 << 30
        for name, cap in zip(pool.limit_names, slot.cap_limits, strict=True):
            if cap <= 0:
                continue
            left = pool.limits.get(name) - usage.get(name, 0)
            room = min(room, max(left, 0) // cap)
        return room

    def _new_node(self, slot: _Slot, reqs: Requirements, gang: str | None) -> _Node:
        n = _Node()
        n.slot = slot
        n.pool = slot.pool
        n.free = list(slot.alloc)
        n.reqs = reqs
        n.gang = gang
        zr = reqs.get(LABEL_ZONE)
        n.zone = zr.single_value() if zr is not None else None
        return n

    def _open(self, head: _Part, active: list[_Part], index: int) -> None:
        """Open new nodes for the head part until it is placed or nothing can host it."""
        while head.remaining > 0:
            sim = self._choose(head, active, index)
            if sim is None:
                return
            self._commit(sim, head)

    def _commit(self, sim: _Sim, head: _Part) -> None:
        """Create the simulated node, replicated as often as its pattern's pods allow."""
        g = head.group
        mult = 1
        if not g.per_node_only and not any(p.group.per_node_only for p, _ in sim.pattern):
            mult = min(p.remaining // k for p, k in sim.pattern)
            mult = max(1, min(mult, self._limit_room(sim.slot)))
            if any(t.self_match and self._global_count(t) == 0 for p, _ in sim.pattern for t in p.group.host_aff):
                mult = 1
        node = self._new_node(sim.slot, sim.slot.pool.base, g.gang)
        node.idx = self.state.node_counter
        self.state.node_counter += 1
        node.mult = mult
        node.reqs = sim.node.reqs
        zr = node.reqs.get(LABEL_ZONE)
        node.zone = zr.single_value() if zr is not None else None
        for part, k in sim.pattern:
            self._add(node, part, k)
        usage = self.state.usage[sim.slot.pool.idx]
        for name, cap in zip(sim.slot.pool.limit_names, sim.slot.cap_limits, strict=True):
            usage[name] = usage.get(name, 0) + cap * mult
        self.state.new.append(node)
        self.state.open.append(node)

    def _choose(self, head: _Part, active: list[_Part], index: int) -> _Sim | None:
        g = head.group
        for tier in self.tiers:
            cands = g.cands.get(tier)
            if not cands:
                continue
            best: _Sim | None = None
            tried: list[_Sim] = []
            # Try candidates in order of their head-only price per value, pruned by the bound
            # and by a streak of candidates that did not improve on the best.
            rem = head.remaining
            w = g.w if g.w > 0 else 1.0
            kmax = g.kmax
            ranked = sorted(cands, key=lambda c: (c[1].min_price / (min(kmax[c[1].idx], rem) * w), c[0], c[1].idx))
            pilot = not self._in_rollout and self._rollouts_left > 0 and self._tail_small(active, index)
            tail = [(j, active[j]) for j in range(index + 1, len(active)) if active[j].remaining > 0]
            together = any(t.self_match and self._global_count(t) == 0 for t in g.host_aff)
            streak = 0
            max_streak = _MAX_STREAK_PILOT if pilot else _MAX_STREAK_ROLLOUT if self._in_rollout else _MAX_STREAK
            for lb, slot, _vi in ranked:
                if best is not None and not together:
                    if streak >= max_streak:
                        break
                    if not pilot and lb >= best.ratio * (1 - 1e-6):
                        continue
                if self._limit_room(slot) <= 0:
                    continue
                sim = self._simulate(slot, head, tail)
                if sim is None:
                    continue
                tried.append(sim)
                if pilot:
                    alt = self._simulate(slot, head, tail, by_density=True)
                    if alt is not None and alt.pattern != sim.pattern:
                        tried.append(alt)
                if best is None or _better(sim, best):
                    best = sim
                    streak = 0
                else:
                    streak += 1
            if best is not None:
                if together:
                    # every replica must share this one node: the cheapest that takes the most
                    return min(tried, key=lambda sim: (-sim.pattern[0][1], sim.price, sim.slot.it.name))
                if pilot:
                    tried.extend(self._fewer_head_variants(tried, head, tail))
                    if len(tried) > 1:
                        return self._pilot(tried, head, active, index)
                return best
        return None

    def _fewer_head_variants(self, tried: list[_Sim], head: _Part, tail: list[tuple[int, _Part]]) -> list[_Sim]:
        """For the best few slots, the same node with fewer head pods, to leave room for others."""
        out: list[_Sim] = []
        seen: set[int] = set()
        for sim in sorted(tried, key=_sim_order):
            if sim.slot.idx in seen:
                continue
            seen.add(sim.slot.idx)
            if len(seen) > _ROLLOUT_CANDIDATES:
                break
            k = sim.pattern[0][1]
            for fewer in sorted({k - 1, k - 2, (2 * k) // 3, k // 2}, reverse=True):
                if 1 <= fewer < k:
                    alt = self._simulate(sim.slot, head, tail, by_density=True, head_limit=fewer)
                    if alt is not None and len(alt.pattern) > 1:
                        out.append(alt)
            # the same node filled starting with each of the next few parts it can take
            patterns = [sim.pattern]
            firsts = [pos for pos, (_j, p) in enumerate(tail) if sim.slot.idx in p.group.kmax][:_ROLLOUT_FIRSTS]
            for pos in firsts:
                alt = self._simulate(sim.slot, head, tail, first=pos)
                if alt is not None and alt.pattern not in patterns:
                    patterns.append(alt.pattern)
                    out.append(alt)
        return out

    def _tail_small(self, active: list[_Part], index: int) -> bool:
        left = 0
        for j in range(index, len(active)):
            left += active[j].remaining
            if left > _ROLLOUT_MAX_PODS:
                return False
        return True

    def _pilot(self, tried: list[_Sim], head: _Part, active: list[_Part], index: int) -> _Sim:
        """Pick among the best candidates by completing the packing greedily after each."""
        # the best few instance types, each with its best few packings (fill orders, head sizes)
        by_slot: dict[int, list[_Sim]] = {}
        for sim in sorted(tried, key=_sim_order):
            by_slot.setdefault(sim.slot.idx, []).append(sim)
        ranked = []
        for sims in list(by_slot.values())[:_ROLLOUT_CANDIDATES]:
            ranked.extend(sims[:_ROLLOUT_VARIANTS])
        # also the nodes that take the most pods for their price: they may finish the job at once
        for sim in sorted(tried, key=lambda x: (-sum(k for _p, k in x.pattern), x.price, x.slot.it.name))[:2]:
            if sim not in ranked:
                ranked.append(sim)
        best: tuple[float, int] | None = None
        for i, sim in enumerate(ranked):
            cost = self._rollout(sim, head, active, index)
            if best is None or cost < best[0] - _EPS:
                best = (cost, i)
        assert best is not None
        return ranked[best[1]]

    def _rollout(self, sim: _Sim, head: _Part, active: list[_Part], index: int) -> float:
        self._rollouts_left -= 1
        st = self.state
        saved_len = len(st.new)
        saved_open = list(st.open)
        saved_closed = st.closed
        saved_splits = st.split_counter
        saved_usage = [dict(u) for u in st.usage]
        saved_zone = dict(st.placed_zone)
        saved_total = dict(st.placed_total)
        saved_counter = st.node_counter
        saved_parts = [(p, p.placed, p.remaining, p.quota) for p in active]
        journal: dict[int, tuple[_Node, _Node]] = {}
        self._journal = journal
        self._in_rollout = True
        try:
            self._commit(sim, head)
            self._open(head, active, index)
            for j in range(index + 1, len(active)):
                part = active[j]
                if part.remaining > 0:
                    self._fill_new(part)
                if part.remaining > 0:
                    self._open(part, active, j)
            # every candidate starts from the same state: compare what each adds
            cost = sum(self._node_price(n) * n.mult for n in st.new[saved_len:])
            for node, saved in journal.values():
                if node.slot is not None and saved.slot is not None:
                    cost += self._node_price(node) * node.mult - self._node_price(saved) * saved.mult
            cost += sum(p.remaining for p in active[index:]) * _UNPLACED_PENALTY
            return cost
        finally:
            self._in_rollout = False
            self._journal = None
            for node, saved in journal.values():
                _restore_node(node, saved)
            del st.new[saved_len:]
            st.open = saved_open
            st.closed = saved_closed
            st.split_counter = saved_splits
            st.usage = saved_usage
            st.placed_zone = saved_zone
            st.placed_total = saved_total
            st.node_counter = saved_counter
            for p, placed, remaining, quota in saved_parts:
                p.placed, p.remaining, p.quota = placed, remaining, quota

    def _touch(self, node: _Node) -> None:
        journal = self._journal
        if journal is not None and id(node) not in journal:
            journal[id(node)] = (node, node.copy())

    def _simulate(
        self,
        slot: _Slot,
        head: _Part,
        tail: list[tuple[int, _Part]],
        *,
        by_density: bool = False,
        head_limit: int | None = None,
        first: int | None = None,
    ) -> _Sim | None:
        """Pack the head part on a fresh node of the slot, then fill it with the parts after it.

        ``tail`` is (index in the phase, part) for the parts after the head that still have pods.
        The fill goes in the global (first-fit-decreasing) order, or, ``by_density``, in order
        of value per share of the room left after the head (a knapsack greedy), or starting
        with ``tail[first]``.
        """
        g = head.group
        node = self._new_node(slot, slot.pool.base, g.gang)
        node.idx = -1
        undo: list[tuple[int, str | None, int]] = []
        try:
            limit = head.remaining if head_limit is None else min(head.remaining, head_limit)
            k, reqs = self._can_add_new(node, head, limit)
            if k <= 0:
                return None
            pattern: list[tuple[_Part, int]] = [(head, k)]
            self._sim_add(node, head, k, reqs, undo)
            value = k * g.w
            pods_i = self.u.index[PODS]
            misses = 0
            free = node.free
            suffix: list[Vec] | None = self._suffix_min
            order: Sequence[tuple[int, _Part]] = tail
            if by_density:
                order = self._density_order(slot, free, tail)
                suffix = None
            elif first is not None:
                order = [tail[first], *(t for pos, t in enumerate(tail) if pos != first)]
                suffix = None
            for j, part in order:
                if free[pods_i] <= 0 or misses >= _MAX_FILL_MISSES:
                    break
                if suffix is not None and j < len(suffix) and not all(map(le, suffix[j], free)):
                    break
                if part.remaining <= 0:
                    continue
                pg = part.group
                if pg.gang != g.gang or pg.kmax.get(slot.idx) is None or not _fits(pg.req, free):
                    misses += 1
                    continue
                k2, reqs2 = self._can_add_new(node, part, part.remaining)
                if k2 <= 0:
                    misses += 1
                    continue
                pattern.append((part, k2))
                self._sim_add(node, part, k2, reqs2, undo)
                value += k2 * pg.w
            offers = self._offerings(node.reqs, slot)
            if not offers:
                return None
            return _Sim(node, slot, pattern, offers[0].price, value)
        finally:
            st = self.state
            for gi, zone, c in undo:
                st.placed_total[gi] -= c
                if zone is not None:
                    st.placed_zone[(gi, zone)] -= c

    def _density_order(
        self, slot: _Slot, free: Sequence[int], tail: list[tuple[int, _Part]]
    ) -> list[tuple[int, _Part]]:
        scored = []
        for pos, (_j, part) in enumerate(tail):
            pg = part.group
            if part.remaining <= 0 or slot.idx not in pg.kmax:
                continue
            share = 0.0
            for r, f in zip(pg.req, free, strict=True):
                if r:
                    share = max(share, r / f if f > 0 else float("inf"))
            if share == float("inf"):
                continue
            scored.append((-(pg.w / share) if share > 0 else 0.0, pos))
        scored.sort()
        return [tail[pos] for _score, pos in scored]

    def _sim_add(
        self, node: _Node, part: _Part, k: int, reqs: Requirements, undo: list[tuple[int, str | None, int]]
    ) -> None:
        g = part.group
        free = node.free
        for i, r in enumerate(g.req):
            if r:
                free[i] -= k * r
        node.placed[g.idx] = node.placed.get(g.idx, 0) + k
        node.reqs = reqs
        zr = reqs.get(LABEL_ZONE)
        node.zone = zr.single_value() if zr is not None else None
        st = self.state
        st.placed_total[g.idx] = st.placed_total.get(g.idx, 0) + k
        if node.zone is not None:
            key = (g.idx, node.zone)
            st.placed_zone[key] = st.placed_zone.get(key, 0) + k
        undo.append((g.idx, node.zone, k))

    # -- failures and redistribution ------------------------------------------------------------

    def _redistribute(self, parts: list[_Part]) -> None:
        """Zonal spread parts that could not be placed move to other zones within maxSkew."""
        by_group: dict[int, list[_Part]] = {}
        for part in parts:
            if part.group.zone_spread is not None and part.zone is not None:
                by_group.setdefault(part.group.idx, []).append(part)
        for gparts in by_group.values():
            g = gparts[0].group
            term = g.zone_spread
            assert term is not None
            for _round in range(8):
                stuck = [p for p in gparts if p.remaining > 0]
                if not stuck:
                    break
                left = sum(p.remaining for p in stuck)
                stuck_zones = {p.zone for p in stuck}
                counts = self._zone_counts(term)
                domains = self._zone_domains(g, term)
                floor = min(domains.values()) if domains else 0
                floor = min([floor] + [counts.get(z, 0) for z in stuck_zones if z is not None])
                caps = {z: max(0, floor + term.max_skew - c) for z, c in domains.items() if z not in stuck_zones}
                if not any(caps.values()):
                    break
                quotas = _water_fill({z: domains[z] for z in caps}, left, caps=caps)
                moved = 0
                for p in stuck:
                    p.set_quota(p.quota - p.remaining)
                new_parts = []
                for z in sorted(quotas):
                    if quotas[z] <= 0:
                        continue
                    zr = Requirement.in_(LABEL_ZONE, z)
                    zv = [v.with_(zr) for v in g.variants]
                    part = _Part(g, z, quotas[z], [v for v in zv if v.is_satisfiable()])
                    new_parts.append(part)
                for part in new_parts:
                    for in_flight in (False, True):
                        if part.remaining > 0:
                            self._fill_existing(part, in_flight=in_flight)
                    if part.remaining > 0:
                        self._fill_new(part)
                    if part.remaining > 0:
                        self._open(part, [part], 0)
                    moved += part.placed
                unplaced = left - moved
                gparts.extend(new_parts)
                parts.extend(new_parts)
                # what could not move stays with the first stuck part, to be reported
                stuck[0].set_quota(stuck[0].quota + unplaced)
                for p in new_parts:
                    p.set_quota(p.placed)
                if moved == 0:
                    break

    def _fail_part(self, part: _Part) -> None:
        g = part.group
        reason = part.reason or self._explain(g, part.zone)
        placed_pods = self._pods_taken(g)
        for pod in g.pods[placed_pods : placed_pods + part.remaining]:
            self.unschedulable[pod.key] = reason
        self._taken[g.idx] = placed_pods + part.remaining
        part.set_quota(part.placed)

    def _pods_taken(self, g: _Group) -> int:
        return self._taken.get(g.idx, 0)

    # -- gangs -----------------------------------------------------------------------------------

    def _place_gang(self, gang_id: str, groups: list[_Group]) -> None:
        opts = self.gang_opts.get(gang_id, Gang(gang_id))
        zones: list[str | None] = [None]
        if opts.same_zone:
            zones = [*sorted(self._all_zones())]
        best: tuple[float, str | None] | None = None
        failure: tuple[int, str] | None = None
        for zone in zones:
            snapshot = self.state.copy()
            parts = self._place_groups(groups, zone=zone)
            if all(p.remaining <= 0 for p in parts):
                cost = sum(self._node_price(n) * n.mult for n in self.state.new if n.gang == gang_id)
                if best is None or cost < best[0] - _EPS:
                    best = (cost, zone)
            elif failure is None:
                # explain while the gang's own placements still count (e.g. towards limits)
                stuck = next(p for p in parts if p.remaining > 0)
                reason = stuck.reason or self._explain(stuck.group, stuck.zone)
                failure = (sum(p.remaining for p in parts), reason)
            self.state = snapshot
        if best is not None:
            parts = self._place_groups(groups, zone=best[1])
            return
        # nothing placed: every member is unschedulable, with the first member's reason
        members = sorted((p for g in groups for p in g.pods), key=lambda p: (p.namespace, p.name))
        missing, first_reason = failure if failure is not None else (len(members), "no zone can host the gang")
        text = f"gang {gang_id!r}: {missing} of {len(members)} pods cannot be placed, so none is: {first_reason}"
        for pod in members:
            self.unschedulable[pod.key] = text
        for g in groups:
            self._taken[g.idx] = len(g.pods)

    def _node_price(self, node: _Node) -> float:
        assert node.slot is not None
        offers = self._offerings(node.reqs, node.slot)
        return offers[0].price if offers else node.slot.min_price

    # -- explanations ----------------------------------------------------------------------------

    def _explain(self, g: _Group, zone: str | None) -> str:
        if not g.variants:
            return "its required node affinity can never be satisfied (every term is contradictory)"
        dynamic = self._dynamic_reason(g, zone)
        if not self.pools:
            base = "no NodePool exists and no existing node has room"
            return f"{dynamic}; {base}" if dynamic else base
        msgs = [self._pool_reason(pool, g, zone) for pool in self.pools]
        statically_ok = [m for m in msgs if m is None]
        if statically_ok:
            return dynamic or "no node with room satisfies all of its constraints"
        text = "; ".join(m for m in msgs if m is not None)
        if dynamic:
            text = f"{dynamic}: {text}"
        return text

    def _dynamic_reason(self, g: _Group, zone: str | None) -> str | None:
        for term in g.host_aff + g.zone_aff:
            if self._global_count(term) == 0 and not term.self_match:
                return f"pod affinity on {term.topology_key}: no pod matches its selector ({term.selector})"
            if term.self_match and term.topology_key == LABEL_HOSTNAME:
                return (
                    f"pod affinity on {term.topology_key}: the pods it selects must share one node, "
                    "and that node has no room left"
                )
        for term in g.zone_anti:
            if all(self._zone_count(term, z) > 0 for z in self._all_zones()):
                return f"pod anti-affinity on {term.topology_key}: every zone already runs a matching pod"
        if g.zone_anti or g.zone_aff:
            allowed = self._allowed_zones(g)
            if allowed is not None and not allowed:
                return "pod (anti-)affinity on topology.kubernetes.io/zone leaves no zone"
        if g.zone_spread is not None and zone is not None:
            return f"{g.zone_spread.describe()} needs it in zone {zone}"
        return None

    def _pool_reason(self, pool: _Pool, g: _Group, zone: str | None) -> str | None:
        """Why the pool cannot host the group (None: it could, as far as static checks go)."""
        name = f'nodepool "{pool.name}"'
        taint = self._untolerated(g.tol_key, pool.blocking_taints)
        if taint is not None:
            return f"{name}: pod does not tolerate taint {taint}"
        required = g.required
        if zone is not None:
            required = [v.with_(Requirement.in_(LABEL_ZONE, zone)) for v in required]
        # pool-level conflicts (keys the pool itself fixes)
        conflicts: list[str] = []
        for term in required:
            conflict = self._pool_conflict(pool, term)
            if conflict is None:
                conflicts = []
                break
            conflicts.append(conflict)
        if conflicts:
            return f"{name}: {conflicts[0]}"
        if not pool.slots:
            if not pool.template.instance_types:
                return f"{name}: has no instance types"
            return f"{name}: no instance type with an available offering matches the nodepool's requirements"
        compat = [s for s in pool.slots if any(self._compat(t, s) for t in required)]
        if not compat:
            return f"{name}: {self._type_mismatch(pool, required)}"
        offered = [s for s in compat if any(self._compat(t, s) and self._offerings(t, s) for t in required)]
        if not offered:
            where = []
            for t in required:
                zr, cr = t.get(LABEL_ZONE), t.get(LABEL_CAPACITY_TYPE)
                if zr is not None:
                    where.append(str(zr))
                if cr is not None:
                    where.append(str(cr))
            return f"{name}: no compatible instance type has an available offering for {' and '.join(where)}"
        fitting = [s for s in offered if _fits(g.req, s.alloc)]
        if not fitting:
            return f"{name}: {self._resource_shortfall(g, offered)}"
        if all(self._limit_room(s) <= 0 for s in fitting):
            return f"{name}: {self._limit_message(pool, fitting)}"
        short = self._min_values_shortfall(pool, fitting)
        if short is not None:
            return f"{name}: {short}"
        return None

    @staticmethod
    def _min_values_shortfall(pool: _Pool, fitting: Sequence[_Slot]) -> str | None:
        """A minValues requirement that even a node for this one pod cannot meet, in words."""
        for mreq in pool.min_value_reqs:
            if mreq.key == LABEL_INSTANCE_TYPE:
                values = {s.it.name for s in fitting}
            else:
                values = {v for s in fitting if (v := s.it.labels.get(mreq.key)) is not None}
            need = mreq.min_values or 0
            if len(values) < need:
                listed = ", ".join(sorted(values)[:6]) + (", ..." if len(values) > 6 else "")
                return (
                    f"its requirement on {mreq.key} has minValues {need}, but only {len(values)} "
                    f"value(s) can host the pod ({listed or 'none'}); lower minValues or widen the requirement"
                )
        return None

    def _pool_conflict(self, pool: _Pool, term: Requirements) -> str | None:
        for req in term:
            if req.key in self.type_keys and req.key not in (LABEL_ZONE, LABEL_CAPACITY_TYPE):
                pr = pool.base.get(req.key)
                if pr is not None and req.intersect(pr).is_empty():
                    return f"pod requires {req} but the nodepool requires {pr}"
                continue
            pr = pool.base.get(req.key)
            if pr is None:
                if req.key in (LABEL_ZONE, LABEL_CAPACITY_TYPE):
                    continue
                if req.key == LABEL_HOSTNAME:
                    if not req.allows_fresh_value():
                        return f"pod requires {req}, which no new node can have"
                    continue
                if not req.allow_absent:
                    return f"pod requires {req} but the nodepool's nodes have no label {req.key}"
                continue
            if req.intersect(pr).is_empty():
                return f"pod requires {req} but the nodepool requires {pr}"
        return None

    def _type_mismatch(self, pool: _Pool, required: Sequence[Requirements]) -> str:
        term = required[0]
        for req in term:
            if req.key in (LABEL_ZONE, LABEL_CAPACITY_TYPE, LABEL_NODEPOOL):
                continue
            single = Requirements((req,))
            if not any(self._compat(single, s) for s in pool.slots):
                offered = sorted({v for s in pool.slots if (v := s.it.labels.get(req.key)) is not None})
                shown = ", ".join(offered[:8]) + (", ..." if len(offered) > 8 else "")
                if offered:
                    return f"no instance type matches {req} (its instance types have {req.key}: {shown})"
                return f"no instance type matches {req} (none has label {req.key})"
        return f"no instance type matches all of {term}"

    def _resource_shortfall(self, g: _Group, slots: Sequence[_Slot]) -> str:
        short = []
        overhead_matters = False
        for i, name in enumerate(self.u.names):
            need = g.req[i]
            if not need:
                continue
            largest = max(s.alloc[i] for s in slots)
            if largest == 0:
                short.append(name)
                continue
            if need > largest:
                raw = max(s.it.allocatable.get(name) for s in slots)
                if need <= raw:
                    overhead_matters = True
                short.append(
                    f"{format_human(name, need)} {name} (largest: {format_human(name, largest)})"
                    if name not in ("cpu",)
                    else f"{format_human(name, need)} cpu (largest: {format_human(name, largest)})"
                )
        suffix = " after daemonset overhead" if overhead_matters else ""
        if short:
            return "no instance type has " + " or ".join(short) + suffix
        want = ", ".join(f"{n} {format_human(n, v)}" for n, v in zip(self.u.names, g.req, strict=True) if v)
        return f"no instance type fits {want} together{suffix}"

    def _limit_message(self, pool: _Pool, slots: Sequence[_Slot]) -> str:
        usage = self.state.usage[pool.idx]
        cheapest = min(slots, key=lambda s: (s.min_price, s.it.name))
        for name, cap in zip(pool.limit_names, cheapest.cap_limits, strict=True):
            limit = pool.limits.get(name)
            used = usage.get(name, 0)
            if cap > 0 and used + cap > limit:
                return (
                    f"would exceed its limit {name} ({format_human(name, used)} of {format_human(name, limit)} in use)"
                )
        return "would exceed its limits"

    # -- output ----------------------------------------------------------------------------------

    def _finalize(self) -> Plan:
        # pod assignment: existing nodes first (name order), then new nodes in opening order
        taken = self._taken
        queues: dict[int, int] = dict(taken)
        existing: dict[str, tuple[str, ...]] = {}

        def take(group_idx: int, count: int) -> list[str]:
            g = self.groups[group_idx]
            start = queues.get(group_idx, 0)
            queues[group_idx] = start + count
            return [p.key for p in g.pods[start : start + count]]

        for node in self.state.existing:
            if node.content:
                keys: list[str] = []
                for gi, k in node.content:
                    keys.extend(take(gi, k))
                assert node.existing is not None
                existing[node.existing.name] = tuple(keys)

        new_nodes: list[NewNodeClaim] = []
        per_pool: dict[str, int] = {}
        reqs_cache: dict[tuple[Requirements, int], Requirements] = {}
        index = 0
        for node in sorted(self.state.new, key=lambda n: (n.idx, n.sub)):
            if not node.content:
                continue
            slot = node.slot
            assert slot is not None
            used = [a - f for a, f in zip(slot.alloc, node.free, strict=True)]
            cands = self._candidates(node, used)
            if not cands:
                cands = [(slot, self._offerings(node.reqs, slot))]
            best_slot = cands[0][0]
            if best_slot is not slot:
                usage = self.state.usage[slot.pool.idx]
                for name, old, new in zip(slot.pool.limit_names, slot.cap_limits, best_slot.cap_limits, strict=True):
                    usage[name] = usage.get(name, 0) + (new - old) * node.mult
            requests_base = sum_resources(self.groups[gi].req_res.scale(k) for gi, k in node.content)
            requests = requests_base + best_slot.overhead
            candidates, choice, extra = self._candidate_info(cands)
            reqs_key = (node.reqs, id(cands))
            reqs = reqs_cache.get(reqs_key)
            if reqs is None:
                reqs = reqs_cache[reqs_key] = node.reqs.with_(*extra)
            pool = slot.pool
            for _ in range(node.mult):
                keys = []
                for gi, k in node.content:
                    keys.extend(take(gi, k))
                per_pool[pool.name] = per_pool.get(pool.name, 0) + 1
                new_nodes.append(
                    NewNodeClaim(
                        name=f"{pool.name}-{per_pool[pool.name]}",
                        index=index,
                        node_pool=pool.name,
                        pods=tuple(keys),
                        requests=requests,
                        requirements=reqs,
                        candidates=candidates,
                        choice=choice,
                        labels=pool.template.labels,
                        taints=pool.template.taints,
                        startup_taints=pool.template.startup_taints,
                        gang=node.gang,
                    )
                )
                index += 1
        total = round(sum(n.choice.price for n in new_nodes), 6)
        return Plan(
            new_nodes=tuple(new_nodes),
            existing_placements=existing,
            unschedulable=dict(sorted(self.unschedulable.items())),
            total_price=total,
        )

    def _candidate_info(
        self, cands: list[tuple[_Slot, tuple[Offering, ...]]]
    ) -> tuple[tuple[InstanceCandidate, ...], InstanceChoice, tuple[Requirement, ...]]:
        """Output form of a candidate list (memoized: replicas share their candidate lists)."""
        key = tuple((s.idx, id(offers)) for s, offers in cands)
        hit = self._info_cache.get(key)
        if hit is not None:
            return hit[1]
        candidates = tuple(
            InstanceCandidate(instance_type=s.it.name, price=offers[0].price, offerings=offers) for s, offers in cands
        )
        first = candidates[0].offerings[0]
        choice = InstanceChoice(
            instance_type=candidates[0].instance_type,
            zone=first.zone,
            capacity_type=first.capacity_type,
            price=first.price,
        )
        extra = (
            Requirement(LABEL_INSTANCE_TYPE, False, frozenset(c.instance_type for c in candidates)),
            Requirement(LABEL_ZONE, False, frozenset(o.zone for c in candidates for o in c.offerings)),
            Requirement(
                LABEL_CAPACITY_TYPE, False, frozenset(o.capacity_type for c in candidates for o in c.offerings)
            ),
        )
        info = (candidates, choice, extra)
        self._info_cache[key] = (cands, info)
        return info

    def _slot_index(self, pool: _Pool) -> _SlotIndex:
        index = self._slot_indexes.get(pool.idx)
        if index is None:
            index = self._slot_indexes[pool.idx] = _SlotIndex([s.alloc for s in pool.slots], len(self.u.names))
        return index

    def _candidates(self, node: _Node, used: Sequence[int]) -> list[tuple[_Slot, tuple[Offering, ...]]]:
        """All slots of the node's pool that can host its pods, cheapest first."""
        slot = node.slot
        assert slot is not None
        pool = slot.pool
        group_ids = tuple(sorted({gi for gi, _ in node.content}))
        cache_key = None
        if not pool.limit_names:
            cache_key = (pool.idx, tuple(used), node.reqs, group_ids)
            hit = self._cand_cache.get(cache_key)
            if hit is not None:
                return hit
        kmaxes = [self.groups[gi].kmax for gi in group_ids]
        usage = self.state.usage[pool.idx]
        out: list[tuple[float, str, _Slot, tuple[Offering, ...]]] = []
        index = self._slot_index(pool)
        mask = index.fitting(used)
        slots = pool.slots
        while mask:
            low = mask & -mask
            mask ^= low
            s = slots[low.bit_length() - 1]
            idx = s.idx
            if not all(idx in km for km in kmaxes):
                continue
            if not self._compat(node.reqs, s):
                continue
            offers = self._offerings(node.reqs, s)
            if not offers:
                continue
            if s is not slot and pool.limit_names:
                over = False
                for name, old, new in zip(pool.limit_names, slot.cap_limits, s.cap_limits, strict=True):
                    if usage.get(name, 0) + (new - old) * node.mult > pool.limits.get(name):
                        over = True
                        break
                if over:
                    continue
            out.append((offers[0].price, s.it.name, s, offers))
        out.sort(key=lambda c: (c[0], c[1]))
        result = [(s, offers) for _p, _n, s, offers in out]
        if cache_key is not None:
            self._cand_cache[cache_key] = result
        return result


class _SlotIndex:
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


def _sim_order(sim: _Sim) -> tuple[float, float, float, str]:
    return (sim.ratio, -sim.value, sim.price, sim.slot.it.name)


def _restore_node(node: _Node, saved: _Node) -> None:
    node.closed = saved.closed
    node.free = saved.free
    node.placed = saved.placed
    node.content = saved.content
    node.reqs = saved.reqs
    node.zone = saved.zone
    node.mult = saved.mult


def _suffix_minima(reqs: Sequence[Vec], dims: int) -> list[Vec]:
    """out[j] = per-dimension minimum of reqs[j:] (out[len] = +inf-like): a lower bound on what
    any later part needs, so a fill can stop once the free space is below it."""
    big = 1 << 62
    out: list[Vec] = [tuple([big] * dims)] * (len(reqs) + 1)
    current = [big] * dims
    for j in range(len(reqs) - 1, -1, -1):
        current = [min(c, r) for c, r in zip(current, reqs[j], strict=True)]
        out[j] = tuple(current)
    return out


def _better(a: _Sim, b: _Sim) -> bool:
    if a.ratio < b.ratio * (1 - 1e-9):
        return True
    if a.ratio > b.ratio * (1 + 1e-9):
        return False
    if abs(a.value - b.value) > 1e-12:
        return a.value > b.value
    return (a.price, a.slot.it.name) < (b.price, b.slot.it.name)


def _water_fill(counts: Mapping[str, int], n: int, *, caps: Mapping[str, int] | None) -> dict[str, int]:
    """Spread n pods over zones, always into a zone with the lowest count (ties: zone name).

    ``caps`` bounds how many each zone may take. Returns pods per zone.
    """
    current = dict(counts)
    out = dict.fromkeys(counts, 0)
    left = n
    while left > 0:
        open_zones = [z for z in sorted(current) if caps is None or out[z] < caps.get(z, 0)]
        if not open_zones:
            break
        low = min(current[z] for z in open_zones)
        at_low = [z for z in open_zones if current[z] == low]
        higher = [current[z] for z in open_zones if current[z] > low]
        step = (min(higher) - low) if higher else None
        # raise every zone at the lowest level by the same amount, as far as possible
        per_zone = left // len(at_low) if step is None else min(step, left // len(at_low))
        if caps is not None:
            per_zone = min([per_zone] + [caps.get(z, 0) - out[z] for z in at_low])
        if per_zone <= 0:
            for z in at_low:
                if left <= 0:
                    break
                if caps is not None and out[z] >= caps.get(z, 0):
                    continue
                out[z] += 1
                current[z] += 1
                left -= 1
            continue
        for z in at_low:
            out[z] += per_zone
            current[z] += per_zone
            left -= per_zone
    return out
