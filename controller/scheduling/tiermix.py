"""Tier mix: target shares of spot / on-demand / reserved capacity across a NodePool's nodes. Pure.

The solver picks each new machine's cheapest offering; this pass then decides how each machine of
a pool with a tier mix is bought, looking at the whole pool, not at one node:

* a machine that can be bought as ``reserved`` (a capacity reservation with room) is, whatever its
  share: that capacity is paid for already;
* otherwise it goes to whichever of spot and on-demand is furthest below its target share of the
  pool's non-reserved capacity (the targets of the two, renormalized), counting the pool's existing
  and in-flight nodes and the machines assigned before it in the same plan;
* when the wanted type cannot be bought for that machine (spot short or marked unavailable, a pod
  that requires the other type), it is bought as the other, and the plan says the shares *bent*.

Shares are counted in GPUs for nodes that have GPUs and in vCPUs for the others, each capacity
type separately: ``share(type) = weight(type) / weight(all)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from api.v1.labels import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
)
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.model import ExistingNode, NewNodeClaim, Plan
from controller.scheduling.requirements import Requirement
from controller.scheduling.resources import CPU, NVIDIA_GPU, Resources

TIERS: Final = (CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED)
_EPS: Final = 1e-9


class TierMixError(ValueError):
    """Target shares that cannot be used."""


@dataclass(frozen=True, slots=True)
class TierMix:
    """Target shares (fractions summing to 1) by capacity type."""

    spot: float
    on_demand: float
    reserved: float = 0.0

    def __post_init__(self) -> None:
        parts = (self.spot, self.on_demand, self.reserved)
        if any(not math.isfinite(p) or p < 0 for p in parts):
            raise TierMixError(f"tier shares must be finite and not negative, got {parts}")
        if abs(sum(parts) - 1.0) > 1e-6:
            raise TierMixError(f"tier shares must add up to 100%, got {round(sum(parts) * 100, 3)}%")

    @staticmethod
    def from_percent(*, spot: float, on_demand: float, reserved: float = 0.0) -> TierMix:
        return TierMix(spot=spot / 100, on_demand=on_demand / 100, reserved=reserved / 100)

    def target(self, tier: str) -> float:
        return {CAPACITY_TYPE_SPOT: self.spot, CAPACITY_TYPE_ON_DEMAND: self.on_demand}.get(tier, self.reserved)


@dataclass(frozen=True, slots=True)
class Bend:
    """A machine bought as ``bought`` where the shares wanted ``wanted``, and why."""

    node: str
    node_pool: str
    wanted: str
    bought: str
    why: str


def weight(resources: Resources) -> float:
    """What a node counts for in the shares: its GPUs if it has any, else its vCPUs."""
    gpus = resources.get(NVIDIA_GPU)
    return gpus / 1000 if gpus > 0 else resources.get(CPU) / 1000


def pool_weights(nodes: Iterable[ExistingNode], *, pool: str) -> dict[str, float]:
    """Capacity by tier of the pool's existing and in-flight nodes (their labelled capacity type)."""
    out = dict.fromkeys(TIERS, 0.0)
    for node in nodes:
        if node.node_pool != pool:
            continue
        tier = node.labels.get(LABEL_CAPACITY_TYPE)
        if tier in out:
            out[tier] += weight(node.capacity or node.allocatable)
    return out


def shares(weights: Mapping[str, float]) -> dict[str, float]:
    """Each tier's fraction of the total (all zero for an empty pool)."""
    total = sum(weights.values())
    return {t: (weights.get(t, 0.0) / total if total > 0 else 0.0) for t in TIERS}


def offered_tiers(node: NewNodeClaim) -> set[str]:
    return {o.capacity_type for c in node.candidates for o in c.offerings}


def restrict_capacity_type(node: NewNodeClaim, tier: str) -> NewNodeClaim:
    """The machine with only the offerings of capacity type ``tier`` (unchanged if it has none)."""
    kept = []
    for cand in node.candidates:
        offers = tuple(o for o in cand.offerings if o.capacity_type == tier)
        if offers:
            kept.append(replace(cand, offerings=offers, price=offers[0].price))
    if not kept:
        return node
    kept.sort(key=lambda c: (c.price, c.instance_type))
    zones = frozenset(o.zone for c in kept for o in c.offerings)
    requirements = node.requirements.without(LABEL_INSTANCE_TYPE, LABEL_ZONE, LABEL_CAPACITY_TYPE).with_(
        Requirement(LABEL_INSTANCE_TYPE, False, frozenset(c.instance_type for c in kept)),
        Requirement(LABEL_ZONE, False, zones),
        Requirement(LABEL_CAPACITY_TYPE, False, frozenset({tier})),
    )
    first = kept[0].offerings[0]
    choice = replace(
        node.choice, instance_type=kept[0].instance_type, zone=first.zone, capacity_type=tier, price=first.price
    )
    return replace(node, candidates=tuple(kept), requirements=requirements, choice=choice)


