"""Local improvement of small plans: re-solve the pods of one node, or of two nodes of one pool,
on their own, and keep the result when it is cheaper and cannot break a constraint elsewhere."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from controller.scheduling.model import (
    ExistingNode,
    NewNodeClaim,
    NodePoolTemplate,
    OfferingKey,
    Plan,
    Pod,
    PodAffinityTerm,
    TopologySpread,
)
from controller.scheduling.solver_model import SolveCache
from controller.scheduling.solver_run import Solver

IMPROVE_MAX_NODES: Final = 40
"""Plans with at most this many new nodes get the re-solve local search (each node alone)."""


IMPROVE_MAX_PAIRS: Final = 12
"""... and, with at most this many, pairs of nodes too."""


def improve(
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
        sub = Solver(
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
    if len(nodes) <= IMPROVE_MAX_PAIRS:
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
