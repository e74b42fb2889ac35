"""A NodePool's warm buffer as virtual pods: from ``spec.capacity`` and the time to the placeholder
pods the provisioner plans after the real ones. Pure.

* ``nodes: N``: N placeholders, each filling one node of the pool's cheapest instance type (the
  one with the lowest available offering price among the types the pool's requirements allow):
  its allocatable less every daemonset's requests, pinned to that type. A placeholder that size
  fits only on an empty node, so the buffer is N empty nodes; a real pod that lands on one leaves
  the placeholder without room and the provisioner buys a node to refill it.
* ``gpus: G`` with a ``shape``: ceil(G / shape GPUs) placeholders with the shape's requests and
  node selector (no shape: G placeholders of one GPU each).

Buffers of the same kind and shape that are in force together (the static one and open schedule
windows) do not add up: the largest wins. Buffers of different kinds or shapes are kept side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from api.v1.capacity import GPU_RESOURCE, Buffer, Capacity
from controller.capacity.schedule import active_buffers
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.labels import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE
from controller.scheduling.model import NodePoolTemplate, Pod
from controller.scheduling.quantity import parse_quantity
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.resources import CPU, MEMORY, ONE_POD, Resources, is_accelerator, sum_resources
from controller.scheduling.taints import Toleration
from controller.scheduling.warm import VIRTUAL_NAMESPACE

LABEL_BUFFER: Final = "joiner.sh/buffer"
MILLI: Final = 1000
TOLERATE_ALL: Final = Toleration(operator="Exists")


@dataclass(frozen=True, slots=True)
class BufferNeed:
    """One buffer in force: ``amount`` nodes (``kind="nodes"``) or GPUs (``kind="gpus"``) of a shape."""

    kind: Literal["nodes", "gpus"]
    amount: int
    requests: Resources  # one placeholder's requests (GPU buffers)
    selector: tuple[tuple[str, str], ...]  # node labels the placeholders need (GPU buffers)
    sources: tuple[str, ...]

    @property
    def gpus_per_pod(self) -> int:
        return max(1, self.requests.get(GPU_RESOURCE) // MILLI)

    @property
    def pods(self) -> int:
        """How many placeholders the need takes."""
        if self.kind == "nodes":
            return self.amount
        return -(-self.amount // self.gpus_per_pod)


@dataclass(frozen=True, slots=True)
class BufferPods:
    """The placeholders of a pool, the units each stands for (1 node, or its GPUs), and what went
    wrong sizing them (a need the pool cannot serve at all)."""

    pods: tuple[Pod, ...]
    units: Mapping[str, int]  # pod key -> nodes or GPUs it stands for
    wanted: int
    problems: tuple[str, ...] = ()


def _shape(buffer: Buffer) -> tuple[Resources, tuple[tuple[str, str], ...]]:
    if buffer.shape is None:
        return Resources({GPU_RESOURCE: MILLI}), ()
    requests = Resources({name: parse_quantity(amount) for name, amount in buffer.shape.requests.items()})
    return requests, tuple(sorted(buffer.shape.node_selector.items()))


def buffer_needs(capacity: Capacity | None, now: datetime) -> list[BufferNeed]:
    """The buffers in force at ``now``, the largest per kind and shape."""
    best: dict[tuple[object, ...], BufferNeed] = {}
    for active in active_buffers(capacity, now):
        buffer = active.buffer
        if buffer.nodes is not None:
            need = BufferNeed("nodes", buffer.nodes, Resources(), (), (active.source,))
        else:
            requests, selector = _shape(buffer)
            need = BufferNeed("gpus", buffer.gpus or 0, requests, selector, (active.source,))
        key = (need.kind, need.requests, need.selector)
        old = best.get(key)
        if old is None or need.amount > old.amount:
            best[key] = need
        if old is not None and need.amount == old.amount:
            best[key] = BufferNeed(need.kind, need.amount, need.requests, need.selector, (*old.sources, *need.sources))
    return [n for n in best.values() if n.amount > 0]


def _allowed(it: InstanceType, template: NodePoolTemplate) -> bool:
    labels = {**template.labels, **it.labels}
    if not template.requirements.without(LABEL_ZONE, LABEL_CAPACITY_TYPE).matches(labels):
        return False
    zone = template.requirements.get(LABEL_ZONE)
    capacity_type = template.requirements.get(LABEL_CAPACITY_TYPE)
    return any(
        (zone is None or zone.allows(o.zone)) and (capacity_type is None or capacity_type.allows(o.capacity_type))
        for o in it.available_offerings()
    )


def node_type(template: NodePoolTemplate) -> InstanceType | None:
    """The instance type a ``nodes`` buffer keeps: the pool's cheapest allowed one (name breaks ties)."""
    allowed = [it for it in template.instance_types if _allowed(it, template)]
    priced = [(it.cheapest_price(), it.name, it) for it in allowed]
    ranked = sorted((p, n, it) for p, n, it in priced if p is not None)
    return ranked[0][2] if ranked else None


def _node_filler(it: InstanceType, daemons: Sequence[Pod]) -> Resources:
    """What is left of ``it`` for one pod once every daemonset pod could run there too."""
    overhead = sum_resources(p.requests + ONE_POD for p in daemons)
    room = (it.allocatable - overhead - ONE_POD).clamp()
    return Resources({name: amount for name, amount in room.items if name in (CPU, MEMORY) or is_accelerator(name)})


def _pod(pool: str, index: int, *, requests: Resources, requirements: Requirements) -> Pod:
    return Pod(
        name=f"{pool}-{index}",
        namespace=VIRTUAL_NAMESPACE,
        requests=requests,
        labels={LABEL_BUFFER: pool},
        node_requirements=(requirements,),
        tolerations=(TOLERATE_ALL,),
        owner=pool,
    )


def virtual_pods(needs: Sequence[BufferNeed], template: NodePoolTemplate, daemons: Sequence[Pod] = ()) -> BufferPods:
    """The placeholders for ``needs`` in ``template``'s pool (see the module doc)."""
    pool = template.name
    pods: list[Pod] = []
    units: dict[str, int] = {}
    problems: list[str] = []
    wanted = 0
    in_pool = Requirement.in_(LABEL_NODEPOOL, pool)
    for need in needs:
        wanted += need.amount
        if need.kind == "nodes":
            it = node_type(template)
            if it is None:
                problems.append(f"buffer of {need.amount} nodes: the pool has no instance type with an offering")
                continue
            requirements = Requirements([in_pool, Requirement.in_(LABEL_INSTANCE_TYPE, it.name)])
            requests = _node_filler(it, daemons)
            for _ in range(need.amount):
                pod = _pod(pool, len(pods), requests=requests, requirements=requirements)
                pods.append(pod)
                units[pod.key] = 1
            continue
        requirements = Requirements([in_pool, *(Requirement.in_(k, v) for k, v in need.selector)])
        left = need.amount
        for _ in range(need.pods):
            pod = _pod(pool, len(pods), requests=need.requests, requirements=requirements)
            pods.append(pod)
            units[pod.key] = min(left, need.gpus_per_pod)
            left -= units[pod.key]
    return BufferPods(pods=tuple(pods), units=units, wanted=wanted, problems=tuple(problems))