def _wanted_order(mix: TierMix, weights: Mapping[str, float], extra: float) -> list[str]:
    """Spot and on-demand, the one furthest below its target share (after adding ``extra``) first."""
    spot_t, od_t = mix.spot, mix.on_demand
    if spot_t + od_t <= _EPS:
        return [CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND]  # all reserved wanted: no preference left
    total = weights[CAPACITY_TYPE_SPOT] + weights[CAPACITY_TYPE_ON_DEMAND] + extra
    deficit = {
        CAPACITY_TYPE_SPOT: spot_t / (spot_t + od_t) * total - weights[CAPACITY_TYPE_SPOT],
        CAPACITY_TYPE_ON_DEMAND: od_t / (spot_t + od_t) * total - weights[CAPACITY_TYPE_ON_DEMAND],
    }
    # the bigger shortfall first; on a tie, spot (cheaper)
    return sorted(deficit, key=lambda t: (-deficit[t], t != CAPACITY_TYPE_SPOT))


def assign(
    nodes: Sequence[NewNodeClaim],
    *,
    mix: TierMix,
    weights: Mapping[str, float],
    instance_types: Mapping[str, InstanceType],
) -> tuple[list[NewNodeClaim], list[Bend]]:
    """Decide each machine's capacity type for one pool (see the module text). Machines are taken
    biggest first, so the large ones land where the shares need them most."""
    current = {t: weights.get(t, 0.0) for t in TIERS}
    out: dict[str, NewNodeClaim] = {}
    bends: list[Bend] = []

    def size(node: NewNodeClaim) -> float:
        it = instance_types.get(node.choice.instance_type)
        return weight(it.capacity) if it is not None else weight(node.requests)

    for node in sorted(nodes, key=lambda n: (-size(n), n.index)):
        offered = offered_tiers(node)
        w = size(node)
        if CAPACITY_TYPE_RESERVED in offered:
            chosen = restrict_capacity_type(node, CAPACITY_TYPE_RESERVED)
        else:
            order = _wanted_order(mix, current, w)
            wanted = order[0]
            tier = next((t for t in order if t in offered), None)
            if tier is None:  # neither spot nor on-demand: keep what the solver chose
                chosen = node
            else:
                chosen = restrict_capacity_type(node, tier)
                if tier != wanted and mix.target(wanted) > 0:
                    bends.append(
                        Bend(
                            node=node.name,
                            node_pool=node.node_pool,
                            wanted=wanted,
                            bought=tier,
                            why=f"no {wanted} offering can host it (short, marked unavailable, or excluded by "
                            f"the pods' or the pool's requirements)",
                        )
                    )
        current[chosen.choice.capacity_type] = current.get(chosen.choice.capacity_type, 0.0) + size(chosen)
        out[node.name] = chosen
    return [out[n.name] for n in nodes], bends


def apply(
    plan: Plan,
    *,
    mixes: Mapping[str, TierMix],
    existing: Sequence[ExistingNode],
    instance_types: Mapping[str, InstanceType],
) -> tuple[Plan, list[Bend]]:
    """The plan with every new machine of a pool in ``mixes`` bought as its tier mix says."""
    if not mixes or not any(n.node_pool in mixes for n in plan.new_nodes):
        return plan, []
    by_pool: dict[str, list[NewNodeClaim]] = {}
    for node in plan.new_nodes:
        if node.node_pool in mixes:
            by_pool.setdefault(node.node_pool, []).append(node)
    changed: dict[str, NewNodeClaim] = {}
    bends: list[Bend] = []
    for pool, nodes in by_pool.items():
        assigned, bent = assign(
            nodes,
            mix=mixes[pool],
            weights=pool_weights(existing, pool=pool),
            instance_types=instance_types,
        )
        changed.update((n.name, n) for n in assigned)
        bends.extend(bent)
    new_nodes = tuple(changed.get(n.name, n) for n in plan.new_nodes)
    total = round(sum(n.price for n in new_nodes), 6)
    return replace(plan, new_nodes=new_nodes, total_price=total), bends
