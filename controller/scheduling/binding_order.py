"""A plan put in the order kube-scheduler will bind it: which NodeClaim is written first, and which
of a group of interchangeable pods goes to which of their places.

The solver decides how many pods of each kind go on each node; which pod of a kind takes which of
those places it leaves to its input order, and the NodeClaims come out in the order it opened them,
zone after zone. Neither matters to the plan, and kube-scheduler keeps any assignment of
interchangeable pods. But it binds them one at a time, in its own order (priority, then oldest
first), and a topology spread constraint is counted on each of those binds over the pods bound so
far. Planned zone by zone, the first hundred pods of a Deployment spread over four zones would all
be planned in one zone and tried first: each after the first fails (one zone ahead of the others
by more than ``maxSkew``), costs kube-scheduler a status write, and waits out a back-off of up to
10 s, while the pods planned in the other zones wait behind them in its queue.

So, without changing what is bought or how many pods of a kind go where:

* ``interleave_zones``: the NodeClaims are written zone by zone in turn (a, b, c, a, b, c, ...), so
  the zones' Nodes come up together;
* ``deal_in_order``: the pods of a kind that a topology spread counts are dealt to their places in
  the order kube-scheduler tries them, the spread's domains in turn (a zone spread's zones, each
  node for a spread over the Nodes), each domain as often as its share of the places: the k-th pod
  goes to the domain furthest behind its share. Within a domain the places are taken node after
  node, in the order the nodes open (the nodes open now, then the NodeClaims in the order they are
  written), so the first pods kube-scheduler tries are planned on the first Nodes up. The zones
  then fill at the same pace and kube-scheduler's count never runs ahead of the plan. Kinds without
  a spread constraint keep the solver's dealing: node after node, the order the Nodes open in.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from controller.scheduling.labels import LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_ZONE
from controller.scheduling.model import NewNodeClaim, Plan, Pod


def interleave_zones(nodes: Sequence[NewNodeClaim]) -> list[NewNodeClaim]:
    """The NodeClaims zone by zone in turn, each zone's in their order; zones in the order they
    first appear."""
    by_zone: dict[str, list[NewNodeClaim]] = {}
    for node in nodes:
        by_zone.setdefault(node.choice.zone, []).append(node)
    if len(by_zone) < 2:
        return list(nodes)
    out: list[NewNodeClaim] = []
    queues = list(by_zone.values())
    for i in range(max(len(q) for q in queues)):
        out.extend(q[i] for q in queues if i < len(q))
    return out


def deal_in_order(
    plan: Plan,
    pods: Mapping[str, Pod],
    rank: Callable[[str], Any],
    existing: Mapping[str, Mapping[str, str]] | None = None,
) -> Plan:
    """``plan`` with the pods of each kind that a topology spread constraint counts dealt to that
    kind's places in ``rank`` order (see the module's docstring). ``pods`` are the solve's pods by
    key (keys not in it stay where they are); ``existing`` the labels of the existing nodes the plan
    places pods on. The places, their counts and the NodeClaims are unchanged."""
    labels = existing or {}
    # every place, in the order its node can take pods: existing nodes first, then new NodeClaims
    targets: list[list[str]] = [list(keys) for keys in plan.existing_placements.values()]
    target_labels: list[Mapping[str, str]] = [labels.get(name) or {} for name in plan.existing_placements]
    for node in plan.new_nodes:
        targets.append(list(node.pods))
        target_labels.append(_labels(node))
    places: dict[Hashable, tuple[Pod, list[tuple[int, int]]]] = {}  # kind -> a pod, (target, position)
    for t, keys in enumerate(targets):
        for i, key in enumerate(keys):
            pod = pods.get(key)
            if pod is not None and pod.spread:
                places.setdefault(pod.scheduling_key(), (pod, []))[1].append((t, i))
    if not places:
        return plan
    for pod, spots in places.values():
        keys = sorted((targets[t][i] for t, i in spots), key=lambda k: (rank(k), k))
        for (t, i), key in zip(_dealing(spots, _domain_key(pod), target_labels), keys, strict=True):
            targets[t][i] = key
    placements = dict(zip(plan.existing_placements, (tuple(k) for k in targets), strict=False))
    offset = len(plan.existing_placements)
    new_nodes = tuple(
        replace(node, pods=pods_now) if (pods_now := tuple(targets[offset + n])) != node.pods else node
        for n, node in enumerate(plan.new_nodes)
    )
    return replace(plan, existing_placements=placements, new_nodes=new_nodes)


def _labels(node: NewNodeClaim) -> dict[str, str]:
    """The labels the NodeClaim's Node will have that the plan already knows: those its requirements
    pin to one value, its NodePool's, and the offering chosen (zone, capacity type, instance type)."""
    pinned = {r.key: value for r in node.requirements if (value := r.single_value()) is not None}
    choice = node.choice
    return {
        **pinned,
        **node.labels,
        LABEL_ZONE: choice.zone,
        LABEL_CAPACITY_TYPE: choice.capacity_type,
        LABEL_INSTANCE_TYPE: choice.instance_type,
    }


def _domain_key(pod: Pod) -> str:
    """The topology the kind's pods are dealt over: the node when a spread counts per node, else
    the key of its tightest spread."""
    spreads = sorted(pod.spread, key=lambda sp: sp.max_skew)
    if any(sp.topology_key == LABEL_HOSTNAME for sp in spreads):
        return LABEL_HOSTNAME
    return spreads[0].topology_key


def _dealing(
    spots: Sequence[tuple[int, int]], key: str, target_labels: Sequence[Mapping[str, str]]
) -> list[tuple[int, int]]:
    """The places in the order the kind's pods are dealt to them: the domains (values of ``key``;
    each node for the hostname, or where a node has no such label) in turn, each as often as its
    share of the places, and in a domain its places node after node, in the nodes' order."""
    domains: dict[Hashable, list[tuple[int, int]]] = {}
    for t, i in spots:
        value = None if key == LABEL_HOSTNAME else target_labels[t].get(key)
        domains.setdefault(("node", t) if value is None else value, []).append((t, i))
    order = []
    for d, (_, members) in enumerate(domains.items()):
        n = len(members)
        # the j-th of a domain's n places is due when a (j + 1/2) / n share of the kind is dealt
        order += [((2 * j + 1) / (2 * n), d, j, place) for j, place in enumerate(members)]
    order.sort()
    return [place for *_, place in order]
