"""Topology bookkeeping: pods' spread and pod (anti-)affinity terms, what they select, the
matching-pod counts per node and zone, the caps they put on a node, and zone parts of a group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from controller.scheduling.labels import (
    LABEL_HOSTNAME,
    LABEL_ZONE,
)
from controller.scheduling.model import (
    HostPort,
    Pod,
    PodAffinityTerm,
    TopologySpread,
    ports_conflict,
)
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.solver_base import SolverBase
from controller.scheduling.solver_model import Group, HostRule, Node, Part, Term, ZoneRule
from controller.scheduling.solver_numeric import water_fill

if TYPE_CHECKING:
    from controller.scheduling.solver_tally import ZoneTally


class TopologyRules(SolverBase):
    """Spread and pod (anti-)affinity: terms, counts per node / zone, caps and allowed zones."""

    def _build_terms(self) -> None:
        """Turn pods' spread/affinity terms into _Terms and precompute what they select."""
        self.terms: list[Term] = []
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
        # terms that select alike (same selector and namespaces) share what they select; groups
        # with the same namespace and labels get the same answer (5,000 pods: 1,913 groups, 7
        # label sets)
        selected: dict[object, tuple[frozenset[int], dict[int, int], dict[str, int], int]] = {}
        identities = [(h.idx, (h.rep.namespace, h.rep.labels)) for h in self.groups]
        for term in self.terms:
            key = (term.selector, term.namespaces, term.all_ns)
            got = selected.get(key)
            if got is None:
                verdicts: dict[tuple[str, Mapping[str, str]], bool] = {}
                chosen = []
                for idx, who in identities:
                    verdict = verdicts.get(who)
                    if verdict is None:
                        verdict = verdicts[who] = term.selects(*who)
                    if verdict:
                        chosen.append(idx)
                matched = frozenset(chosen)
                on_node: dict[int, int] = {}
                in_zone: dict[str, int] = {}
                total = 0
                for node_idx, zone, pod in existing_pods:
                    if term.selects(pod.namespace, pod.labels):
                        on_node[node_idx] = on_node.get(node_idx, 0) + 1
                        if zone is not None:
                            in_zone[zone] = in_zone.get(zone, 0) + 1
                        total += 1
                got = selected[key] = (matched, on_node, in_zone, total)
            term.matched = got[0]
            term.self_match = term.owner in term.matched
            term.existing_node = dict(got[1])
            term.existing_zone = dict(got[2])
            term.existing_total = got[3]
        self._build_aggregates()
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
        self._build_host_ports(existing_pods)
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
        self._build_sim_counts()

    def _build_host_ports(self, existing_pods: Sequence[tuple[int, str | None, Pod]]) -> None:
        """Host ports, as kube-scheduler's NodePorts filter counts them: groups whose ports conflict
        never share a node (so a group that takes a port has one pod a node), and a group stays
        off the existing and in-flight nodes where a pod already takes one of its ports. (A
        DaemonSet's port keeps a group off new nodes: `_prepare_candidates`.)"""
        users = [g for g in self.groups if g.rep.host_ports]
        if not users:
            return
        for i, g in enumerate(users):
            for h in users[i:]:
                if ports_conflict(g.rep.host_ports, h.rep.host_ports) is not None:
                    g.conflict_host.add(h.idx)
                    h.conflict_host.add(g.idx)
        taken: dict[int, list[HostPort]] = {}
        for node_idx, _zone, pod in existing_pods:
            if pod.host_ports:
                taken.setdefault(node_idx, []).extend(pod.host_ports)
        for node_idx, ports in taken.items():
            on_node = tuple(ports)
            for g in users:
                if ports_conflict(g.rep.host_ports, on_node) is not None:
                    g.blocked_nodes.add(node_idx)

    def _build_sim_counts(self) -> None:
        """Which running counts a simulation of a new node must keep up to date (`_sim_count`).

        While a candidate node is filled, the counts are read only by pod affinity and
        anti-affinity (a group's `_allowed_zones` and the hostname affinity of `_node_cap`):
        spread is counted on the node itself (hostname) or was settled when the zone parts were
        made (zone). So a simulation updates the counts of those terms' selections alone, and
        the pods per zone of the groups a zone anti-affinity conflict names."""
        read: set[int] = set()
        zoned: set[int] = set()
        for g in self.groups:
            for term in (*g.host_aff, *g.zone_aff, *g.zone_anti):
                read.add(term.agg)
            zoned.update(g.conflict_zone)
        self._sim_aggs = [[a for a in self._group_aggs[g.idx] if a in read] for g in self.groups]
        self._sim_zoned = [g.idx in zoned for g in self.groups]

    def _build_aggregates(self) -> None:
        """One running count per distinct set of matched groups (see `State.agg_zone`)."""
        ids: dict[frozenset[int], int] = {}
        for term in self.terms:
            term.agg = ids.setdefault(term.matched, len(ids))
        self._group_aggs = [[a for matched, a in ids.items() if g.idx in matched] for g in self.groups]
        st = self.state
        st.agg_zone = [{} for _ in ids]
        st.agg_total = [0] * len(ids)
        for matched, a in ids.items():
            for h in matched:
                st.agg_total[a] += st.placed_total.get(h, 0)
            zones = st.agg_zone[a]
            for (h, z), c in st.placed_zone.items():
                if h in matched:
                    zones[z] = zones.get(z, 0) + c

    def _count_placed(self, g: Group, zone: str | None, count: int) -> None:
        """Record ``count`` more (or, negative, fewer) pods of ``g`` placed, in ``zone`` if known."""
        st = self.state
        st.placed_total[g.idx] = st.placed_total.get(g.idx, 0) + count
        aggs = self._group_aggs[g.idx]
        for a in aggs:
            st.agg_total[a] += count
        if zone is not None:
            key = (g.idx, zone)
            st.placed_zone[key] = st.placed_zone.get(key, 0) + count
            for a in aggs:
                zones = st.agg_zone[a]
                zones[zone] = zones.get(zone, 0) + count

    def _sim_count(self, g: Group, zone: str | None, count: int) -> bool:
        """`_count_placed` for a simulation: only the counts simulations read (see
        `_build_sim_counts`). Returns whether anything was counted (and must be undone)."""
        aggs = self._sim_aggs[g.idx]
        zoned = zone is not None and self._sim_zoned[g.idx]
        if not aggs and not zoned:
            return False
        st = self.state
        for a in aggs:
            st.agg_total[a] += count
        if zone is not None:
            for a in aggs:
                zones = st.agg_zone[a]
                zones[zone] = zones.get(zone, 0) + count
            if zoned:
                key = (g.idx, zone)
                st.placed_zone[key] = st.placed_zone.get(key, 0) + count
        return True

    def _build_rules(self) -> None:
        """Once candidates are known: merge the spread terms into rules (same counted pods, zones
        and bound) and give every group the rules whose selector matches its pods."""
        self._eligible_cache: dict[object, frozenset[str]] = {}
        zone_rules: dict[tuple[frozenset[int], int, frozenset[str], bool], tuple[Term, set[int]]] = {}
        host_rules: dict[tuple[frozenset[int], int], tuple[Term, set[int]]] = {}
        for term in self.terms:
            if term.kind != "spread":
                continue
            owner = self.groups[term.owner]
            if term.topology_key == LABEL_ZONE:
                domains = frozenset(self._zone_domains(owner, term))
                min_zero = term.min_domains is not None and len(domains) < term.min_domains
                zone_rules.setdefault((term.matched, term.max_skew, domains, min_zero), (term, set()))[1].add(owner.idx)
            else:
                bound = term.max_skew + owner.host_m.get(id(term), 0)
                host_rules.setdefault((term.matched, bound), (term, set()))[1].add(owner.idx)
        self._owned_zone_rules: dict[int, list[ZoneRule]] = {}
        for (matched, skew, domains, min_zero), (term, owners) in zone_rules.items():
            rule = ZoneRule(term=term, max_skew=skew, domains=domains, min_zero=min_zero, owners=frozenset(owners))
            for h in sorted(matched):
                self.groups[h].zone_matchers.append(rule)
            for h in sorted(owners):
                self._owned_zone_rules.setdefault(h, []).append(rule)
        for (matched, bound), (term, owners) in host_rules.items():
            host_rule = HostRule(term=term, bound=bound, owners=frozenset(owners))
            for h in sorted(matched):
                self.groups[h].host_matchers.append(host_rule)

    def _spread_term(self, g: Group, sp: TopologySpread) -> Term:
        return Term(
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

    def _affinity_term(self, g: Group, kind: str, at: PodAffinityTerm) -> Term:
        return Term(
            kind=kind,
            owner=g.idx,
            topology_key=at.topology_key,
            selector=at.selector,
            namespaces=at.namespaces or frozenset({g.rep.namespace}),
            all_ns=at.all_namespaces,
        )

    def _hostname_minimums(self, g: Group) -> None:
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

    def _self_cap(self, g: Group) -> int:
        cap = 1 << 30
        if g.idx in g.conflict_host:
            cap = 1
        for term in g.host_spread:
            if term.self_match:
                cap = min(cap, term.max_skew + g.host_m.get(id(term), 0))
        return max(cap, 1)

    def _make_parts(
        self, g: Group, zone: str | None, planned: dict[tuple[int, str], int], tally: ZoneTally
    ) -> list[Part]:
        """Split the group's pods into parts, by zone when a zonal spread counts them.

        ``planned`` holds the pods the parts made before in this phase will put in each zone, as
        (group, zone) -> pods; they count towards every spread whose selector matches their group,
        so groups that differ only in size share their counts. The new parts are added to it (and
        to ``tally``, the same counts per rule).
        """
        out = self._split(g, zone=zone, planned=planned, tally=tally)
        for part in out:
            if part.zone is not None and part.quota > 0:
                key = (g.idx, part.zone)
                planned[key] = planned.get(key, 0) + part.quota
                tally.add(g, part.zone, part.quota, self._owned_zone_rules.get(g.idx, ()))
        return out

    def _zone_parts(self, g: Group, quotas: Mapping[str, int]) -> list[Part]:
        out = []
        for z in sorted(quotas):
            if quotas[z] <= 0:
                continue
            out.append(Part(g, z, quotas[z], self._in_zone(g.variants, z)))
        return out

    def _in_zone(self, variants: Sequence[Requirements], zone: str) -> list[Requirements]:
        """The variants with the zone's requirement added, those that can still be met (memoized per
        variant and zone: the groups of a pattern share their variants, and their parts the zones)."""
        out = []
        for v in variants:
            key = (v, zone)
            hit = self._zoned.get(key)
            if hit is None:
                zv = v.with_(Requirement.in_(LABEL_ZONE, zone))
                hit = self._zoned[key] = (zv, zv.is_satisfiable())
            if hit[1]:
                out.append(hit[0])
        return out

    def _splits_unconstrained(self, g: Group) -> bool:
        """Whether a group without a zonal spread of its own is split over zones because other
        groups' zonal spread counts its pods (groups bound to one node / zone are not)."""
        return bool(g.zone_matchers) and g.gang is None and not (g.per_node_only or g.deferred)

    def _split(
        self, g: Group, zone: str | None, planned: Mapping[tuple[int, str], int], tally: ZoneTally
    ) -> list[Part]:
        total = sum(1 for _ in g.pods) - self.state.placed_total.get(g.idx, 0)
        variants = g.variants
        if zone is not None:
            variants = self._in_zone(variants, zone)
        if total <= 0:
            return [Part(g, zone, total, variants)]
        if g.zone_spread is None:
            if zone is not None or not self._splits_unconstrained(g):
                return [Part(g, zone, total, variants)]
            zones = sorted(self._eligible_zones(g, honor_affinity=True, honor_taints=True))
            if not zones:
                return [Part(g, zone, total, variants)]
            quotas = self._greedy_zones(g, total, zones=zones, planned=planned, tally=tally, caps=None)
            return self._zone_parts(g, quotas)
        term = g.zone_spread
        domains = self._zone_domains(g, term, tally.counts(term, planned, self))
        if zone is not None:
            domains = {z: c for z, c in domains.items() if z == zone} or {zone: 0}
        if not domains:
            return [Part(g, zone, total, variants)]
        caps = None
        min_zero = term.min_domains is not None and len(domains) < term.min_domains
        if min_zero:
            # fewer eligible zones than minDomains: the global minimum counts as zero
            caps = {z: max(0, term.max_skew - c) for z, c in domains.items()}
        if zone is None and self._needs_greedy(g, frozenset(domains), min_zero):
            quotas = self._greedy_zones(g, total, zones=sorted(domains), planned=planned, tally=tally, caps=caps)
        else:
            # among equally counted zones, the one whose matching pods of this plan are worth least
            # goes first, so groups of different sizes sharing the selector balance what each zone buys
            load: dict[str, float] = {}
            for (h, z), c in planned.items():
                if h in term.matched:
                    load[z] = load.get(z, 0.0) + c * self.groups[h].w
            quotas = water_fill(domains, total, caps=caps, load=load, weight=g.w)
        out = []
        leftover = total - sum(quotas.values())
        if leftover > 0:
            stuck = Part(g, zone, leftover, [])
            stuck.reason = (
                f"{term.describe()}: only {len(domains)} zones are eligible but minDomains is "
                f"{term.min_domains}, so each zone takes at most {term.max_skew} matching pods"
            )
            out.append(stuck)
        out.extend(self._zone_parts(g, quotas))
        return out

    def _needs_greedy(self, g: Group, domains: frozenset[str], min_zero: bool) -> bool:
        """Whether water-filling the group's own counts could break a spread that counts its pods:
        no, when every such spread counts the same pods over the same zones (filling the lowest
        zone keeps each of them within maxSkew)."""
        own = g.zone_spread
        assert own is not None
        if not own.self_match:
            return bool(g.zone_matchers)
        return any(
            r.term.matched != own.matched or r.domains != domains or r.min_zero != min_zero for r in g.zone_matchers
        )

    def _greedy_zones(
        self,
        g: Group,
        total: int,
        *,
        zones: Sequence[str],
        planned: Mapping[tuple[int, str], int],
        tally: ZoneTally,
        caps: Mapping[str, int] | None,
    ) -> dict[str, int]:
        """Zones for the group's pods one at a time: a zone where no spread that counts them (its
        own, and other groups' whose pods are already in that zone) would exceed maxSkew; among
        those, the lowest own count (a group with a zonal spread), then the lowest skew it makes
        for the spreads counting it, then the zone name."""
        rules = list(g.zone_matchers)
        counts = [dict(tally.counts(r.term, planned, self)) for r in rules]
        # counts shared by several rules are one dict
        by_class: dict[int, dict[str, int]] = {}
        for i, r in enumerate(rules):
            counts[i] = by_class.setdefault(id(r.term.matched), counts[i])
        present = [set(tally.present(r, planned, self)) for r in rules]
        own = g.zone_spread
        own_counts: dict[str, int] = {}
        own_low_zero = False
        if own is not None:
            own_counts = dict(tally.counts(own, planned, self))
            own_low_zero = caps is not None
        out = dict.fromkeys(zones, 0)
        for _ in range(total):
            best: tuple[int, int, int, str] | None = None
            for z in zones:
                if caps is not None and out[z] >= caps.get(z, 0):
                    continue
                bad = 0
                pressure = 0
                for r, c, pres in zip(rules, counts, present, strict=True):
                    if z not in r.domains:
                        continue
                    after = c.get(z, 0) + 1
                    low = 0 if r.min_zero else min(after if y == z else c.get(y, 0) for y in r.domains)
                    over = after - low - r.max_skew
                    if over > 0 and z in pres:
                        bad += over
                    pressure = max(pressure, after - low)
                mine = 0
                if own is not None:
                    mine = own_counts.get(z, 0)
                    low = 0 if own_low_zero else min(own_counts.get(y, 0) for y in zones)
                    over = mine + (1 if own.self_match else 0) - low - own.max_skew
                    if over > 0:
                        bad += over
                key = (bad, mine, pressure, z)
                if best is None or key < best:
                    best = key
            if best is None:
                break
            z = best[3]
            out[z] += 1
            done: set[int] = set()
            for r, c, pres in zip(rules, counts, present, strict=True):
                if id(c) not in done:
                    done.add(id(c))
                    c[z] = c.get(z, 0) + 1
                if g.idx in r.owners:
                    pres.add(z)
            if own is not None:
                own_counts[z] = own_counts.get(z, 0) + 1
        return out

    def _eligible_zones(self, g: Group, *, honor_affinity: bool, honor_taints: bool) -> set[str]:
        """Zones of existing nodes (that the group's node affinity / tolerations accept, as asked)
        and zones where a compatible instance type is offered, less the zones blocked for it."""
        cache = self._eligible_cache
        key = (
            tuple(g.required),
            g.tol_key if honor_taints else None,
            honor_affinity,
            frozenset(g.blocked_zones),
            g.slot_set,  # the slots in g.cands
        )
        found = cache.get(key)
        if found is None:
            found = cache[key] = frozenset(
                self._eligible_zones_of(g, honor_affinity=honor_affinity, honor_taints=honor_taints)
            )
        return set(found)

    def _eligible_zones_of(self, g: Group, *, honor_affinity: bool, honor_taints: bool) -> set[str]:
        zones: set[str] = set()
        for n in self.state.existing:
            if n.zone is None or n.cordoned:
                continue
            if honor_affinity and not any(v.matches(n.labels) for v in g.required):
                continue
            if honor_taints and self._untolerated(g.tol_key, n.taints) is not None:
                continue
            zones.add(n.zone)
        for cands in g.cands.values():
            for _lb, slot, _vi in cands:
                for variant in g.required:
                    if self._compat(variant, slot):
                        zones.update(o.zone for o in self._offerings(variant, slot))
                        break
        return zones - g.blocked_zones

    def _zone_counts(self, term: Term, planned: Mapping[tuple[int, str], int] | None = None) -> dict[str, int]:
        """Pods the term's selector matches per zone, of every group: running on existing nodes,
        placed so far in this plan, and ``planned`` (pods of parts made but not placed yet)."""
        counts = dict(term.existing_zone)
        # the pods placed so far: the running count of what the term selects (State.agg_zone)
        for z, c in self.state.agg_zone[term.agg].items():
            counts[z] = counts.get(z, 0) + c
        if planned:
            for (h, z), c in planned.items():
                if h in term.matched:
                    counts[z] = counts.get(z, 0) + c
        return counts

    def _zone_domains(self, g: Group, term: Term, counts: Mapping[str, int] | None = None) -> dict[str, int]:
        """Eligible zones for the group's zonal spread, with matching-pod counts (``counts``, or
        `_zone_counts` without pods planned)."""
        zones = self._eligible_zones(g, honor_affinity=term.honor_affinity, honor_taints=term.honor_taints)
        if counts is None:
            counts = self._zone_counts(term)
        return {z: counts.get(z, 0) for z in sorted(zones)}

    def _host_count(self, term: Term, node: Node) -> int:
        count = term.existing_node.get(node.idx, 0) if node.existing is not None else 0
        matched = term.matched
        for h, c in node.placed.items():
            if h in matched:
                count += c
        return count

    def _zone_count(self, term: Term, zone: str) -> int:
        return term.existing_zone.get(zone, 0) + self.state.agg_zone[term.agg].get(zone, 0)

    def _global_count(self, term: Term) -> int:
        return term.existing_total + self.state.agg_total[term.agg]

    def _node_cap(self, node: Node, g: Group) -> int:
        """How many pods of ``g`` the node's pod-level constraints allow (hostname scope)."""
        cap = 1 << 30
        if node.existing is not None and node.idx in g.blocked_nodes:
            return 0
        if node.existing is not None:
            # the group's anti-affinity counts the pods already running there, even when no pod of
            # this solve matches it
            for term in g.host_anti:
                if term.existing_node.get(node.idx, 0):
                    return 0
        if g.conflict_host:
            for h in node.placed:
                if h in g.conflict_host:
                    return 0
            if g.idx in g.conflict_host:
                cap = 1
        for term in g.host_spread:
            limit = term.max_skew + g.host_m.get(id(term), 0) - self._host_count(term, node)
            if limit <= 0:
                return 0
            if term.self_match:
                cap = min(cap, limit)
        if g.host_matchers and node.placed:
            # a hostname spread of pods already on the node counts this group's pods too
            for rule in g.host_matchers:
                if rule.owners.isdisjoint(node.placed):
                    continue
                limit = rule.bound - self._host_count(rule.term, node)
                if limit <= 0:
                    return 0
                cap = min(cap, limit)
        for term in g.host_aff:
            if self._host_count(term, node) > 0:
                continue
            if term.self_match and self._global_count(term) == 0:
                continue
            return 0
        return cap

    def _allowed_zones(self, g: Group) -> frozenset[str] | None:
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

    def _per_node_zone_cap(self, g: Group) -> int:
        if g.idx in g.conflict_zone:
            return 1
        return 1 << 30
