"""Topology bookkeeping: pods' spread and pod (anti-)affinity terms, what they select, the
matching-pod counts per node and zone, the caps they put on a node, and zone parts of a group."""

from __future__ import annotations

from collections.abc import Mapping

from controller.scheduling.labels import (
    LABEL_HOSTNAME,
    LABEL_ZONE,
)
from controller.scheduling.model import (
    Pod,
    PodAffinityTerm,
    TopologySpread,
)
from controller.scheduling.requirements import Requirement
from controller.scheduling.solver_base import SolverBase
from controller.scheduling.solver_model import Group, Node, Part, Term
from controller.scheduling.solver_numeric import water_fill


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

    def _make_parts(self, g: Group, zone: str | None, planned: dict[tuple[int, str], int]) -> list[Part]:
        """Split the group's pods into parts, by zone when it has a zonal spread constraint.

        ``planned`` holds the pods the parts made before in this phase will put in each zone, as
        (group, zone) -> pods; they count towards every spread whose selector matches their group,
        so groups that differ only in size share their counts. The new parts are added to it.
        """
        out = self._split(g, zone, planned)
        for part in out:
            if part.zone is not None and part.quota > 0:
                key = (g.idx, part.zone)
                planned[key] = planned.get(key, 0) + part.quota
        return out

    def _split(self, g: Group, zone: str | None, planned: Mapping[tuple[int, str], int]) -> list[Part]:
        total = sum(1 for _ in g.pods) - self.state.placed_total.get(g.idx, 0)
        variants = g.variants
        if zone is not None:
            zr = Requirement.in_(LABEL_ZONE, zone)
            variants = [v.with_(zr) for v in variants]
            variants = [v for v in variants if v.is_satisfiable()]
        if g.zone_spread is None or total <= 0:
            return [Part(g, zone, total, variants)]
        term = g.zone_spread
        domains = self._zone_domains(g, term, planned)
        if zone is not None:
            domains = {z: c for z, c in domains.items() if z == zone} or {zone: 0}
        if not domains:
            return [Part(g, zone, total, variants)]
        caps = None
        if term.min_domains is not None and len(domains) < term.min_domains:
            # fewer eligible zones than minDomains: the global minimum counts as zero
            caps = {z: max(0, term.max_skew - c) for z, c in domains.items()}
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
        for z in sorted(quotas):
            if quotas[z] <= 0:
                continue
            zr = Requirement.in_(LABEL_ZONE, z)
            zv = [v.with_(zr) for v in g.variants]
            zv = [v for v in zv if v.is_satisfiable()]
            part = Part(g, z, quotas[z], zv)
            out.append(part)
        return out

    def _zone_counts(self, term: Term, planned: Mapping[tuple[int, str], int] | None = None) -> dict[str, int]:
        """Pods the term's selector matches per zone, of every group: running on existing nodes,
        placed so far in this plan, and ``planned`` (pods of parts made but not placed yet)."""
        counts = dict(term.existing_zone)
        for (h, z), c in self.state.placed_zone.items():
            if h in term.matched:
                counts[z] = counts.get(z, 0) + c
        if planned:
            for (h, z), c in planned.items():
                if h in term.matched:
                    counts[z] = counts.get(z, 0) + c
        return counts

    def _zone_domains(
        self, g: Group, term: Term, planned: Mapping[tuple[int, str], int] | None = None
    ) -> dict[str, int]:
        """Eligible zones for the group's zonal spread, with matching-pod counts (see `_zone_counts`)."""
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
        counts = self._zone_counts(term, planned)
        return {z: counts.get(z, 0) for z in sorted(zones)}

    def _host_count(self, term: Term, node: Node) -> int:
        count = term.existing_node.get(node.idx, 0) if node.existing is not None else 0
        matched = term.matched
        for h, c in node.placed.items():
            if h in matched:
                count += c
        return count

    def _zone_count(self, term: Term, zone: str) -> int:
        count = term.existing_zone.get(zone, 0)
        for h in term.matched:
            count += self.state.placed_zone.get((h, zone), 0)
        return count

    def _global_count(self, term: Term) -> int:
        count = term.existing_total
        for h in term.matched:
            count += self.state.placed_total.get(h, 0)
        return count

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
