"""Instance-type candidates: which slots can host each group (with a value per pod and pruning
bounds), and, for a finished node, every instance type of its pool that still hosts it."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import floordiv, itemgetter, truediv

from controller.scheduling.instancetypes import Offering
from controller.scheduling.labels import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
)
from controller.scheduling.model import (
    HostPort,
    InstanceCandidate,
    InstanceChoice,
)
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.solver_model import Group, Node, Pool, Slot, SlotIndex
from controller.scheduling.solver_numeric import Vec
from controller.scheduling.solver_topology import TopologyRules
from controller.scheduling.taints import Toleration


class _Pattern:
    """The slots that groups with the same variants and tolerations can use, shared by them."""

    __slots__ = ("columns", "compat", "ids", "prices", "ranked", "slot_set", "tiers")

    def __init__(self, compat: list[tuple[Slot, int, float]], dims: int) -> None:
        self.compat = compat  # (slot, index of the first variant it takes, that variant's price)
        self.columns = [tuple(slot.alloc[d] for slot, _vi, _price in compat) for d in range(dims)]
        self.ids = [slot.idx for slot, _vi, _price in compat]
        self.prices = [price for _slot, _vi, price in compat]
        self.tiers = list(dict.fromkeys(slot.pool.tier for slot, _vi, _price in compat))
        self.slot_set = frozenset(self.ids)  # shared by the groups that fit every slot of the pattern
        self.ranked: list[tuple[float, Slot, int]] | None = None  # by lower bound (see `_bounds`)


class CandidateTypes(TopologyRules):
    """Static candidate slots per group, and the price-ordered fallback list per new node."""

    def _prepare_candidates(self, groups: Sequence[Group]) -> None:
        """Per group: the slots that can host it (``kmax``: how many of its pods one holds),
        grouped by pool tier with the first variant's price (``cands``), and its value per pod.

        Groups with the same variants and tolerations share the compatible slots (and, in
        `_bounds`, their ranking); the fit counts are made a resource column at a time."""
        by_pattern: dict[tuple[tuple[Requirements, ...], tuple[Toleration, ...], tuple[HostPort, ...]], _Pattern] = {}
        self._pattern_of: dict[int, _Pattern] = {}
        by_shape: dict[tuple[int, Vec, int], tuple[dict[int, int], list[int], float, frozenset[int]]] = {}
        # (id of a pattern, resource, request) -> how many such requests each of its slots holds
        columns: dict[tuple[int, int, int], list[int]] = {}
        for g in groups:
            # a DaemonSet's pod that takes one of the group's host ports keeps it off that node
            ports = g.rep.host_ports if self._port_daemons else ()
            key = (tuple(g.variants), g.tol_key, ports)
            pattern = by_pattern.get(key)
            if pattern is None:
                compat: list[tuple[Slot, int, float]] = []
                for slot in self.slots:
                    if self._untolerated(g.tol_key, slot.pool.blocking_taints) is not None:
                        continue
                    if ports and self._daemon_port_conflict(ports, slot) is not None:
                        continue
                    for vi, variant in enumerate(g.variants):
                        if self._compat(variant, slot):
                            offers = self._offerings(variant, slot)
                            if offers:
                                compat.append((slot, vi, offers[0].price))
                                break
                pattern = by_pattern[key] = _Pattern(compat, len(self.u.names))
            self._pattern_of[g.idx] = pattern
            cap = self._self_cap(g)
            # groups of one pattern with the same requests and cap share what follows (one
            # object each: nothing changes them after this)
            shared_key = (id(pattern), g.req, cap)
            shared = by_shape.get(shared_key)
            if shared is None:
                shared = by_shape[shared_key] = self._fit_counts(pattern, g.req, g.nz, cap, columns)
            g.kmax, tiers, g.w, g.slot_set = shared
            # the lists are filled, ranked, by `_bounds`
            for tier in tiers:
                g.cands[tier] = []

    def _fit_counts(
        self,
        pattern: _Pattern,
        req: Vec,
        nz: tuple[int, ...] | None,
        cap: int,
        columns: dict[tuple[int, int, int], list[int]],
    ) -> tuple[dict[int, int], list[int], float, frozenset[int]]:
        """For pods asking ``req`` (at most ``cap`` per node) on the pattern's slots: how many
        each slot holds (``kmax``, slots holding none left out), the tiers of those slots, the
        value per pod (the least price per pod) and the set of those slots. ``columns`` keeps the
        counts of one resource's request per pattern: request shapes share most of their values."""
        inf = float("inf")
        counts: list[int] | None = None
        for d in range(len(req)) if nz is None else nz:
            key = (id(pattern), d, req[d])
            column = columns.get(key)
            if column is None:
                column = columns[key] = list(map(floordiv, pattern.columns[d], repeat(req[d])))
            counts = list(column) if counts is None else list(map(min, counts, column))
        if counts is None:  # pragma: no cover - every pod asks for a pod slot
            counts = [1 << 30] * len(pattern.compat)
        ids, prices = pattern.ids, pattern.prices
        if counts and cap < max(counts):
            counts = list(map(min, counts, repeat(cap)))
        slot_set: frozenset[int] | None = None
        if counts and min(counts) <= 0:
            keep = [i for i, k in enumerate(counts) if k > 0]
            ids = [ids[i] for i in keep]
            prices = [prices[i] for i in keep]
            counts = [counts[i] for i in keep]
            tiers = list(dict.fromkeys(pattern.compat[i][0].pool.tier for i in keep))
        else:
            tiers = pattern.tiers
            slot_set = pattern.slot_set
        kmax = dict(zip(ids, counts, strict=True))
        best_w = min(map(truediv, prices, counts), default=inf)
        return kmax, tiers, best_w if best_w < inf else 0.0, frozenset(kmax) if slot_set is None else slot_set

    def _build_twins(self) -> None:
        """Put slots that a simulation cannot tell apart except by their room and prices into
        one twin class (``Slot.twin``): the same pool (without ``minValues``), the same node-side
        requirements on every label key any pod's requirements or the pool's mention, and the same
        offerings (zone, capacity type) in the same price order, and the same host ports taken by
        DaemonSets. Every compatibility, offering and zone-pinning answer a simulation asks of a
        slot is then the same for the whole class, so a simulation on a roomier twin that room
        never limited can be replayed (see `NodeChoice._replay`)."""
        keys = {LABEL_ZONE, LABEL_CAPACITY_TYPE}
        for g in self.groups:
            for variant in (*g.variants, *g.required):
                keys.update(r.key for r in variant.items)
        for pool in self.pools:
            keys.update(r.key for r in pool.base.items)
        classes: dict[tuple[object, ...], int] = {}
        for slot in self.slots:
            if slot.pool.min_value_reqs:
                continue
            key = (
                slot.pool.idx,
                slot.node_side.only(keys),
                tuple((o.zone, o.capacity_type) for o in slot.offerings),
                self._daemon_ports(slot),  # which groups a DaemonSet's host port keeps off
            )
            slot.twin = classes.setdefault(key, len(classes))

    def _bounds(self, groups: Sequence[Group]) -> None:
        """Upper bounds on the value a node of each slot can hold, for pruning candidates.

        Over the groups a slot can host, any resource every one of them requests bounds the
        value: sum(k_g * w_g) <= alloc_r * max_g(w_g / req_g[r]). Groups that fit the same slots
        are folded together first; a group's candidates are its pattern's, ranked once.
        """
        if not groups:
            return
        n_dims = len(self.u.names)
        # per set of slots: the largest value density per resource, and which resources some
        # group of the set does not request
        folded: dict[frozenset[int], tuple[list[float], list[bool]]] = {}
        slot_sets: dict[int, frozenset[int]] = {}
        for g in groups:
            slots = slot_sets[g.idx] = g.slot_set
            got = folded.get(slots)
            if got is None:
                got = folded[slots] = ([0.0] * n_dims, [True] * n_dims)
            fd, fn = got
            for i, r in enumerate(g.req):
                if r:
                    ratio = g.w / r
                    if ratio > fd[i]:
                        fd[i] = ratio
                else:
                    fn[i] = False
        dens: dict[int, list[float]] = {}
        needs: dict[int, list[bool]] = {}
        for slots, (fd, fn) in folded.items():
            for slot_idx in slots:
                d = dens.get(slot_idx)
                if d is None:
                    dens[slot_idx] = list(fd)
                    needs[slot_idx] = list(fn)
                    continue
                nd = needs[slot_idx]
                for i in range(n_dims):
                    if fd[i] > d[i]:
                        d[i] = fd[i]
                    if not fn[i]:
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
        inf = float("inf")
        ranked_cache: dict[tuple[int, int, frozenset[int]], list[tuple[float, Slot, int]]] = {}
        for g in groups:
            pattern = self._pattern_of[g.idx]
            if pattern.ranked is None:
                keyed = []
                for slot, vi, price in pattern.compat:
                    ub = slot.ub_value
                    lb = price / ub if 0.0 < ub < inf else 0.0
                    keyed.append(((lb, slot.min_price, slot.idx), slot, vi))
                keyed.sort(key=itemgetter(0))
                pattern.ranked = [(key[0], slot, vi) for key, slot, vi in keyed]
            for tier in g.cands:
                cache_key = (id(pattern), tier, slot_sets[g.idx])
                ranked = ranked_cache.get(cache_key)
                if ranked is None:
                    kmax = g.kmax
                    ranked = [c for c in pattern.ranked if c[1].pool.tier == tier and c[1].idx in kmax]
                    ranked_cache[cache_key] = ranked
                g.cands[tier] = list(ranked)

    def _slot_index(self, pool: Pool) -> SlotIndex:
        index = self._slot_indexes.get(pool.idx)
        if index is None:
            index = self._slot_indexes[pool.idx] = SlotIndex([s.alloc for s in pool.slots], len(self.u.names))
        return index

    def _kmax_mask(self, group_idx: int, pool: Pool) -> int:
        """The slots of the pool that can host the group (its ``kmax``), as a bitmask over ``pool.slots``."""
        key = (self.groups[group_idx].slot_set, pool.idx)  # groups that fit the same slots share it
        mask = self._kmax_masks.get(key)
        if mask is None:
            slot_set = key[0]
            mask = 0
            for pos, s in enumerate(pool.slots):
                if s.idx in slot_set:
                    mask |= 1 << pos
            self._kmax_masks[key] = mask
        return mask

    def _compat_order(self, pool: Pool, reqs: Requirements) -> list[tuple[int, Slot, tuple[Offering, ...]]]:
        """(bit in ``pool.slots``, slot, offerings) for each slot of the pool that takes ``reqs``
        and has an offering for them, by (cheapest offering, instance type name)."""
        key = (pool.idx, reqs)
        hit = self._compat_orders.get(key)
        if hit is not None:
            return hit
        out: list[tuple[float, str, int, Slot, tuple[Offering, ...]]] = []
        for pos, s in enumerate(pool.slots):
            if not self._compat(reqs, s):
                continue
            offers = self._offerings(reqs, s)
            if offers:
                out.append((offers[0].price, s.it.name, 1 << pos, s, offers))
        out.sort(key=lambda c: (c[0], c[1]))
        ordered = [(bit, s, offers) for _p, _n, bit, s, offers in out]
        self._compat_orders[key] = ordered
        return ordered

    def _candidates(self, node: Node, used: Sequence[int]) -> list[tuple[Slot, tuple[Offering, ...]]]:
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
        usage = self.state.usage[pool.idx]
        out: list[tuple[float, str, Slot, tuple[Offering, ...]]] = []
        index = self._slot_index(pool)
        mask = index.fitting(used)
        for gi in group_ids:
            if not mask:
                break
            mask &= self._kmax_mask(gi, pool)
        if not pool.limit_names:
            # the pool's slots that take the node's requirements, cheapest first, once per
            # requirement set; the node's are those its mask keeps
            # (nodes of other sizes and groups often keep the same slots: one list for them all,
            # which `_candidate_info` then knows by identity)
            ordered = self._compat_order(pool, node.reqs)
            by_mask = (id(ordered), mask)
            result = self._cand_by_mask.get(by_mask)
            if result is None:
                result = self._cand_by_mask[by_mask] = [(s, offers) for bit, s, offers in ordered if mask & bit]
            self._cand_cache[cache_key] = result
            return result
        slots = pool.slots
        while mask:
            low = mask & -mask
            mask ^= low
            s = slots[low.bit_length() - 1]
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

    def _candidate_info(
        self, cands: list[tuple[Slot, tuple[Offering, ...]]]
    ) -> tuple[tuple[InstanceCandidate, ...], InstanceChoice, tuple[Requirement, ...]]:
        """Output form of a candidate list (memoized: replicas share their candidate lists, and
        every list the same candidate per slot and offerings)."""
        by_id = self._info_ids.get(id(cands))
        if by_id is not None and by_id[0] is cands:
            return by_id[1]
        key = tuple((s.idx, id(offers)) for s, offers in cands)
        hit = self._info_cache.get(key)
        if hit is not None:
            self._info_ids[id(cands)] = (cands, hit[1])
            return hit[1]
        objs = self._cand_objs
        picked = []
        zone_sets = []
        capacity_sets = []
        for s, offers in cands:
            got = objs.get((s.idx, id(offers)))
            if got is None or got[0] is not offers:
                got = objs[(s.idx, id(offers))] = (
                    offers,
                    InstanceCandidate(instance_type=s.it.name, price=offers[0].price, offerings=offers),
                    frozenset(o.zone for o in offers),
                    frozenset(o.capacity_type for o in offers),
                )
            picked.append(got[1])
            zone_sets.append(got[2])
            capacity_sets.append(got[3])
        candidates = tuple(picked)
        first = candidates[0].offerings[0]
        choice = InstanceChoice(
            instance_type=candidates[0].instance_type,
            zone=first.zone,
            capacity_type=first.capacity_type,
            price=first.price,
        )
        extra = (
            Requirement(LABEL_INSTANCE_TYPE, False, frozenset(c.instance_type for c in candidates)),
            Requirement(LABEL_ZONE, False, frozenset().union(*zone_sets)),
            Requirement(LABEL_CAPACITY_TYPE, False, frozenset().union(*capacity_sets)),
        )
        info = (candidates, choice, extra)
        self._info_cache[key] = (cands, info)
        self._info_ids[id(cands)] = (cands, info)
        return info
