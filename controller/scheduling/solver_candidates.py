"""Instance-type candidates: which slots can host each group (with a value per pod and pruning
bounds), and, for a finished node, every instance type of its pool that still hosts it."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from controller.scheduling.instancetypes import Offering
from controller.scheduling.labels import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
)
from controller.scheduling.model import (
    InstanceCandidate,
    InstanceChoice,
)
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.solver_model import Group, Node, Pool, Slot, SlotIndex
from controller.scheduling.solver_numeric import fit_dense
from controller.scheduling.solver_topology import TopologyRules
from controller.scheduling.taints import Toleration


class CandidateTypes(TopologyRules):
    """Static candidate slots per group, and the price-ordered fallback list per new node."""

    def _prepare_candidates(self, groups: Sequence[Group]) -> None:
        by_pattern: dict[tuple[tuple[Requirements, ...], tuple[Toleration, ...]], list[tuple[Slot, int, float]]] = {}
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
            cap = self._self_cap(g)
            req, nz = g.req, g.nz
            kmax = g.kmax
            cands = g.cands
            for slot, vi, price in compat:
                k = fit_dense(slot.alloc, req, nz)
                if k <= 0:
                    continue
                if cap < k:
                    k = cap
                kmax[slot.idx] = k
                tier = slot.pool.tier
                if tier in cands:
                    cands[tier].append((price, slot, vi))
                else:
                    cands[tier] = [(price, slot, vi)]
                if price / k < best_w:
                    best_w = price / k
            g.w = best_w if best_w < float("inf") else 0.0

    def _bounds(self, groups: Sequence[Group]) -> None:
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
            ratios = [(i, g.w / r) for i, r in enumerate(g.req) if r]
            unused = [i for i, r in enumerate(g.req) if not r]
            for slot_idx in g.kmax:
                d = dens.get(slot_idx)
                if d is None:
                    d = dens[slot_idx] = [0.0] * n_dims
                    needs[slot_idx] = [True] * n_dims
                for i, ratio in ratios:
                    if ratio > d[i]:
                        d[i] = ratio
                if unused:
                    nd = needs[slot_idx]
                    for i in unused:
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
        for g in groups:
            for tier, cands in g.cands.items():
                keyed = []
                for price, slot, vi in cands:
                    ub = slot.ub_value
                    lb = price / ub if 0.0 < ub < inf else 0.0
                    keyed.append(((lb, slot.min_price, slot.idx), slot, vi))
                keyed.sort(key=itemgetter(0))
                g.cands[tier] = [(key[0], slot, vi) for key, slot, vi in keyed]

    def _slot_index(self, pool: Pool) -> SlotIndex:
        index = self._slot_indexes.get(pool.idx)
        if index is None:
            index = self._slot_indexes[pool.idx] = SlotIndex([s.alloc for s in pool.slots], len(self.u.names))
        return index

    def _kmax_mask(self, group_idx: int, pool: Pool) -> int:
        """The slots of the pool that can host the group (its ``kmax``), as a bitmask over ``pool.slots``."""
        key = (group_idx, pool.idx)
        mask = self._kmax_masks.get(key)
        if mask is None:
            kmax = self.groups[group_idx].kmax
            mask = 0
            for pos, s in enumerate(pool.slots):
                if s.idx in kmax:
                    mask |= 1 << pos
            self._kmax_masks[key] = mask
        return mask

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
