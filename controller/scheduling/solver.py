"""The solver: pending pods + NodePools + existing capacity -> a Plan of NodeClaims to buy.

Pure: no I/O, no clock, no logging. `solve` (with `SolveCache`) is the one entry point; the
stages live in the ``solver_*`` modules. See ``docs/solver.md`` for the algorithm. In short:

1. Identical pods (same scheduling-relevant spec and labels) form a *group*; groups are solved
   in bulk. Groups are ordered GPU-first, then by their standalone cost per pod, descending.
2. Each group is split into *parts* by zone when it has a zonal topology spread constraint
   (water-filling the zone counts, so every placement respects ``maxSkew``).
3. Phase 1 puts pods on existing nodes, then on in-flight NodeClaims (free capacity first).
4. Phase 2 opens new nodes: for the next part, each candidate (NodePool, instance type) is
   simulated by first-fit-decreasing packing of that part and the parts after it; the candidate
   with the lowest price per unit of packed value wins (value = the pods' standalone costs). The
   resulting node *pattern* is replicated as often as the remaining pods allow.
5. Every new node is then shrunk to the cheapest instance type of its pool that still fits its
   pods, and gets the full, price-ordered list of instance types that could host it.
6. Small plans are improved locally (`solver_improve`).

Where each stage lives:

- ``solver_model``: the internal model (groups, slots, terms, nodes, parts, state) and `SolveCache`
- ``solver_numeric``: small numeric helpers (fit counts, water-filling)
- ``solver_base``: inputs sorted and indexed, cached predicates
- ``solver_topology``: spread and pod (anti-)affinity bookkeeping
- ``solver_candidates``: candidate instance types per group and per finished node
- ``solver_explain``: reasons for pods that cannot be placed
- ``solver_packing``: existing, in-flight and new nodes, first fit, redistribution
- ``solver_choice``: which new node to open (simulation, pilot rollouts)
- ``solver_gang``: gangs, all-or-nothing
- ``solver_run``: the stages in order, and the Plan
- ``solver_improve``: local search on small plans
"""

from __future__ import annotations

import gc
from collections.abc import Collection, Sequence

from controller.scheduling.model import ExistingNode, Gang, NodePoolTemplate, OfferingKey, Plan, Pod
from controller.scheduling.solver_improve import IMPROVE_MAX_NODES, improve
from controller.scheduling.solver_model import SolveCache
from controller.scheduling.solver_run import Solver
from controller.scheduling.solver_zones import spread_zones
from controller.scheduling.spread_domains import deal_spread_domains

__all__ = ["SolveCache", "solve"]


def solve(
    *,
    pods: Sequence[Pod],
    node_pools: Sequence[NodePoolTemplate],
    existing_nodes: Sequence[ExistingNode] = (),
    daemon_pods: Sequence[Pod] = (),
    unavailable: Collection[OfferingKey] = frozenset(),
    gangs: Sequence[Gang] = (),
    cache: SolveCache | None = None,
) -> Plan:
    """Decide where pending ``pods`` go and which NodeClaims to buy. Pure and deterministic.

    ``existing_nodes`` include in-flight NodeClaims (``in_flight=True``); ``daemon_pods`` are
    daemonset pod templates (their requests are added to every new node they would run on);
    ``unavailable`` offerings (instance type, zone, capacity type) are avoided; pods whose
    ``gang`` is set are placed all-or-nothing per gang (``gangs`` gives per-gang options);
    ``cache`` shares work between solves over the same pools and nodes (see `SolveCache`).
    """
    # the solve allocates many small objects and frees them by reference count; the cyclic
    # collector would only re-scan them (a sixth of a large solve's time), so it waits until the end
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _solve(
            pods=pods,
            node_pools=node_pools,
            existing_nodes=existing_nodes,
            daemon_pods=daemon_pods,
            unavailable=unavailable,
            gangs=gangs,
            cache=cache,
        )
    finally:
        if collecting:
            gc.enable()


def _solve(
    *,
    pods: Sequence[Pod],
    node_pools: Sequence[NodePoolTemplate],
    existing_nodes: Sequence[ExistingNode],
    daemon_pods: Sequence[Pod],
    unavailable: Collection[OfferingKey],
    gangs: Sequence[Gang],
    cache: SolveCache | None,
) -> Plan:
    avoid = frozenset(unavailable)
    cache = cache if cache is not None else SolveCache()
    pods = deal_spread_domains(pods, node_pools, existing_nodes, avoid)
    plan = Solver(
        pods=pods,
        node_pools=node_pools,
        existing_nodes=existing_nodes,
        daemon_pods=daemon_pods,
        unavailable=avoid,
        gangs=gangs,
        cache=cache,
    ).run()
    if 1 < len(plan.new_nodes) <= IMPROVE_MAX_NODES:
        plan = improve(
            plan,
            pods=pods,
            node_pools=node_pools,
            existing_nodes=existing_nodes,
            daemon_pods=daemon_pods,
            unavailable=avoid,
            cache=cache,
        )
    return spread_zones(plan, existing_nodes)
