"""Which of a plan's closed Nodes may open now, and which must wait for others to open first. Pure.

A planned Node opens by losing its `joiner.sh/unregistered` taint. Each Node that opens makes
kube-scheduler try every pending pod again. A pod whose own planned Node is still closed fails there,
and kube-scheduler then tries it on every open Node: where the free room it sees (allocatable, less
the pods bound there and the pods nominated there) fits the pod, the pod binds, off its plan. Its
own Node may end empty, and the pod whose room it took is solved again and bought for. A plan's
Nodes cannot all open in one moment (one Node patch each, the apiserver's pace), so they open in
waves: a Node whose free room fits a pod still waiting for another Node opens after that Node.

Measured (300 GPU and CPU pods on 156 L4 machines, `hack.bench.race --workload gpu`): the machines
that kept two 2-GPU pods each and had 15 CPUs free opened beside the ones whose 15 CPU pods were
still waiting; CPU pods bound in the free room, and 1-GPU pods took a 4-GPU machine's free GPU,
leaving their own machines empty.

The waves come from a graph. A waiting pod (pending, planned on a Node that is closed, or on an open
one it is not nominated to) of NodeClaim B that fits the free room of closed NodeClaim A makes an
edge B -> A: B opens first. NodeClaims that need each other (each has room for a pod of the other)
form one strongly connected component and open together; a component opens when no edge comes into
it from outside and each of its members has its Node. The pods' shapes are the graph's middle
nodes (claim -> shape -> claim), so the edges grow with claims x shapes, not claims squared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.scheduling.resources import Resources

# the NodeClaim standing for every waiting pod whose NodeClaim is open already (not nominated to it
# yet): it never opens here, so whatever room such a pod fits waits for its nomination or its bind
OPEN = "\x00open"


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pending pod planned on ``claim`` that kube-scheduler may place elsewhere if tried now."""

    claim: str
    requests: Resources  # with pods=1, as kube-scheduler counts a Node's pod slots


def blocked(free: Mapping[str, Resources | None], waiting: Iterable[Waiting]) -> dict[str, int]:
    """For each closed NodeClaim in ``free`` (its Node's free room as kube-scheduler counts it, or
    None while it has no Node yet): how many waiting pods of other NodeClaims must find their place
    before it opens (0: it may open now; a NodeClaim without a Node yet is never 0). Waiting pods
    of a NodeClaim not in ``free`` (open already) carry :data:`OPEN` as their claim."""
    by_shape: dict[Resources, set[str]] = {}
    counts: dict[Resources, dict[str, int]] = {}
    for pod in waiting:
        by_shape.setdefault(pod.requests, set()).add(pod.claim)
        per = counts.setdefault(pod.requests, {})
        per[pod.claim] = per.get(pod.claim, 0) + 1

    # the graph: claim -> shape (the claim has waiting pods of that shape), shape -> claim (fits)
    nodes: list[tuple[str, object]] = []
    index: dict[tuple[str, object], int] = {}

    def node(kind: str, key: object) -> int:
        ident = (kind, key)
        found = index.get(ident)
        if found is None:
            found = index[ident] = len(nodes)
            nodes.append(ident)
        return found

    edges: dict[int, list[int]] = {}
    fits: dict[str, list[Resources]] = {}
    for claim in free:
        node("claim", claim)
    for shape, claims in by_shape.items():
        s = node("shape", shape)
        for claim in claims:
            edges.setdefault(node("claim", claim), []).append(s)
    for claim, room in free.items():
        if room is None:
            continue
        mine = [shape for shape in by_shape if shape.fits_in(room)]
        fits[claim] = mine
        target = node("claim", claim)
        for shape in mine:
            edges.setdefault(node("shape", shape), []).append(target)

    component = _components(len(nodes), edges)
    entered: set[int] = set()  # components with an edge from another component
    for source, targets in edges.items():
        for target in targets:
            if component[source] != component[target]:
                entered.add(component[target])

    result: dict[str, int] = {}
    for claim, room in free.items():
        mine_component = component[index["claim", claim]]
        if room is None:
            result[claim] = 1  # no Node, no room to judge (and no edge into it: alone in its component)
            continue
        if mine_component not in entered:
            result[claim] = 0
            continue
        # what it waits for: the waiting pods of others that fit its room (at least 1 while another
        # member of its component waits for pods from outside)
        others = sum(n for shape in fits[claim] for c, n in counts[shape].items() if c != claim)
        result[claim] = max(1, others)
    return result


def _components(count: int, edges: Mapping[int, list[int]]) -> list[int]:
    """Strongly connected components (Tarjan's, without recursion): a component id per node."""
    index = [-1] * count
    low = [0] * count
    on_stack = [False] * count
    component = [-1] * count
    stack: list[int] = []
    counter = 0
    found = 0
    for root in range(count):
        if index[root] != -1:
            continue
        work: list[tuple[int, int]] = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack[v] = True
            successors = edges.get(v, ())
            recursed = False
            while i < len(successors):
                w = successors[i]
                i += 1
                if index[w] == -1:
                    work.append((v, i))
                    work.append((w, 0))
                    recursed = True
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index[w])
            if recursed:
                continue
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    component[w] = found
                    if w == v:
                        break
                found += 1
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return component
