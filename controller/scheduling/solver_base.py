"""The base of one solve: sorts the inputs, builds the pools, slots, groups and initial state, and
answers the cached predicates (taints, compatibility, offerings, limits) every later stage asks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from controller.scheduling.instancetypes import InstanceType, Offering
from controller.scheduling.labels import (
    INSTANCE_TYPE_KEYS,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_NODEPOOL,
    LABEL_ZONE,
)
from controller.scheduling.model import (
    ExistingNode,
    Gang,
    HostPort,
    InstanceCandidate,
    InstanceChoice,
    NodePoolTemplate,
    OfferingKey,
    Pod,
)
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.resources import ONE_POD, Resources, sum_resources
from controller.scheduling.solver_model import (
    Group,
    Node,
    Part,
    Pool,
    Slot,
    SlotIndex,
    SlotProto,
    SolveCache,
    State,
    Universe,
)
from controller.scheduling.solver_numeric import HeapOrder, Vec
from controller.scheduling.taints import Taint, Toleration, first_untolerated

_METADATA_NAME: Final = "metadata.name"
"""Pseudo label key for ``matchFields`` on the node name."""


_ROLLOUT_BUDGET: Final = 400
"""Rollouts per solve: small problems are fully covered, large ones only pay for their tail."""


# (requirements, slot index, allowed zones): what `Packing._pin_zone` memoizes its zones by
PinKey = tuple[Requirements, int, frozenset[str] | None]


class SolverBase:
    """Inputs, derived tables and shared state of one solve; the later stages subclass it."""

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
        # the DaemonSets that take host ports, and the ports they take per slot (`_daemon_ports`)
        self._port_daemons = tuple(d for d in self.daemon_pods if d.host_ports)
        self._slot_ports: dict[int, tuple[tuple[HostPort, str], ...]] = {}
        self.unavailable = unavailable
        self.gang_opts = {g.id: g for g in gangs}
        names: set[str] = set()
        for pod in self.pods:
            names.update(pod.requests.names())
        self.u = Universe(names)
        # outcome: refused pods and how many pods of each group are accounted for
        self.unschedulable: dict[str, str] = {}
        self._taken: dict[int, int] = {}
        # caches of the predicates below
        self._compat_cache: dict[tuple[Requirements, int], bool] = {}
        self._offer_cache: dict[tuple[Requirement | None, Requirement | None, int], tuple[Offering, ...]] = {}
        self._inter_cache: dict[tuple[Requirements, Requirements], Requirements | None] = {}
        self._inter_ids: dict[tuple[int, int], tuple[Requirements, Requirements, Requirements | None]] = {}
        # (requirements, slot, allowed zones) -> the zones of the cheapest offerings, or None: no zone
        # to pin to, or the requirements as they are (one zone, already pinned)
        self._pin_cache: dict[PinKey, tuple[str, ...] | Requirements | None] = {}
        self._pinned_to: dict[tuple[Requirements, str], Requirements | None] = {}
        # (a variant, a zone) -> the variant in that zone, and whether it can be met (solver_topology)
        self._zoned: dict[tuple[Requirements, str], tuple[Requirements, bool]] = {}
        self._canon: dict[Requirements, Requirements] = {}
        self._taint_cache: dict[tuple[tuple[Toleration, ...], tuple[Taint, ...]], Taint | None] = {}
        # packing (solver_packing) and node choice (solver_choice): fill bounds, rollout journal
        self._suffix_min: list[Vec] = []
        self._min_req: list[tuple[int, int]] = []
        self._journal: dict[int, tuple[Node, Node]] | None = None
        self._rollouts_left = _ROLLOUT_BUDGET
        self._in_rollout = False
        # (phase's active parts, head index, tail, parts emptied then, part -> index) of the last `_choose`
        self._tail_cache: tuple[list[Part], int, list[tuple[int, Part]], int, dict[int, int]] | None = None
        self._emptied: list[Part] = []  # parts whose last pod was placed, in order (see `_choose`'s tail)
        # set by `_can_add_new` when the room left on the node limited the count (see `_simulate`)
        self._fit_bound = False
        # candidate lists per finished node (solver_candidates)
        self._cand_cache: dict[object, list[tuple[Slot, tuple[Offering, ...]]]] = {}
        # (id of a `_compat_order` list, slot mask) -> the slots of the list the mask keeps
        self._cand_by_mask: dict[tuple[int, int], list[tuple[Slot, tuple[Offering, ...]]]] = {}
        self._slot_indexes: dict[int, SlotIndex] = {}
        self._kmax_masks: dict[tuple[frozenset[int], int], int] = {}
        # (id of a kmax, tier) -> its candidates' columns: min price, kmax, bound, slot, variant, position
        self._rank_columns: dict[
            tuple[int, int], tuple[list[float], list[int], list[float], list[int], list[int], range, int]
        ] = {}
        # (id of a kmax, tier, pods left up to its largest count, value per pod) -> its candidates
        # in rank order, as far as choices have read them
        self._rankings: dict[tuple[int, int, int, float], HeapOrder[tuple[float, Slot, int]]] = {}
        self._compat_orders: dict[tuple[int, Requirements], list[tuple[int, Slot, tuple[Offering, ...]]]] = {}
        # per group, the running counts (State.agg_zone / agg_total) its placements add to
        self._group_aggs: list[list[int]] = []
        # per group, the running counts a simulation keeps up to date, and whether its pods per zone
        self._sim_aggs: list[list[int]] = []
        self._sim_zoned: list[bool] = []
        self._info_cache: dict[
            tuple[tuple[int, int], ...],
            tuple[
                list[tuple[Slot, tuple[Offering, ...]]],
                tuple[tuple[InstanceCandidate, ...], InstanceChoice, tuple[Requirement, ...]],
            ],
        ] = {}
        # the same, by identity of the candidate list (`_candidates` hands out cached lists)
        self._info_ids: dict[
            int,
            tuple[
                list[tuple[Slot, tuple[Offering, ...]]],
                tuple[tuple[InstanceCandidate, ...], InstanceChoice, tuple[Requirement, ...]],
            ],
        ] = {}
        # (slot, id of its offerings) -> (the offerings, its candidate, their zones, capacity types)
        self._cand_objs: dict[
            tuple[int, int], tuple[tuple[Offering, ...], InstanceCandidate, frozenset[str], frozenset[str]]
        ] = {}
        self._zones: frozenset[str] = frozenset()

    def _build_pools(self) -> None:
        self.pools: list[Pool] = []
        self.slots: list[Slot] = []
        type_keys: set[str] = set(INSTANCE_TYPE_KEYS)
        for template in self.templates:
            for it in template.instance_types:
                type_keys.update(it.labels)
        self.type_keys = type_keys
        for template in self.templates:
            pool = Pool(template, len(self.pools))
            self.pools.append(pool)
            for it, offerings, node_side, overhead in self._slot_protos(pool, type_keys):
                alloc = self.u.vec(it.allocatable - overhead)
                if any(a < 0 for a in alloc):
                    alloc = tuple(max(a, 0) for a in alloc)
                slot = Slot(
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

    def _slot_protos(self, pool: Pool, type_keys: set[str]) -> list[SlotProto]:
        """The instance types a pool may launch now, with their offerings, node-side requirements and
        daemonset overhead. They depend only on the pool, the unavailable offerings and the daemonsets,
        so the sub-solves of `improve` (and solves given one `SolveCache`) share them."""
        cached = self._cache.protos(pool.template, self.unavailable, self.daemon_pods)
        if cached is not None:
            return cached
        protos = self._protos_of(pool, pool.template.instance_types, type_keys, skip=self.unavailable)
        self._cache.keep_protos(pool.template, self.unavailable, self.daemon_pods, protos)
        return protos

    def _protos_of(
        self, pool: Pool, types: Sequence[InstanceType], type_keys: set[str], *, skip: frozenset[OfferingKey]
    ) -> list[SlotProto]:
        """`_slot_protos` for any instance types (uncached): the explanations also ask it about the
        types a limit of 0 took out of the pool, and with the offerings refused for capacity kept in."""
        protos: list[SlotProto] = []
        zone_req = pool.base.get(LABEL_ZONE)
        ct_req = pool.base.get(LABEL_CAPACITY_TYPE)
        custom = Requirements(r for r in pool.base if r.key not in type_keys)
        for it in sorted(types, key=lambda t: t.name):
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
                        and (it.name, o.zone, o.capacity_type) not in skip
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
        return protos

    def _daemon_overhead(self, pool: Pool, node_side: Requirements) -> Resources:
        total: list[Resources] = []
        for daemon in self.daemon_pods:
            if first_untolerated(daemon.tolerations, pool.template.taints) is not None:
                continue
            terms = daemon.node_requirements or (Requirements(),)
            if any(t.compatible_with_node(node_side) is None for t in terms):
                total.append(daemon.requests + ONE_POD)
        return sum_resources(total)

    def _daemon_ports(self, slot: Slot) -> tuple[tuple[HostPort, str], ...]:
        """The host ports the DaemonSets' pods take on a new node of the slot, each with its
        DaemonSet (kube-scheduler binds a daemon pod to its node like any other: whichever comes
        first keeps the port). Empty when no DaemonSet takes one."""
        if not self._port_daemons:
            return ()
        got = self._slot_ports.get(slot.idx)
        if got is None:
            taken: list[tuple[HostPort, str]] = []
            for daemon in self._port_daemons:
                if first_untolerated(daemon.tolerations, slot.pool.template.taints) is not None:
                    continue
                terms = daemon.node_requirements or (Requirements(),)
                if any(t.compatible_with_node(slot.node_side) is None for t in terms):
                    taken.extend((port, daemon.owner or daemon.name) for port in daemon.host_ports)
            got = self._slot_ports[slot.idx] = tuple(taken)
        return got

    def _daemon_port_conflict(self, ports: tuple[HostPort, ...], slot: Slot) -> tuple[HostPort, str] | None:
        """A port of ``ports`` a DaemonSet's pod takes on the slot's new nodes, with that DaemonSet."""
        for port in ports:
            for theirs, daemon in self._daemon_ports(slot):
                if port.conflicts(theirs):
                    return port, daemon
        return None

    def _build_groups(self) -> None:
        by_key: dict[tuple[object, ...], list[Pod]] = {}
        for pod in self.pods:
            by_key.setdefault(pod.scheduling_key(), []).append(pod)
        self.groups = [Group(i, pods, self.u) for i, pods in enumerate(by_key.values())]

    def _build_state(self) -> None:
        st = State()
        for i, en in enumerate(self.existing_nodes):
            n = Node()
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
            if n.zone is not None:
                st.count_zone_nodes(n.zone, 1)
            n.taints = tuple(t for t in en.taints if t.blocks_scheduling())
            st.existing.append(n)
        st.usage = [{name: p.template.usage.get(name) for name in p.limit_names} for p in self.pools]
        self.state = st

    def _untolerated(self, tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> Taint | None:
        key = (tolerations, taints)
        if key not in self._taint_cache:
            self._taint_cache[key] = first_untolerated(tolerations, taints)
        return self._taint_cache[key]

    def _compat(self, reqs: Requirements, slot: Slot) -> bool:
        key = (reqs, slot.idx)
        hit = self._compat_cache.get(key)
        if hit is None:
            hit = reqs.compatible_with_node(slot.node_side) is None
            self._compat_cache[key] = hit
        return hit

    def _offerings(self, reqs: Requirements, slot: Slot) -> tuple[Offering, ...]:
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
        # by identity first: equal requirement sets that are distinct objects compare item by item
        seen = self._inter_ids.get((id(a), id(b)))
        if seen is not None and seen[0] is a and seen[1] is b:
            return seen[2]
        out = self._intersect_eq(a, b)
        self._inter_ids[(id(a), id(b))] = (a, b, out)
        return out

    def _intersect_eq(self, a: Requirements, b: Requirements) -> Requirements | None:
        key = (a, b)
        if key in self._inter_cache:
            return self._inter_cache[key]
        merged = a.intersect(b)
        # one object per distinct value: later cache lookups then hit on identity
        out = self._canon.setdefault(merged, merged) if merged.is_satisfiable() else None
        self._inter_cache[key] = out
        return out

    def _limit_room(self, slot: Slot) -> int:
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

    def _node_price(self, node: Node) -> float:
        assert node.slot is not None
        offers = self._offerings(node.reqs, node.slot)
        return offers[0].price if offers else node.slot.min_price

    def _all_zones(self) -> frozenset[str]:
        return self._zones
