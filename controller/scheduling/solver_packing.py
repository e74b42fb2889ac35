"""Packing: puts parts of groups on existing nodes, then in-flight NodeClaims, then new nodes
(first fit into nodes already opened, then opening nodes of the chosen instance type), moves
stuck zonal parts to other zones, and records what cannot be placed."""

from __future__ import annotations

from collections.abc import Sequence
from operator import le

from controller.scheduling.labels import (
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
)
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.solver_explain import Explanations
from controller.scheduling.solver_model import Group, Node, Part, Sim, Slot
from controller.scheduling.solver_numeric import fit_count, fit_dense, fits, suffix_minima, water_fill
from controller.scheduling.solver_tally import ZoneTally


class Packer(Explanations):
    """Placement of parts on nodes; which new node to open is decided by `_choose`."""

    def _order(self, groups: Sequence[Group]) -> list[Group]:
        return sorted(
            groups,
            key=lambda g: (g.deferred, g.gpu == 0, -g.gpu, -g.w, -sum(g.req), g.idx),
        )

    def _place_groups(self, groups: Sequence[Group], *, zone: str | None) -> list[Part]:
        """Phase 1 (existing, then in-flight) and phase 2 (new nodes) for these groups."""
        ordered = self._order(groups)
        planned: dict[tuple[int, str], int] = {}
        tally = ZoneTally()
        # zone quotas are made in three rounds: first the groups that two spreads bind (their own
        # and another group's that counts their pods), then the pods that only other groups'
        # spreads count (each into a zone where no spread counting it is broken: the lowest one
        # always is), then the groups that one spread alone binds (filling its lowest zone keeps
        # every pod it counts within maxSkew); parts are then placed in group order
        by_group: dict[int, list[Part]] = {}
        for g in sorted(ordered, key=self._split_rank):
            by_group[g.idx] = self._make_parts(g, zone=zone, planned=planned, tally=tally)
        parts = [part for g in ordered for part in by_group[g.idx]]
        for in_flight in (False, True):
            for part in parts:
                if part.remaining > 0:
                    self._fill_existing(part, in_flight=in_flight)
        active = [p for p in parts if p.remaining > 0]
        self._suffix_min = suffix_minima([p.group.req for p in active], len(self.u.names))
        for i, part in enumerate(active):
            if part.remaining > 0:
                self._fill_new(part)
            if part.remaining > 0:
                self._open(part, active, i)
        if zone is None:
            self._redistribute(parts)
        return parts

    def _split_rank(self, g: Group) -> int:
        own = g.zone_spread
        if own is None:
            return 1
        if not own.self_match or any(r.term.matched != own.matched for r in g.zone_matchers):
            return 0
        return 2

    def _fill_existing(self, part: Part, *, in_flight: bool) -> None:
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
            k = fit_count(node.free, req)
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

    def _can_add_new(self, node: Node, part: Part, limit: int) -> tuple[int, Requirements]:
        """How many pods of the part fit on a new node (per replica), and the node's new reqs."""
        g = part.group
        slot = node.slot
        assert slot is not None
        if node.gang != g.gang or slot.idx not in g.kmax:
            return 0, node.reqs
        # a part bound to a zone cannot join a node pinned to another (its variants all ask for
        # its zone): the variant check below would refuse it, only later
        if part.zone is not None and node.zone is not None and part.zone != node.zone:
            return 0, node.reqs
        conflict = g.conflict_host
        if conflict and not conflict.isdisjoint(node.placed):
            return 0, node.reqs
        k = fit_dense(node.free, g.req, g.nz)
        if k <= 0:
            self._fit_bound = True
            return 0, node.reqs
        cap = self._node_cap(node, g)
        if k < limit and k < cap:
            self._fit_bound = True
        k = min(k, limit, cap)
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
            pinned = self._pin_zone(new_reqs, slot, self._allowed_zones(g))
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

    def _pin_zone(self, reqs: Requirements, slot: Slot, allowed: frozenset[str] | None) -> Requirements | None:
        """``reqs`` pinned to the cheapest allowed zone the slot offers (None: no such zone); among
        zones of equal price, the one with the fewest nodes so far (``State.zone_nodes``), then by
        name: groups that keep to one zone (a zone affinity, say) are dealt over the zones instead of
        all to the first (seven of them put 4 in one zone of four, and 40 % of a 3,000-pod plan's
        nodes with them).

        The zones are memoized per arguments; the choice among them reads the counts each time."""
        key = (reqs, slot.idx, allowed)
        hit: tuple[str, ...] | Requirements | None
        if key in self._pin_cache:
            hit = self._pin_cache[key]
        else:
            offers = self._offerings(reqs, slot)
            zones = sorted({o.zone for o in offers if allowed is None or o.zone in allowed})
            if not zones:
                hit = None
            elif len(zones) > 1 or reqs.get(LABEL_ZONE) is None:
                price = min(o.price for o in offers if o.zone in zones)
                hit = tuple(sorted({o.zone for o in offers if o.zone in zones and o.price == price}))
            else:
                hit = reqs
            self._pin_cache[key] = hit
        if not isinstance(hit, tuple):
            return hit
        if len(hit) == 1:
            zone = hit[0]
        else:
            counts = self.state.zone_nodes
            zone = min(hit, key=lambda z: (counts.get(z, 0), z))
        pin = (reqs, zone)
        if pin not in self._pinned_to:
            self._pinned_to[pin] = self._intersect(reqs, Requirements((Requirement.in_(LABEL_ZONE, zone),)))
        return self._pinned_to[pin]

    def _min_values_ok(self, node: Node, g: Group, k: int, reqs: Requirements) -> bool:
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

    def _slot_hosts(self, slot: Slot, used: Sequence[int], reqs: Requirements) -> bool:
        return fits(used, slot.alloc) and self._compat(reqs, slot) and bool(self._offerings(reqs, slot))

    def _add(self, node: Node, part: Part, k: int, reqs: Requirements | None = None) -> None:
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
                    before = node.zone
                    node.zone = zr.single_value()
                    if before is None and node.zone is not None:
                        self.state.count_zone_nodes(node.zone, node.mult)
        total = k * node.mult
        part.placed += total
        part.remaining -= total
        if part.remaining <= 0:
            self._emptied.append(part)
        self._count_placed(g, node.zone, total)

    def _touch(self, node: Node) -> None:
        journal = self._journal
        if journal is not None and id(node) not in journal:
            journal[id(node)] = (node, node.copy())

    def _fill_new(self, part: Part) -> None:
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

    def _new_node(self, slot: Slot, reqs: Requirements, gang: str | None) -> Node:
        n = Node()
        n.slot = slot
        n.pool = slot.pool
        n.free = list(slot.alloc)
        n.reqs = reqs
        n.gang = gang
        zr = reqs.get(LABEL_ZONE)
        n.zone = zr.single_value() if zr is not None else None
        return n

    def _open(self, head: Part, active: list[Part], index: int) -> None:
        """Open new nodes for the head part until it is placed or nothing can host it."""
        while head.remaining > 0:
            sim = self._choose(head, active, index)
            if sim is None:
                return
            self._commit(sim, head)

    def _commit(self, sim: Sim, head: Part) -> None:
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
        if node.zone is not None:
            self.state.count_zone_nodes(node.zone, mult)
        for part, k in sim.pattern:
            self._add(node, part, k)
        usage = self.state.usage[sim.slot.pool.idx]
        for name, cap in zip(sim.slot.pool.limit_names, sim.slot.cap_limits, strict=True):
            usage[name] = usage.get(name, 0) + cap * mult
        self.state.new.append(node)
        self.state.open.append(node)

    def _choose(self, head: Part, active: list[Part], index: int) -> Sim | None:
        """The simulated node to open next for the head part (None: nothing can host it)."""
        raise NotImplementedError

    def _redistribute(self, parts: list[Part]) -> None:
        """Zonal spread parts that could not be placed move to other zones within maxSkew."""
        by_group: dict[int, list[Part]] = {}
        loose: list[Part] = []
        for part in parts:
            if part.zone is None:
                continue
            if part.group.zone_spread is not None:
                by_group.setdefault(part.group.idx, []).append(part)
            elif part.remaining > 0:
                loose.append(part)
        for stuck_part in loose:
            # a zone share of pods that only other groups' spread counts: rather anywhere than nowhere
            g = stuck_part.group
            left = stuck_part.remaining
            stuck_part.set_quota(stuck_part.placed)
            anywhere = Part(g, None, left, g.variants)
            self._place_part(anywhere)
            parts.append(anywhere)
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
                domains = self._zone_domains(g, term, counts)
                floor = min(domains.values()) if domains else 0
                floor = min([floor] + [counts.get(z, 0) for z in stuck_zones if z is not None])
                caps = {z: max(0, floor + term.max_skew - c) for z, c in domains.items() if z not in stuck_zones}
                if not any(caps.values()):
                    break
                quotas = water_fill({z: domains[z] for z in caps}, left, caps=caps)
                moved = 0
                for p in stuck:
                    p.set_quota(p.quota - p.remaining)
                new_parts = []
                for z in sorted(quotas):
                    if quotas[z] <= 0:
                        continue
                    part = Part(g, z, quotas[z], self._in_zone(g.variants, z))
                    new_parts.append(part)
                for part in new_parts:
                    self._place_part(part)
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

    def _place_part(self, part: Part) -> None:
        """Existing nodes, in-flight NodeClaims, open new nodes, then new nodes, for one part."""
        for in_flight in (False, True):
            if part.remaining > 0:
                self._fill_existing(part, in_flight=in_flight)
        if part.remaining > 0:
            self._fill_new(part)
        if part.remaining > 0:
            self._open(part, [part], 0)

    def _fail_part(self, part: Part) -> None:
        g = part.group
        reason = part.reason or self._explain(g, part.zone)
        placed_pods = self._pods_taken(g)
        for pod in g.pods[placed_pods : placed_pods + part.remaining]:
            self.unschedulable[pod.key] = reason
        self._taken[g.idx] = placed_pods + part.remaining
        part.set_quota(part.placed)

    def _pods_taken(self, g: Group) -> int:
        return self._taken.get(g.idx, 0)
