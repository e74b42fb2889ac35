"""Reasons in words: why a group of pods cannot be placed, per NodePool."""

from __future__ import annotations

import re
from collections.abc import Sequence

from controller.scheduling.labels import (
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
)
from controller.scheduling.quantity import format_human
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.solver_candidates import CandidateTypes
from controller.scheduling.solver_model import Group, Pool, Slot, SlotProto
from controller.scheduling.solver_numeric import fits


class Explanations(CandidateTypes):
    """One sentence per refused group naming each NodePool and why it cannot help."""

    def _explain(self, g: Group, zone: str | None) -> str:
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

    def _dynamic_reason(self, g: Group, zone: str | None) -> str | None:
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
            needs = f"{g.zone_spread.describe()} needs it in zone {zone}"
            tainted = self._tainted_domain(g, zone)
            return f"{needs} ({tainted})" if tainted else needs
        return None

    def _tainted_domain(self, g: Group, zone: str) -> str | None:
        """Why ``zone`` is one of the group's zone spread's domains, when only Nodes whose taints the pod
        does not tolerate make it one: kube-scheduler counts their zone too (``nodeTaintsPolicy:
        Ignore``, the default), so a zone with only, say, the add-ons' tainted Nodes and no machine to
        buy holds the spread at a skew nothing can fix. None when that is not the case."""
        term = g.zone_spread
        if term is None or term.honor_taints:
            return None
        if zone in self._eligible_zones(g, honor_affinity=term.honor_affinity, honor_taints=True):
            return None
        names = sorted(
            n.existing.name
            for n in self.state.existing
            if n.existing is not None
            and n.zone == zone
            and not n.cordoned
            and (not term.honor_affinity or any(v.matches(n.labels) for v in g.required))
            and self._untolerated(g.tol_key, n.taints) is not None
        )
        if not names:
            return None
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        return (
            f"zone {zone} is one of its domains only through Node {names[0]}{more}, whose taints the pod "
            "does not tolerate; nodeTaintsPolicy: Honor would leave such Nodes out"
        )

    def _pool_reason(self, pool: Pool, g: Group, zone: str | None) -> str | None:
        """Why the pool cannot host the group (None: it could, as far as static checks go)."""
        reason = self._pool_reason_of(pool, g, zone)
        if reason is None:
            return None
        # a requirement the pod's spread or pod affinity made (kubeconv: its key must exist on the node)
        for kind, key in [*(("topology spread", s.topology_key) for s in g.rep.spread),
                          *(("pod affinity", t.topology_key) for t in g.rep.affinity)]:  # fmt: skip
            if f"{key} Exists" in reason:
                return f"{reason} (its {kind} on {key} counts only nodes with that label)"
        return reason

    def _pool_reason_of(self, pool: Pool, g: Group, zone: str | None) -> str | None:
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
            return f"{name}: {self._hidden_reason(pool, g, required) or self._no_slots(pool)}"
        compat = [s for s in pool.slots if any(self._compat(t, s) for t in required)]
        if not compat:
            return f"{name}: {self._hidden_reason(pool, g, required) or self._type_mismatch(pool, required)}"
        offered = [s for s in compat if any(self._compat(t, s) and self._offerings(t, s) for t in required)]
        if not offered:
            hidden = self._hidden_reason(pool, g, required)
            if hidden is not None:
                return f"{name}: {hidden}"
            where = []
            for t in required:
                zr, cr = t.get(LABEL_ZONE), t.get(LABEL_CAPACITY_TYPE)
                if zr is not None:
                    where.append(str(zr))
                if cr is not None:
                    where.append(str(cr))
            return f"{name}: no compatible instance type has an available offering for {' and '.join(where)}"
        fitting = [s for s in offered if fits(g.req, s.alloc)]
        if not fitting:
            return f"{name}: {self._hidden_reason(pool, g, required) or self._resource_shortfall(g, offered)}"
        ports = g.rep.host_ports
        if ports and self._port_daemons:
            free = [s for s in fitting if self._daemon_port_conflict(ports, s) is None]
            if not free:
                taken = self._daemon_port_conflict(ports, fitting[0])
                assert taken is not None
                return f"{name}: host port {taken[0]} is taken on its nodes by the pods of {taken[1]}"
            fitting = free
        if all(self._limit_room(s) <= 0 for s in fitting):
            return f"{name}: {self._limit_message(pool, fitting)}"
        short = self._min_values_shortfall(pool, fitting)
        if short is not None:
            return f"{name}: {short}"
        return None

    def _no_slots(self, pool: Pool) -> str:
        """Why a pool has no instance type to launch at all (none hidden by a limit or a refusal)."""
        if not pool.template.instance_types:
            return "its NodeClass offers no instance types"
        labelled = [
            it
            for it in pool.template.instance_types
            if all(
                r.allows(it.labels.get(r.key))
                for r in pool.base
                if r.key in self.type_keys and r.key not in (LABEL_ZONE, LABEL_CAPACITY_TYPE)
            )
        ]
        if not labelled:
            shown = ", ".join(str(r) for r in pool.base if r.key != LABEL_NODEPOOL)
            return f"no instance type matches the nodepool's requirements ({shown})"
        return (
            "no instance type with an available offering matches the nodepool's requirements "
            f"({len(labelled)} match, none has an available offering in the zones and capacity types it allows)"
        )

    def _hosts(self, pool: Pool, g: Group, required: Sequence[Requirements], protos: Sequence[SlotProto]) -> bool:
        """Whether one of these (instance type, offerings, ...) could host the group, limits aside."""
        for it, offerings, node_side, overhead in protos:
            alloc = self.u.vec(it.allocatable - overhead)
            if not fits(g.req, alloc):
                continue
            for term in required:
                if term.compatible_with_node(node_side) is not None:
                    continue
                zr, cr = term.get(LABEL_ZONE), term.get(LABEL_CAPACITY_TYPE)
                if any(
                    (zr is None or zr.allows(o.zone)) and (cr is None or cr.allows(o.capacity_type)) for o in offerings
                ):
                    return True
        return False

    def _hidden_reason(self, pool: Pool, g: Group, required: Sequence[Requirements]) -> str | None:
        """The cause when no launchable instance type hosts the group but one the pool lost would:
        a limit of 0 took it out (Karpenter's words), or the cloud refused its offerings for capacity
        a moment ago (they are skipped until the refusal expires)."""
        template = pool.template
        if template.over_limit:
            lost = self._protos_of(pool, template.over_limit, self.type_keys, skip=frozenset())
            if self._hosts(pool, g, required, lost):
                hosting = {n for it, *_ in lost for n in template.zero_limits if it.capacity.get(n) > 0}
                needed = [n for n in template.zero_limits if n in hosting] or list(template.zero_limits)
                said = ", ".join(f"{n} limit is 0" for n in needed)
                return f"all available instance types exceed limits for nodepool ({said})"
        if self.unavailable and template.instance_types:
            every = self._protos_of(pool, template.instance_types, self.type_keys, skip=frozenset())
            if self._hosts(pool, g, required, every):
                refused = sorted(
                    {
                        it.name
                        for it, offerings, *_ in every
                        for o in offerings
                        if (it.name, o.zone, o.capacity_type) in self.unavailable
                    }
                )
                shown = ", ".join(refused[:6]) + (", ..." if len(refused) > 6 else "")
                return (
                    "every instance type that could host it is unavailable: the cloud refused its offerings "
                    f"for insufficient capacity ({shown}); they are tried again when the refusal expires"
                )
        return None

    @staticmethod
    def _min_values_shortfall(pool: Pool, fitting: Sequence[Slot]) -> str | None:
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

    def _pool_conflict(self, pool: Pool, term: Requirements) -> str | None:
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

    def _type_mismatch(self, pool: Pool, required: Sequence[Requirements]) -> str:
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
        for req in term:
            if req.key not in (LABEL_ZONE, LABEL_CAPACITY_TYPE):
                continue
            single = Requirements((req,))
            if not any(self._compat(single, s) for s in pool.slots):
                have = sorted(
                    {o.zone if req.key == LABEL_ZONE else o.capacity_type for s in pool.slots for o in s.offerings}
                )
                shown = ", ".join(have[:8]) + (", ..." if len(have) > 8 else "")
                return f"no instance type has an available offering for {req} (its offerings have {req.key}: {shown})"
        return f"no instance type matches all of {term}"

    def _resource_shortfall(self, g: Group, slots: Sequence[Slot]) -> str:
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

    def _limit_message(self, pool: Pool, slots: Sequence[Slot]) -> str:
        usage = self.state.usage[pool.idx]
        cheapest = min(slots, key=lambda s: (s.min_price, s.it.name))
        for name, cap in zip(pool.limit_names, cheapest.cap_limits, strict=True):
            limit = pool.limits.get(name)
            used = usage.get(name, 0)
            if cap > 0 and used + cap > limit:
                return (
                    f"all available instance types exceed limits for nodepool ({name}: "
                    f"{format_human(name, used)} of {format_human(name, limit)} in use, "
                    f"the cheapest instance type that fits has {format_human(name, cap)})"
                )
        return "all available instance types exceed limits for nodepool"


_POOL_REASON = re.compile(r'nodepool "([^"]+)": (.*?)(?=; nodepool "|$)')


def reasons_by_pool(text: str) -> dict[str, str]:
    """NodePool -> its reason, from a refused pod's sentence (the solver's, a gang's, or a bound's:
    each NodePool's part starts ``nodepool "<name>": `` and the parts are joined with ``; ``)."""
    return {m.group(1): m.group(2) for m in _POOL_REASON.finditer(text)}
