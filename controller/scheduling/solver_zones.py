"""Equal prices spread over the zones: the last stage of a solve. Pure and deterministic.

Where the cheapest offering of a new node's instance type and capacity type has the same price in
several zones, the node goes to the one of those zones with the fewest nodes so far -- existing
nodes and the new nodes that cannot move (kept to one zone by their pods, or a gang's) first, then
the movable new nodes in order -- ties by zone name, and that zone comes first
among the equal prices in every candidate's offerings (the NodeClaim still allows every zone, so a
zone without capacity falls back to the next). A gang's nodes are left as placed: they keep to
one zone. Runs on the final plan, after local search re-solved nodes on their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from controller.scheduling.instancetypes import Offering
from controller.scheduling.labels import LABEL_ZONE
from controller.scheduling.model import ExistingNode, InstanceCandidate, InstanceChoice, NewNodeClaim, Plan


def spread_zones(plan: Plan, existing_nodes: Sequence[ExistingNode]) -> Plan:
    """``plan`` with price ties between zones given to the zones with the fewest nodes."""
    count: dict[str, int] = {}
    for existing in existing_nodes:
        zone = existing.labels.get(LABEL_ZONE)
        if zone is not None:
            count[zone] = count.get(zone, 0) + 1
    movable = [node.gang is None and len(_tied(node)) > 1 for node in plan.new_nodes]
    for node, moves in zip(plan.new_nodes, movable, strict=True):
        if not moves:  # where the zones stand before the movable nodes are dealt out
            count[node.choice.zone] = count.get(node.choice.zone, 0) + 1
    memo: dict[tuple[int, str], tuple[tuple[InstanceCandidate, ...], InstanceChoice]] = {}
    out: list[NewNodeClaim] = []
    changed = False
    for node, moves in zip(plan.new_nodes, movable, strict=True):
        if moves:
            moved = _prefer(node, count, memo)
            changed = changed or moved is not node
            node = moved
            count[node.choice.zone] = count.get(node.choice.zone, 0) + 1
        out.append(node)
    return replace(plan, new_nodes=tuple(out)) if changed else plan


def _tied(node: NewNodeClaim) -> list[str]:
    """The zones the node's cheapest offering has at its price and capacity type."""
    choice = node.choice
    return [
        o.zone
        for o in node.candidates[0].offerings
        if o.price == choice.price and o.capacity_type == choice.capacity_type
    ]


def _prefer(
    node: NewNodeClaim,
    count: dict[str, int],
    memo: dict[tuple[int, str], tuple[tuple[InstanceCandidate, ...], InstanceChoice]],
) -> NewNodeClaim:
    choice = node.choice
    tied = _tied(node)
    if len(tied) < 2:
        return node
    zone = min(tied, key=lambda z: (count.get(z, 0), z))
    if zone == choice.zone:
        return node
    key = (id(node.candidates), zone)
    hit = memo.get(key)
    if hit is None:

        def first(offers: tuple[Offering, ...]) -> tuple[Offering, ...]:
            # stable: by price, the preferred zone first among equal prices, the rest as they were
            return tuple(sorted(offers, key=lambda o: (o.price, o.zone != zone)))

        candidates = tuple(
            InstanceCandidate(instance_type=c.instance_type, price=c.price, offerings=first(c.offerings))
            for c in node.candidates
        )
        best = candidates[0].offerings[0]
        picked = InstanceChoice(
            instance_type=candidates[0].instance_type,
            zone=best.zone,
            capacity_type=best.capacity_type,
            price=best.price,
        )
        hit = memo[key] = (candidates, picked)
    return replace(node, candidates=hit[0], choice=hit[1])
