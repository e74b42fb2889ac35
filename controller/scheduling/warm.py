"""Warm-buffer placeholders ("virtual pods") and where they sit on the capacity that exists. Pure.

A NodePool's warm buffer is a set of virtual pods (built by `controller.capacity.buffer`): pods
that no one runs but that the provisioner plans like real ones, after the real pending pods, so
real pods take warm room first and the buffer refills behind them. `place_buffer` answers which
nodes (registered or in flight) hold each virtual pod now, with the room the real pods leave; the
ones that fit nowhere are the buffer's shortfall. The capacity controller reports from it (wanted
/ ready), and disruption keeps the nodes that hold the buffer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from controller.scheduling.model import ExistingNode, Pod
from controller.scheduling.resources import ONE_POD, Resources

VIRTUAL_NAMESPACE = "joiner.sh:buffer"
"""Namespace of the virtual pods: a colon can be in no real namespace, so their keys never collide."""


def is_virtual(pod_key: str) -> bool:
    """Whether a pod key (``namespace/name``) names a warm-buffer placeholder."""
    return pod_key.startswith(VIRTUAL_NAMESPACE + "/")


def virtual_pool(pod: Pod) -> str:
    """The NodePool a virtual pod belongs to (its owner)."""
    return pod.owner or ""


@dataclass(frozen=True, slots=True)
class BufferPlacement:
    """Where the virtual pods sit now. ``held``: node name -> virtual pods it holds; ``missing``:
    virtual pods with no room anywhere (the buffer's shortfall); ``ready``: the virtual pods on nodes
    that are registered and initialized (not in flight)."""

    held: Mapping[str, tuple[Pod, ...]] = field(default_factory=dict)
    missing: tuple[Pod, ...] = ()
    ready: tuple[Pod, ...] = ()

    def holders(self) -> frozenset[str]:
        return frozenset(self.held)


def _fits_labels(pod: Pod, labels: Mapping[str, str]) -> bool:
    return not pod.node_requirements or any(term.matches(labels) for term in pod.node_requirements)


def place_buffer(pods: Sequence[Pod], nodes: Iterable[ExistingNode]) -> BufferPlacement:
    """Put each virtual pod on the node with the least room that still holds it (initialized nodes
    before in-flight ones; name breaks ties), after the pods already bound there. Cordoned nodes
    hold nothing. Deterministic, so every controller that asks gets the same answer for the same
    cluster."""
    usable = sorted((n for n in nodes if not n.unschedulable), key=lambda n: (n.in_flight, n.name))
    room: dict[str, Resources] = {n.name: (n.allocatable - n.requested()) for n in usable}
    held: dict[str, list[Pod]] = {}
    missing: list[Pod] = []
    ready: list[Pod] = []
    # biggest first, so a large placeholder is not crowded out by small ones
    for pod in sorted(pods, key=lambda p: (-p.requests.get("nvidia.com/gpu"), -p.requests.get("cpu"), p.key)):
        need = pod.requests + ONE_POD
        best: ExistingNode | None = None
        for node in usable:
            if not need.fits_in(room[node.name]) or not _fits_labels(pod, node.labels):
                continue
            if best is None or (node.in_flight, _slack(room[node.name])) < (best.in_flight, _slack(room[best.name])):
                best = node
        if best is None:
            missing.append(pod)
            continue
        room[best.name] = room[best.name] - need
        held.setdefault(best.name, []).append(pod)
        if not best.in_flight:
            ready.append(pod)
    return BufferPlacement(
        held={name: tuple(ps) for name, ps in held.items()}, missing=tuple(missing), ready=tuple(ready)
    )


def _slack(room: Resources) -> tuple[int, int, int]:
    return (room.get("nvidia.com/gpu"), room.get("cpu"), room.get("memory"))


def with_virtual_pods(nodes: Sequence[ExistingNode], placement: BufferPlacement) -> list[ExistingNode]:
    """``nodes`` with the virtual pods they hold added to their pods: the room the buffer keeps
    counts as used (what disruption simulates against)."""
    out: list[ExistingNode] = []
    for node in nodes:
        extra = placement.held.get(node.name)
        out.append(node if not extra else replace(node, pods=(*node.pods, *extra)))
    return out
