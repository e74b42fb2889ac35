"""One solve from inputs to Plan: runs the stages in order and turns the final state into a Plan."""

from __future__ import annotations

from controller.scheduling.model import (
    NewNodeClaim,
    Plan,
)
from controller.scheduling.requirements import Requirements
from controller.scheduling.resources import weighted_sum
from controller.scheduling.solver_gang import GangPlacer


class Solver(GangPlacer):
    """The stages of one solve, in order (see ``docs/solver.md``)."""

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
        self._build_twins()
        self._build_rules()
        if self.groups:
            dims = range(len(self.u.names))
            lows = [min(g.req[d] for g in self.groups) for d in dims]
            self._min_req = [(d, lows[d]) for d in dims if lows[d] > 0]

        gang_ids = sorted({g.gang for g in self.groups if g.gang is not None})
        for gang_id in gang_ids:
            self._place_gang(gang_id, [g for g in self.groups if g.gang == gang_id])
        rest = [g for g in self.groups if g.gang is None]
        # groups that a zonal spread counts but that stay where their first pod goes (pod
        # affinity, zone anti-affinity) are placed first: their zones then count for the quotas
        early = [g for g in rest if g.zone_matchers and g.per_node_only and not g.deferred]
        parts = self._place_groups(early, zone=None) if early else []
        first = {g.idx for g in early}
        parts += self._place_groups([g for g in rest if g.idx not in first], zone=None)
        for part in parts:
            if part.remaining > 0:
                self._fail_part(part)
        return self._finalize()

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
            requests_base = weighted_sum((self.groups[gi].req_res, k) for gi, k in node.content)
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
