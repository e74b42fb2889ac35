"""Choosing the next new node: simulates candidate instance types packed with the head part and
the parts after it, compares price per value, and near the end of a phase completes the
packing after each of the best candidates (pilot rollouts, journaled and undone)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import islice, repeat
from operator import itemgetter, le, mul, truediv
from typing import Final

from controller.scheduling.labels import (
    LABEL_ZONE,
)
from controller.scheduling.requirements import EVERYTHING, Requirements
from controller.scheduling.resources import PODS
from controller.scheduling.solver_model import Node, Part, Sim, Slot
from controller.scheduling.solver_numeric import EPS, HeapOrder, Vec
from controller.scheduling.solver_packing import Packer

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


_MAX_STREAK_ROLLOUT: Final = 6
"""Candidates without improvement before a choice inside a rollout settles (a quicker greedy)."""


_UNPLACED_PENALTY: Final = 1e6
"""Cost of leaving a pod unplaced in a rollout (dominates any price)."""


class _Trace:
    """What a simulation in the global fill order did, for simulations of its roomier twins."""

    __slots__ = ("event", "head", "head_bound", "refused", "sim", "steps")

    def __init__(self) -> None:
        self.sim: Sim | None = None
        self.head: tuple[int, Requirements] = (0, EVERYTHING)  # head pods, node requirements after
        self.head_bound = False  # room limited the head's count
        # (position in the tail, part, pods, node requirements after) for every part taken
        self.steps: list[tuple[int, Part, int, Requirements]] = []
        # (position, part, misses before it) for every part whose group the slot cannot host at all
        self.refused: list[tuple[int, Part, int]] = []
        # (position, misses before it) of the first decision that room made; None: room made none
        self.event: tuple[int, int] | None = None


class NodeChoice(Packer):
    """Which (NodePool, instance type) and packing pattern the next new node gets."""

    def _choose(self, head: Part, active: list[Part], index: int) -> Sim | None:
        g = head.group
        for tier in self.tiers:
            cands = g.cands.get(tier)
            if not cands:
                continue
            best: Sim | None = None
            tried: list[Sim] = []
            # Try candidates in order of their head-only price per value, pruned by the bound
            # and by a streak of candidates that did not improve on the best.
            rem = head.remaining
            w = g.w if g.w > 0 else 1.0
            # groups with one kmax (see `_prepare_candidates`) have the same candidates
            columns = self._rank_columns.get((id(g.kmax), tier))
            if columns is None:
                kmax = g.kmax
                counts = [kmax[c[1].idx] for c in cands]
                columns = self._rank_columns[(id(g.kmax), tier)] = (
                    [c[1].min_price for c in cands],
                    counts,
                    [c[0] for c in cands],
                    [c[1].idx for c in cands],
                    [c[2] for c in cands],
                    range(len(cands)),
                    max(counts),
                )
            prices, counts, bounds, ids, variants, positions, most = columns
            # by (min price / (min(kmax, rem) * w), bound, slot, variant), the key computed a column
            # at a time; taken from a heap, in the order a stable sort gives, because a choice
            # reads about 20 of the 400 candidates of a large catalog. Past the largest kmax the
            # remaining pods no longer change a key: choices of groups with this kmax, with as many
            # pods left (or more than any slot holds) and the same value share one order
            capped = min(rem, most)
            rank_key = (id(g.kmax), tier, capped, w)
            ranked = self._rankings.get(rank_key)
            if ranked is None:
                keys = map(truediv, prices, map(mul, map(min, counts, repeat(capped)), repeat(w)))
                ranked = self._rankings[rank_key] = HeapOrder(
                    cands, list(zip(keys, bounds, ids, variants, positions, strict=True))
                )
            tail = self._tail(active, index)
            pilot = not self._in_rollout and self._rollouts_left > 0 and self._tail_small(head, tail)
            together = any(t.self_match and self._global_count(t) == 0 for t in g.host_aff)
            streak = 0
            max_streak = _MAX_STREAK_PILOT if pilot else _MAX_STREAK_ROLLOUT if self._in_rollout else _MAX_STREAK
            # per twin class, the last simulation traced (see `_from_twin`)
            twins: dict[int, _Trace] = {}
            for lb, slot, _vi in ranked:
                if best is not None and not together:
                    if streak >= max_streak:
                        break
                    if not pilot and lb >= best.ratio * (1 - 1e-6):
                        continue
                if self._limit_room(slot) <= 0:
                    continue
                twin = slot.twin
                sim = None
                start: tuple[_Trace, int, int] | None = None
                if twin >= 0:
                    ref = twins.get(twin)
                    if ref is not None:
                        sim, start = self._from_twin(ref, slot)
                if sim is None:
                    trace = _Trace() if twin >= 0 else None
                    sim = self._simulate(slot, head, tail, trace=trace, start=start)
                    if sim is None:
                        continue
                    if trace is not None:
                        twins[twin] = trace
                tried.append(sim)
                if pilot:
                    alt = self._simulate(slot, head, tail, by_density=True)
                    if alt is not None and alt.pattern != sim.pattern:
                        tried.append(alt)
                if best is None or better(sim, best):
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

    def _fewer_head_variants(self, tried: list[Sim], head: Part, tail: list[tuple[int, Part]]) -> list[Sim]:
        """For the best few slots, the same node with fewer head pods, to leave room for others."""
        out: list[Sim] = []
        seen: set[int] = set()
        for sim in sorted(tried, key=sim_order):
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

    def _tail(self, active: list[Part], index: int) -> list[tuple[int, Part]]:
        """(index in the phase, part) for the parts after the head that still have pods.

        The last tail is reused when it was made for this phase at or before this index: parts
        only lose pods (rollouts, which give pods back, drop it), so it is cut at the index and
        the parts emptied since it was made are taken out, each found by its index (the tail is
        in index order). At 20,000 pods a phase has over 3,000 parts and about 2,000 choices."""
        cached = self._tail_cache
        emptied = self._emptied
        if cached is None or cached[0] is not active or cached[1] > index:
            tail = [(j, active[j]) for j in range(index + 1, len(active)) if active[j].remaining > 0]
            positions = {id(part): j for j, part in enumerate(active)}
        else:
            _active, _index, before, seen, positions = cached
            cut = bisect_right(before, index, key=itemgetter(0))
            tail = before[cut:] if cut or len(emptied) > seen else before
            for part in emptied[seen:]:
                j = positions.get(id(part))
                if j is None or j <= index or part.remaining > 0:
                    continue
                at = bisect_left(tail, j, key=itemgetter(0))
                if at < len(tail) and tail[at][1] is part:
                    del tail[at]
        self._tail_cache = (active, index, tail, len(emptied), positions)
        return tail

    def _tail_small(self, head: Part, tail: list[tuple[int, Part]]) -> bool:
        """Whether the head and the parts after it hold few enough pods to roll out."""
        left = head.remaining
        if left > _ROLLOUT_MAX_PODS:
            return False
        for _j, part in tail:
            left += part.remaining
            if left > _ROLLOUT_MAX_PODS:
                return False
        return True

    def _pilot(self, tried: list[Sim], head: Part, active: list[Part], index: int) -> Sim:
        """Pick among the best candidates by completing the packing greedily after each."""
        # the best few instance types, each with its best few packings (fill orders, head sizes)
        by_slot: dict[int, list[Sim]] = {}
        for sim in sorted(tried, key=sim_order):
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
            if best is None or cost < best[0] - EPS:
                best = (cost, i)
        assert best is not None
        return ranked[best[1]]

    def _rollout(self, sim: Sim, head: Part, active: list[Part], index: int) -> float:
        self._rollouts_left -= 1
        st = self.state
        saved_len = len(st.new)
        saved_open = list(st.open)
        saved_closed = st.closed
        saved_splits = st.split_counter
        saved_usage = [dict(u) for u in st.usage]
        saved_zone = dict(st.placed_zone)
        saved_total = dict(st.placed_total)
        saved_agg_zone = [dict(a) for a in st.agg_zone]
        saved_agg_total = list(st.agg_total)
        saved_counter = st.node_counter
        saved_parts = [(p, p.placed, p.remaining, p.quota) for p in active]
        journal: dict[int, tuple[Node, Node]] = {}
        self._journal = journal
        self._in_rollout = True
        self._tail_cache = None  # parts restored at the end regain pods
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
            self._tail_cache = None
            for node, saved in journal.values():
                restore_node(node, saved)
            del st.new[saved_len:]
            st.open = saved_open
            st.closed = saved_closed
            st.split_counter = saved_splits
            st.usage = saved_usage
            st.placed_zone = saved_zone
            st.placed_total = saved_total
            st.agg_zone = saved_agg_zone
            st.agg_total = saved_agg_total
            st.node_counter = saved_counter
            for p, placed, remaining, quota in saved_parts:
                p.placed, p.remaining, p.quota = placed, remaining, quota

    def _simulate(
        self,
        slot: Slot,
        head: Part,
        tail: list[tuple[int, Part]],
        *,
        by_density: bool = False,
        head_limit: int | None = None,
        first: int | None = None,
        trace: _Trace | None = None,
        start: tuple[_Trace, int, int] | None = None,
    ) -> Sim | None:
        """Pack the head part on a fresh node of the slot, then fill it with the parts after it.

        ``tail`` is (index in the phase, part) for the parts after the head that still have pods.
        The fill goes in the global (first-fit-decreasing) order, or, ``by_density``, in order
        of value per share of the room left after the head (a knapsack greedy), or starting
        with ``tail[first]``.

        In the global order, ``trace`` records what simulations of roomier twins need (see
        `_from_twin`), and ``start`` = (a twin's trace, position in ``tail``, misses before it)
        takes that twin's steps before the position as they were and simulates from there on.
        """
        g = head.group
        node = self._new_node(slot, slot.pool.base, g.gang)
        node.idx = -1
        undo: list[tuple[int, str | None, int]] = []
        self._fit_bound = False
        try:
            if start is None:
                limit = head.remaining if head_limit is None else min(head.remaining, head_limit)
                k, reqs = self._can_add_new(node, head, limit)
                if k <= 0:
                    return None
                if trace is not None and self._fit_bound:
                    trace.head_bound = True
            else:
                k, reqs = start[0].head
            if trace is not None:
                trace.head = (k, reqs)
            pattern: list[tuple[Part, int]] = [(head, k)]
            self._sim_add(node, head, k, reqs, undo)
            value = k * g.w
            misses = 0
            begin = 0
            if start is not None:
                assert trace is not None
                ref, begin, misses = start
                for step in ref.steps:
                    pos, part, k2, reqs2 = step
                    if pos >= begin:
                        break
                    pattern.append((part, k2))
                    self._sim_add(node, part, k2, reqs2, undo)
                    value += k2 * part.group.w
                    trace.steps.append(step)
                for item in ref.refused:
                    if item[0] >= begin:
                        break
                    trace.refused.append(item)
            pods_i = self.u.index[PODS]
            free = node.free
            suffix: list[Vec] | None = self._suffix_min
            order: Sequence[tuple[int, Part]] = tail
            if by_density:
                order = self._density_order(slot, free, tail)
                suffix = None
            elif first is not None:
                order = [tail[first], *(t for pos, t in enumerate(tail) if pos != first)]
                suffix = None
            bounds: Sequence[Vec] = suffix if suffix is not None else ()
            n_suffix = len(bounds)
            slot_idx = slot.idx
            gang = g.gang
            placed = node.placed
            zone = node.zone
            # the suffix bound last found below the free room, with a pod slot left (neighbours
            # share their bound's tuple, and the room changes only when a part is added): the
            # same bound needs no second look until then
            fitting: Vec | None = None
            # (the tail holds every part of the phase still to place: skip to ``begin`` without a copy)
            for pos, (j, part) in enumerate(islice(order, begin, None) if begin else order, begin):
                if misses >= _MAX_FILL_MISSES:
                    break
                if j < n_suffix:
                    bound = bounds[j]
                    if bound is not fitting:
                        if free[pods_i] <= 0 or not all(map(le, bound, free)):
                            # the node is full, or no later part can fit: room decided
                            if trace is not None and trace.event is None:
                                trace.event = (pos, misses)
                            break
                        fitting = bound
                elif free[pods_i] <= 0:
                    if trace is not None and trace.event is None:
                        trace.event = (pos, misses)
                    break
                if part.remaining <= 0:
                    continue
                # refusals `_can_add_new` would make, checked here first, the most common first:
                # a part bound to another zone than the node's, a group anti-affine to one
                # already on the node (every refusal counts one miss, whichever check makes it)
                pz = part.zone
                if pz is not None and zone is not None and pz != zone:
                    misses += 1
                    continue
                pg = part.group
                if pg.gang != gang or slot_idx not in pg.kmax or not all(map(le, pg.req, free)):
                    if trace is not None and pg.gang == gang:
                        if slot_idx not in pg.kmax:
                            trace.refused.append((pos, part, misses))
                        elif trace.event is None:
                            trace.event = (pos, misses)
                    misses += 1
                    continue
                conflict = pg.conflict_host
                if conflict and not conflict.isdisjoint(placed):
                    misses += 1
                    continue
                k2, reqs2 = self._can_add_new(node, part, part.remaining)
                if trace is not None and self._fit_bound and trace.event is None:
                    trace.event = (pos, misses)
                if k2 <= 0:
                    misses += 1
                    continue
                pattern.append((part, k2))
                self._sim_add(node, part, k2, reqs2, undo)
                fitting = None
                zone = node.zone
                value += k2 * pg.w
                if trace is not None:
                    trace.steps.append((pos, part, k2, reqs2))
            offers = self._offerings(node.reqs, slot)
            if not offers:
                return None
            sim = Sim(node, slot, pattern, offers[0].price, value)
            if trace is not None:
                trace.sim = sim
            return sim
        finally:
            groups = self.groups
            for gi, zone, c in undo:
                self._sim_count(groups[gi], zone, -c)

    def _from_twin(self, ref: _Trace, slot: Slot) -> tuple[Sim | None, tuple[_Trace, int, int] | None]:
        """The simulation of ``slot`` read off a twin's, or where to resume it from.

        ``ref`` traced a simulation on a slot of the same twin class (see `_build_twins`): twins
        give the same answer to every compatibility, offering and zone question, so on a slot
        with at least as much room in every resource each step of the fill goes the same way
        up to the first decision that room made on the smaller one (a part refused or cut short
        because it did not fit, the node full), or the first part refused because the smaller
        slot cannot host its group at all while this one can. Past neither, the result is the
        twin's: same pods, same requirements, same value, this slot's own price; otherwise the
        simulation resumes there. (None, None): simulate from the start."""
        sim = ref.sim
        if sim is None or ref.head_bound or not all(map(le, sim.slot.alloc, slot.alloc)):
            return None, None
        idx = slot.idx
        point = ref.event
        for pos, part, misses in ref.refused:
            if point is not None and pos >= point[0]:
                break
            if idx in part.group.kmax:
                point = (pos, misses)
                break
        if point is not None:
            return None, (ref, point[0], point[1])
        reqs = sim.node.reqs
        offers = self._offerings(reqs, slot)
        if not offers:  # pragma: no cover - twins offer the same zones and capacity types
            return None, None
        node = Node()
        node.idx = -1
        node.slot = slot
        node.pool = slot.pool
        node.reqs = reqs
        node.zone = sim.node.zone
        node.gang = sim.node.gang
        return Sim(node, slot, sim.pattern, offers[0].price, sim.value), None

    def _density_order(self, slot: Slot, free: Sequence[int], tail: list[tuple[int, Part]]) -> list[tuple[int, Part]]:
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
        self, node: Node, part: Part, k: int, reqs: Requirements, undo: list[tuple[int, str | None, int]]
    ) -> None:
        g = part.group
        free = node.free
        req = g.req
        if g.nz is None:
            for i, r in enumerate(req):
                free[i] -= k * r
        else:
            for i in g.nz:
                free[i] -= k * req[i]
        gi = g.idx
        node.placed[gi] = node.placed.get(gi, 0) + k
        if reqs is not node.reqs:  # (the node's zone is always the one its requirements pin)
            node.reqs = reqs
            zr = reqs.get(LABEL_ZONE)
            node.zone = zr.single_value() if zr is not None else None
        zone = node.zone
        # (`_sim_count` counts something exactly then: the common case needs no call)
        if self._sim_aggs[gi] or (zone is not None and self._sim_zoned[gi]):
            self._sim_count(g, zone, k)
            undo.append((gi, zone, k))


def sim_order(sim: Sim) -> tuple[float, float, float, str]:
    return (sim.ratio, -sim.value, sim.price, sim.slot.it.name)


def better(a: Sim, b: Sim) -> bool:
    if a.ratio < b.ratio * (1 - 1e-9):
        return True
    if a.ratio > b.ratio * (1 + 1e-9):
        return False
    if abs(a.value - b.value) > 1e-12:
        return a.value > b.value
    return (a.price, a.slot.it.name) < (b.price, b.slot.it.name)


def restore_node(node: Node, saved: Node) -> None:
    node.closed = saved.closed
    node.free = saved.free
    node.placed = saved.placed
    node.content = saved.content
    node.reqs = saved.reqs
    node.zone = saved.zone
    node.mult = saved.mult
