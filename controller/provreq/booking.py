"""Where a ProvisioningRequest's booked room is, as a pure function of the nodes that hold it and
the request's pods: the pods that arrived go onto the room (to be nominated there), placeholders
hold the rest for the pods still to come. No I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from controller.scheduling.model import ExistingNode, Plan, Pod
from controller.scheduling.solver import solve


@dataclass(frozen=True, slots=True)
class Room:
    placed: Mapping[str, tuple[Pod, ...]]  # node -> the request's pending pods that go there (nominate them)
    held: Mapping[str, tuple[Pod, ...]]  # node -> placeholders for the pods still to come
    nodes: frozenset[str]  # every node the booking keeps
    claimed: frozenset[str]  # the pending pods placed on the room (the provisioner leaves them alone)


def hold_room(
    nodes: Sequence[ExistingNode],
    *,
    arrived: Sequence[Pod],
    left: Sequence[Pod],
    daemons: Sequence[Pod],
    whole_nodes: bool,
    others: Sequence[ExistingNode] = (),
) -> Room:
    """``arrived``: the request's pods pending now; ``left``: placeholders for those not bound yet
    (the arrived among them). ``whole_nodes``: every one of ``nodes`` is the booking's (an atomic
    request's own machines), else only those holding room. ``others``: the rest of the cluster's
    nodes (other bookings' room already held on them), used for what ``nodes`` cannot hold -- an
    atomic request whose pods (or some of them) fit on room that existed."""
    placed = _two_stage(nodes, others, arrived, daemons)
    after = [replace(n, pods=(*n.pods, *placed.get(n.name, ()))) for n in nodes]
    after_others = [replace(n, pods=(*n.pods, *placed.get(n.name, ()))) for n in others]
    rest = list(left[: max(0, len(left) - len(arrived))])
    held = _two_stage(after, after_others, rest, daemons)
    kept = frozenset(held) | frozenset(placed)
    if whole_nodes:
        kept |= frozenset(n.name for n in nodes)
    return Room(
        placed=placed,
        held=held,
        nodes=kept,
        claimed=frozenset(p.key for ps in placed.values() for p in ps),
    )


def _two_stage(
    first: Sequence[ExistingNode], then: Sequence[ExistingNode], pods: Sequence[Pod], daemons: Sequence[Pod]
) -> dict[str, tuple[Pod, ...]]:
    """Where ``pods`` go: onto ``first`` as far as they fit, the others onto ``then``."""
    if not pods:
        return {}
    out = placements(solve(pods=pods, node_pools=(), existing_nodes=first, daemon_pods=daemons), pods) if first else {}
    done = {p.key for ps in out.values() for p in ps}
    rest = [p for p in pods if p.key not in done]
    if rest and then:
        out.update(placements(solve(pods=rest, node_pools=(), existing_nodes=then, daemon_pods=daemons), rest))
    return out


def placements(plan: Plan, pods: Sequence[Pod]) -> dict[str, tuple[Pod, ...]]:
    """Where the plan put each of ``pods`` on existing (or in-flight) nodes: node name -> pods."""
    by_key = {p.key: p for p in pods}
    return {
        node: tuple(by_key[k] for k in keys if k in by_key) for node, keys in plan.existing_placements.items() if keys
    }


def unmatched(placeholders: Sequence[Pod], bound: Sequence[Pod]) -> list[Pod]:
    """The placeholders left once each bound pod of the request took one of the same requests (or,
    when none matches, any): the room still to hold for the pods to come."""
    left = list(placeholders)
    for pod in bound:
        i = next((j for j, p in enumerate(left) if p.requests == pod.requests), 0 if left else None)
        if i is not None:
            left.pop(i)
    return left
