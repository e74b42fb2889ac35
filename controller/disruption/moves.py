"""The moves a disruption pass weighs, as values: a simulation of taking nodes away
(:class:`Simulation`), a replacement cut to the instance types that keep the move cheaper
(:func:`restrict_price`), the :class:`~controller.disruption.model.Command` a move becomes
(:func:`to_command`) and the choice among moves that save about as much (:func:`least_churn`).
Pure; ``planner.py`` finds the moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from controller.disruption.model import Command, NodeState
from controller.scheduling.labels import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE
from controller.scheduling.model import NewNodeClaim, Plan, Pod
from controller.scheduling.requirements import Requirement

EPS: Final = 1e-9


@dataclass(frozen=True, slots=True)
class Simulation:
    plan: Plan
    moved: tuple[str, ...]
    unplaced: tuple[str, ...]  # candidates' pods with no place
    lost: tuple[str, ...]  # pods that had a place before and have none now
    new_nodes: tuple[NewNodeClaim, ...]
    new_price: float
    pods: tuple[Pod, ...] = ()  # the candidates' pods

    @property
    def ok(self) -> bool:
        return not self.unplaced and not self.lost

    def placements(self) -> tuple[tuple[str, str], ...]:
        where: dict[str, str] = {}
        for node in self.new_nodes:
            for key in node.pods:
                where[key] = node.name
        for name, keys in self.plan.existing_placements.items():
            for key in keys:
                where[key] = name
        return tuple((key, where[key]) for key in self.moved if key in where)

    def why(self) -> str:
        for key in (*self.unplaced, *self.lost):
            return f"pod {key} would fit nowhere ({self.plan.unschedulable.get(key, 'no room')})"
        return "every pod has a place"


def restrict_price(node: NewNodeClaim, ceiling: float) -> NewNodeClaim:
    """The replacement with only the instance types and offerings at or under ``ceiling`` $/hour."""
    kept = []
    for cand in node.candidates:
        offers = tuple(o for o in cand.offerings if o.price <= ceiling + EPS)
        if offers:
            kept.append(replace(cand, offerings=offers, price=offers[0].price))
    unchanged = len(kept) == len(node.candidates) and all(
        len(k.offerings) == len(c.offerings) for k, c in zip(kept, node.candidates, strict=True)
    )
    if not kept or unchanged:
        return node
    kept.sort(key=lambda c: (c.price, c.instance_type))
    all_offers = [o for c in kept for o in c.offerings]
    requirements = node.requirements.without(LABEL_INSTANCE_TYPE, LABEL_ZONE, LABEL_CAPACITY_TYPE).with_(
        Requirement(LABEL_INSTANCE_TYPE, False, frozenset(c.instance_type for c in kept)),
        Requirement(LABEL_ZONE, False, frozenset(o.zone for o in all_offers)),
        Requirement(LABEL_CAPACITY_TYPE, False, frozenset(o.capacity_type for o in all_offers)),
    )
    first = kept[0].offerings[0]
    choice = replace(
        node.choice,
        instance_type=kept[0].instance_type,
        zone=first.zone,
        capacity_type=first.capacity_type,
        price=first.price,
    )
    return replace(node, candidates=tuple(kept), requirements=requirements, choice=choice)


def least_churn(commands: Sequence[Command], *, tolerance: float = 0.005) -> Command | None:
    """The command that saves the most; among those within ``tolerance`` of it, the one that buys
    the fewest nodes, then the one with the biggest saving per disrupted pod."""
    if not commands:
        return None
    top = max(c.saving for c in commands)
    close = [c for c in commands if c.saving >= top * (1 - tolerance) - EPS]
    return min(close, key=lambda c: (len(c.replacements), -c.saving / max(1, len(c.pods)), c.candidates))


IDLE_GPU_RECLAIM_NOTE = "opted in with joiner.sh/idle-gpu-reclaim"


def to_command(
    reason: str,
    nodes: Sequence[NodeState],
    *,
    old_price: float,
    replacements: tuple[NewNodeClaim, ...] = (),
    new_price: float = 0.0,
    pods: tuple[str, ...] = (),
    detail: str = "",
    placements: tuple[tuple[str, str], ...] = (),
) -> Command:
    reclaimed = [key for n in nodes for key in n.reclaimable]
    if reclaimed:
        shown = ", ".join(reclaimed[:3]) + (f" and {len(reclaimed) - 3} more" if len(reclaimed) > 3 else "")
        note = f"{len(reclaimed)} pod(s) on idle GPUs reclaimed ({IDLE_GPU_RECLAIM_NOTE}): {shown}"
        detail = f"{detail}; {note}" if detail else note
    return Command(
        reason=reason,
        candidates=tuple(n.claim for n in nodes),
        nodes=tuple(n.node for n in nodes),
        pools=tuple(n.pool for n in nodes),
        replacements=replacements,
        old_price=old_price,
        new_price=new_price,
        pods=pods,
        detail=detail,
        placements=placements,
    )
