"""What a NodePool's NodeClaims cost per hour: the price of the offering each one launched on
(instance type, zone, capacity type), else the price its plan recorded when it was created. Pure
over the views; the $/hour budget and the spend metric read it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api.v1.labels import ANNOTATION_PLANNED_PRICE
from controller.scheduling.bounds import PoolBounds, bounds_wanted
from controller.scheduling.instancetypes import InstanceType
from controller.state.views import NodeClaimView

UNKNOWN_CAPACITY_TYPE = "unknown"


@dataclass(frozen=True, slots=True)
class ClaimPrice:
    """One NodeClaim's $/hour and the capacity type it runs on (``unknown`` before launch)."""

    name: str
    pool: str
    capacity_type: str
    price: float


def claim_price(claim: NodeClaimView, instance_types: Mapping[str, InstanceType]) -> float:
    """$/hour of ``claim``: its launched offering's price, else the planned price, else 0."""
    it = instance_types.get(claim.instance_type or "")
    if it is not None:
        for offering in it.offerings:
            if offering.zone == claim.zone and offering.capacity_type == claim.capacity_type:
                return offering.price
    try:
        return float(claim.annotations.get(ANNOTATION_PLANNED_PRICE) or 0.0)
    except ValueError:
        return 0.0


def claim_prices(claims: Iterable[NodeClaimView], instance_types: Mapping[str, InstanceType]) -> list[ClaimPrice]:
    """Every NodeClaim not being deleted (each name once), priced."""
    seen: set[str] = set()
    out: list[ClaimPrice] = []
    for claim in claims:
        if claim.deleting or claim.name in seen or not claim.nodepool:
            continue
        seen.add(claim.name)
        out.append(
            ClaimPrice(
                name=claim.name,
                pool=claim.nodepool,
                capacity_type=claim.capacity_type or UNKNOWN_CAPACITY_TYPE,
                price=claim_price(claim, instance_types),
            )
        )
    return out


def pool_bounds(
    pools: Mapping[str, Mapping[str, Any]],
    claims: Iterable[NodeClaimView],
    instance_types: Mapping[str, InstanceType],
) -> dict[str, PoolBounds]:
    """Each NodePool's ``spec.capacity.budget`` and ``spec.limits.nodes`` (the pools with either),
    with the $/hour and count of its NodeClaims now (cached and just created, not being deleted)."""
    wanted = bounds_wanted(pools)
    if not wanted:
        return {}
    priced = claim_prices(claims, instance_types)
    out: dict[str, PoolBounds] = {}
    for name, (max_price, max_nodes) in wanted.items():
        mine = [c for c in priced if c.pool == name]
        out[name] = PoolBounds(
            max_price=max_price, max_nodes=max_nodes, price=sum(c.price for c in mine), nodes=len(mine)
        )
    return out
