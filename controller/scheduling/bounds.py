"""A NodePool's bounds beyond resource limits -- its $/hour budget and ``limits.nodes`` -- applied to
a solver's plan. Pure.

The solver keeps resource limits itself; the count of nodes and their price are checked on the
plan it returns: the new NodeClaims are taken in plan order (real pods' machines before the warm
buffer's) while the pool stays within both bounds, and every pod of a machine that would cross one
is refused with a sentence that says which and by how much. A gang's machines are kept or refused
together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from controller.scheduling.model import NewNodeClaim, Plan

BUDGET_EXCEEDED: Final = "BudgetExceeded"
NODE_LIMIT_REACHED: Final = "NodeLimitReached"
_EPS: Final = 1e-9


@dataclass(frozen=True, slots=True)
class PoolBounds:
    """One pool's bounds and what it already holds (running and in-flight NodeClaims).

    ``max_price`` None: no budget; ``max_nodes`` None: no node limit."""

    max_price: float | None = None
    max_nodes: int | None = None
    price: float = 0.0
    nodes: int = 0


@dataclass(frozen=True, slots=True)
class Bounded:
    """The plan cut to the bounds. ``refused``: pod key -> (reason, message) for the pods whose
    machine was left out."""

    plan: Plan
    refused: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def bounds_wanted(pools: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[float | None, int | None]]:
    """NodePool name -> (``spec.capacity.budget.maxPricePerHour``, ``spec.limits.nodes``) for the
    pools (NodePool manifests by name) that set either; the others have no bounds to apply."""
    wanted: dict[str, tuple[float | None, int | None]] = {}
    for name, pool in pools.items():
        spec = pool.get("spec") or {}
        budget = ((spec.get("capacity") or {}).get("budget") or {}).get("maxPricePerHour")
        max_nodes = (spec.get("limits") or {}).get("nodes")
        if budget is not None or max_nodes is not None:
            wanted[name] = (
                None if budget is None else float(budget),
                None if max_nodes is None else int(str(max_nodes)),
            )
    return wanted


def _held(bounds: PoolBounds, *, nodes: int, price: float) -> tuple[str, str]:
    """How many nodes the pool has and what they cost, with the ones planned before this one."""
    planned = nodes - bounds.nodes
    if planned <= 0:
        return f"has {bounds.nodes}", f"its nodes cost ${price:.2f}/h"
    return (
        f"has {bounds.nodes} and {planned} more planned",
        f"its nodes and the {planned} planned cost ${price:.2f}/h",
    )


def _why(node: NewNodeClaim, bounds: PoolBounds, *, price: float, nodes: int) -> tuple[str, str] | None:
    has, cost = _held(bounds, nodes=nodes, price=price)
    if bounds.max_nodes is not None and nodes + 1 > bounds.max_nodes:
        return (
            NODE_LIMIT_REACHED,
            f'nodepool "{node.node_pool}": all available instance types exceed limits for nodepool '
            f"(limits.nodes is {bounds.max_nodes} and it {has})",
        )
    if bounds.max_price is not None and price + node.price > bounds.max_price + _EPS:
        return (
            BUDGET_EXCEEDED,
            f'nodepool "{node.node_pool}": its budget is ${bounds.max_price:.2f}/h and {cost}: '
            f"a {node.choice.instance_type} at ${node.price:.2f}/h would cross it",
        )
    return None


def apply_bounds(plan: Plan, bounds: Mapping[str, PoolBounds]) -> Bounded:
    """Keep the plan's new NodeClaims while each pool stays within its bounds (see module doc)."""
    if not plan.new_nodes or not any(b.max_price is not None or b.max_nodes is not None for b in bounds.values()):
        return Bounded(plan=plan)
    price = {name: b.price for name, b in bounds.items()}
    count = {name: b.nodes for name, b in bounds.items()}
    refused_gangs: dict[str, tuple[str, str]] = {}
    for node in plan.new_nodes:  # a gang is all or nothing: any machine of it refused refuses it
        b = bounds.get(node.node_pool)
        if node.gang is None or b is None or node.gang in refused_gangs:
            continue
        why = _why(node, b, price=price[node.node_pool], nodes=count[node.node_pool])
        if why is not None:
            refused_gangs[node.gang] = why
        else:
            price[node.node_pool] += node.price
            count[node.node_pool] += 1
    # start over: every machine in plan order, the refused gangs' left out
    price = {name: b.price for name, b in bounds.items()}
    count = {name: b.nodes for name, b in bounds.items()}
    kept: list[NewNodeClaim] = []
    refused: dict[str, tuple[str, str]] = {}
    for node in plan.new_nodes:
        b = bounds.get(node.node_pool)
        reason: tuple[str, str] | None
        if node.gang is not None and node.gang in refused_gangs:
            reason = refused_gangs[node.gang]
        else:
            reason = None if b is None else _why(node, b, price=price[node.node_pool], nodes=count[node.node_pool])
        if reason is not None:
            refused.update(dict.fromkeys(node.pods, reason))
            continue
        kept.append(node)
        if b is not None:
            price[node.node_pool] += node.price
            count[node.node_pool] += 1
    if not refused:
        return Bounded(plan=plan)
    unschedulable = {**plan.unschedulable, **{key: message for key, (_, message) in refused.items()}}
    return Bounded(
        plan=replace(
            plan,
            new_nodes=tuple(kept),
            unschedulable=unschedulable,
            total_price=sum(n.price for n in kept),
        ),
        refused=refused,
    )
