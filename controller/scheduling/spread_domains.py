"""Topology spread over a label the machine decides (capacity type, instance type, GPU name, a
NodePool's label): the pods are dealt over the values new and existing nodes may have before the
solve, each pinned to its value.

The solver keeps zone and hostname spreads itself. A ``DoNotSchedule`` spread on
``joiner.sh/capacity-type`` (spot and on-demand, for a fleet that a spot reclaim must not take
whole) or another label a node gets from its offering, instance type or NodePool was ignored, and
the cheapest value took every pod. As for zones (and as Karpenter does), every value a NodePool the
pod may use can give its nodes is a domain, with the values of the eligible existing nodes: the
pods of the spread (and the other pending pods its selector counts, in the namespace) are dealt
one by one to the domain holding the fewest, ties to the cheapest, so the counts end within one of
each other, within any ``maxSkew``. Each pod is then pinned (``<key> In [value]``); the solver does
the rest. kube-scheduler counts the values its eligible nodes have, and the plan gives a node to
each value it deals pods to.

A required pod affinity over such a label is kept the same way: its pods are pinned to the values
whose nodes run a pod it selects, or, with none in the cluster, when they select themselves, to
the cheapest value, so the group lands in one domain as kube-scheduler would have it.

A pod's first such spread is dealt; gang members are left to the gang's own plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Final

from controller.scheduling.labels import LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_ZONE
from controller.scheduling.model import ExistingNode, NodePoolTemplate, OfferingKey, Pod
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.resources import ONE_POD
from controller.scheduling.taints import first_untolerated

SOLVER_KEYS: Final = frozenset({LABEL_HOSTNAME, LABEL_ZONE})
"""Spread keys the solver keeps itself."""


def deal_spread_domains(
    pods: Sequence[Pod],
    pools: Sequence[NodePoolTemplate],
    existing: Sequence[ExistingNode],
    unavailable: Iterable[OfferingKey] = (),
) -> list[Pod]:
    """``pods`` with those a spread over a machine label counts pinned to its values, and those with a
    required pod affinity over one pinned to the values it allows (see the module)."""
    spreads = [(p, s) for p in pods if p.gang is None for s in p.spread[:1] if s.topology_key not in SOLVER_KEYS]
    spreads = [(p, s) for p, s in spreads if s.selector is not None]
    affine = [(p, t) for p in pods if p.gang is None for t in p.affinity if t.topology_key not in SOLVER_KEYS]
    if not spreads and not affine:
        return list(pods)
    avoid = frozenset(unavailable)
    pinned: dict[str, Pod] = {}
    done: set[tuple[str, str, object]] = set()
    for owner, spread in spreads:
        rule = (owner.namespace, spread.topology_key, spread.selector)
        if rule in done:
            continue
        done.add(rule)
        key = spread.topology_key
        # the pending pods the spread counts (its own kind's first), not pinned by another spread yet
        counted = [p for p in pods if p.namespace == owner.namespace and spread.selects(p.labels) and p.gang is None]
        counted.sort(key=lambda p: (p.scheduling_key() != owner.scheduling_key(), p.namespace, p.name))
        free = [p for p in counted if p.key not in pinned]
        prices = _domains(owner, key, pools, avoid)
        counts = dict.fromkeys(prices, 0)
        for node in existing:
            value = node.labels.get(key)
            if value is None or node.unschedulable or not _matches(owner, node.labels):
                continue
            counts.setdefault(value, 0)
            counts[value] += sum(1 for q in node.pods if q.namespace == owner.namespace and spread.selects(q.labels))
        for p in counted:  # pods another spread already pinned count where they were put
            if p.key in pinned:
                value = _pinned_value(pinned[p.key], key)
                if value in counts:
                    counts[value] += 1
        if len(counts) < 2:
            continue  # one value: nothing to deal
        order = sorted(counts, key=lambda v: (prices.get(v, float("inf")), v))
        for p in free:
            value = min(order, key=lambda v: (counts[v], order.index(v)))
            counts[value] += 1
            pinned[p.key] = _pin(p, key, value)
    for owner, term in affine:
        key = term.topology_key
        bound = [p for p in pods if p.gang is None and term in p.affinity and p.key not in pinned]
        if not bound:
            continue
        # kube-scheduler: a node in a domain that runs a pod the term selects; with none in the
        # cluster, a pod the term selects itself goes anywhere, and the rest follow it there
        holding = sorted(
            {
                value
                for node in existing
                if (value := node.labels.get(key)) is not None
                and not node.unschedulable
                and any(term.selects(q.namespace, q.labels) for q in node.pods)
            }
        )
        if not holding and term.selects(owner.namespace, owner.labels):
            prices = _domains(owner, key, pools, avoid)
            holding = [min(prices, key=lambda v: (prices[v], v))] if prices else []
        if holding:
            for p in bound:
                pinned[p.key] = _pin(p, key, *holding)
    return [pinned.get(p.key, p) for p in pods]


def _domains(pod: Pod, key: str, pools: Sequence[NodePoolTemplate], avoid: frozenset[OfferingKey]) -> dict[str, float]:
    """The values of ``key`` a new node the pod may use can have, each with its cheapest offering."""
    need = pod.requests + ONE_POD
    out: dict[str, float] = {}
    for pool in pools:
        if first_untolerated(pod.tolerations, pool.taints) is not None:
            continue
        for it in pool.instance_types:
            if not need.fits_in(it.allocatable):
                continue
            for o in it.offerings:
                if not o.available or (it.name, o.zone, o.capacity_type) in avoid:
                    continue
                labels = {**it.labels, **pool.labels}
                labels.update({LABEL_INSTANCE_TYPE: it.name, LABEL_ZONE: o.zone, LABEL_CAPACITY_TYPE: o.capacity_type})
                for req in pool.requirements:
                    if len(req.values) == 1 and not req.complement and req.key not in labels:
                        labels[req.key] = next(iter(req.values))
                if not pool.requirements.matches({**labels, "joiner.sh/nodepool": pool.name}):
                    continue
                value = labels.get(key)
                if value is None or not _matches(pod, labels):
                    continue
                if o.price < out.get(value, float("inf")):
                    out[value] = o.price
    return out


def _matches(pod: Pod, labels: Mapping[str, str]) -> bool:
    """The pod's node affinity allows a node with ``labels`` (kube-scheduler's default
    ``nodeAffinityPolicy: Honor``: such nodes are the spread's domains); the hostname is any."""
    return not pod.node_requirements or any(t.without(LABEL_HOSTNAME).matches(labels) for t in pod.node_requirements)


def _pin(pod: Pod, key: str, *values: str) -> Pod:
    req = Requirement.in_(key, *values)
    terms = tuple(t.with_(req) for t in pod.node_requirements) if pod.node_requirements else (Requirements((req,)),)
    return replace(pod, node_requirements=terms)


def _pinned_value(pod: Pod, key: str) -> str | None:
    for term in pod.node_requirements:
        req = term.get(key)
        if req is not None and not req.complement and len(req.values) == 1:
            return next(iter(req.values))
    return None
