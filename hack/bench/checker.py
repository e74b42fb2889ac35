"""Replay a solver Plan through kube-scheduler's filter rules and count the violations.

Written independently of the solver: it reads only the input and output value types
(``controller.scheduling.model``) and re-implements the rules from the Pod and Node semantics of
Kubernetes, so a solver bug does not hide itself here. Given the pending pods, the existing and
in-flight nodes (with the pods bound to them), the daemonset pods, the NodePools and a Plan, it
builds the nodes the plan ends with (new NodeClaims get the labels a real node would carry: its
instance type's labels, zone, capacity type, NodePool, hostname) and checks every planned pod as
kube-scheduler would if that pod were the last one to be bound:

* **fit**: allocatable minus daemonset pods minus bound and planned pods, for every resource
  (cpu, memory, ``nvidia.com/gpu``, ... and the ``pods`` count);
* **node affinity**: the nodeSelector / required node affinity terms against the node's labels;
* **taints**: every ``NoSchedule``/``NoExecute`` taint must be tolerated (a cordoned node too);
* **host ports**: no two pods on a node (daemonset, bound and planned) take one port and protocol
  on the same address, ``0.0.0.0`` being every address (the NodePorts filter);
* **pod affinity / anti-affinity** (required, any topologyKey), counted over every pod the
  selector matches in the term's namespaces, on existing, in-flight and new nodes; anti-affinity
  both ways (the pod's own terms, and terms of pods already in the domain). Self-affine pods with
  no pod to join may start one domain only, as the first of them decides it;
* **topology spread** (``DoNotSchedule``): counted over every pod in the namespace the
  labelSelector matches (whatever its size), over the eligible domains: nodes with the key that
  match the pod's node affinity (``nodeAffinityPolicy: Honor``), carry every topology key the pod
  spreads over, and, with
  ``nodeTaintsPolicy: Honor``, whose taints it tolerates; ``minDomains`` makes the global minimum
  0 while fewer domains exist. ``matchLabelKeys`` arrive folded into the selector by the converter.

Also checked: every pending pod is placed once or reported unschedulable, and every NodeClaim's
instance type, offering and price exist in its NodePool. ``python -m hack.bench.checker`` has no
CLI; benchmarks call :func:`check_plan` and print ``len(violations)`` beside their figures.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.model import ExistingNode, NodePoolTemplate, Plan, Pod, PodAffinityTerm, TopologySpread
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.taints import Taint, Toleration

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
CAPACITY_TYPE = "joiner.sh/capacity-type"
NODEPOOL = "joiner.sh/nodepool"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")
PODS = "pods"
MACHINE_KEYS = frozenset(
    {
        INSTANCE_TYPE,
        ZONE,
        CAPACITY_TYPE,
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "joiner.sh/gpu-name",
        "joiner.sh/gpu-count",
        "joiner.sh/gpu-memory",
        "joiner.sh/gpu-manufacturer",
        "joiner.sh/instance-family",
        "joiner.sh/instance-cpu",
        "joiner.sh/instance-memory",
    }
)
"""Label keys a node gets from its machine; a NodePool requirement on them filters machines."""

RULES = (
    "plan",
    "fit",
    "node-affinity",
    "taint",
    "host-ports",
    "pod-affinity",
    "pod-anti-affinity",
    "topology-spread",
)


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: which rule, which pod (or ``""``), which node, and why, in words."""

    rule: str
    pod: str
    node: str
    reason: str

    def __str__(self) -> str:
        who = f"{self.pod} on {self.node}" if self.pod else self.node
        return f"[{self.rule}] {who}: {self.reason}"


@dataclass(frozen=True, slots=True)
class _Node:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Mapping[str, int]
    bound: tuple[Pod, ...]
    daemons: tuple[Pod, ...]
    new: bool
    unschedulable: bool


# --- the matching rules, from the Kubernetes semantics --------------------------------------


def _value_allowed(req: Requirement, value: str | None) -> bool:
    """Whether a label ``value`` (None: the label is absent) satisfies one requirement."""
    if value is None:
        return req.allow_absent
    listed = value in req.values
    if listed == req.complement:  # In without the value, or NotIn with it
        return False
    if req.gt is not None or req.lt is not None:
        try:
            number = int(value)
        except ValueError:
            return False
        if req.gt is not None and number <= req.gt:
            return False
        if req.lt is not None and number >= req.lt:
            return False
    return True


def _unmet(reqs: Requirements, labels: Mapping[str, str]) -> Requirement | None:
    for req in reqs.items:
        if not _value_allowed(req, labels.get(req.key)):
            return req
    return None


def _node_affinity_ok(pod: Pod, labels: Mapping[str, str]) -> bool:
    """Required node affinity: any of the OR-ed terms (each with the nodeSelector folded in)."""
    return not pod.node_requirements or any(_unmet(term, labels) is None for term in pod.node_requirements)


def _toleration_matches(tol: Toleration, taint: Taint) -> bool:
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.operator == "Exists":
        return tol.key == "" or tol.key == taint.key
    return tol.operator == "Equal" and tol.key == taint.key and tol.value == taint.value


def _untolerated(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> Taint | None:
    for taint in taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_toleration_matches(t, taint) for t in tolerations):
            return taint
    return None


def _shared_port(pod: Pod, other: Pod) -> str | None:
    """A host port both pods take on one node (same port and protocol, and the same address or
    ``0.0.0.0`` on either side), as ``protocol/port``; None when they can share a node."""
    for mine in pod.host_ports:
        for theirs in other.host_ports:
            if mine.port != theirs.port or mine.protocol != theirs.protocol:
                continue
            if mine.ip == theirs.ip or "0.0.0.0" in (mine.ip, theirs.ip):
                return f"{mine.protocol}/{mine.port}"
    return None


def _term_selects(term: PodAffinityTerm, owner_namespace: str, pod: Pod) -> bool:
    """A pod (anti-)affinity term of a pod in ``owner_namespace`` selects ``pod``."""
    if not term.all_namespaces:
        namespaces = term.namespaces or frozenset({owner_namespace})
        if pod.namespace not in namespaces:
            return False
    return _unmet(term.selector, pod.labels) is None


def _spread_selects(spread: TopologySpread, owner_namespace: str, pod: Pod) -> bool:
    if spread.selector is None or pod.namespace != owner_namespace:
        return False
    return _unmet(spread.selector, pod.labels) is None


def _requests(pod: Pod) -> dict[str, int]:
    out = dict(pod.requests.items)
    out[PODS] = out.get(PODS, 0) + 1000
    return out


def _fmt(name: str, milli: int) -> str:
    if name == "memory":
        return f"{milli / 1000 / 2**30:.2f}Gi"
    value = milli / 1000
    return f"{value:g}"


# --- building the nodes the plan ends with ---------------------------------------------------


def _offering_problem(claim_choice: tuple[str, str, float], it: InstanceType) -> str | None:
    zone, capacity_type, price = claim_choice
    for offering in it.offerings:
        if offering.zone == zone and offering.capacity_type == capacity_type:
            if not offering.available:
                return f"offering {it.name} {zone} {capacity_type} is not available"
            if abs(offering.price - price) > 1e-9:
                return f"price {price} differs from the offering's {offering.price}"
            return None
    return f"{it.name} has no {capacity_type} offering in {zone}"


def _daemons_for(daemon_pods: Sequence[Pod], labels: Mapping[str, str], taints: Sequence[Taint]) -> tuple[Pod, ...]:
    return tuple(d for d in daemon_pods if _node_affinity_ok(d, labels) and _untolerated(d.tolerations, taints) is None)


def _new_nodes(
    plan: Plan, pools: Mapping[str, NodePoolTemplate], daemon_pods: Sequence[Pod], out: list[Violation]
) -> list[tuple[_Node, tuple[str, ...]]]:
    nodes: list[tuple[_Node, tuple[str, ...]]] = []
    for claim in plan.new_nodes:
        pool = pools.get(claim.node_pool)
        if pool is None:
            out.append(Violation("plan", "", claim.name, f"NodePool {claim.node_pool!r} does not exist"))
            continue
        types = {it.name: it for it in pool.instance_types}
        it = types.get(claim.choice.instance_type)
        if it is None:
            reason = f"instance type {claim.choice.instance_type!r} is not offered to NodePool {pool.name}"
            out.append(Violation("plan", "", claim.name, reason))
            continue
        problem = _offering_problem((claim.choice.zone, claim.choice.capacity_type, claim.choice.price), it)
        if problem:
            out.append(Violation("plan", "", claim.name, problem))
        labels: dict[str, str] = dict(it.labels)
        labels[INSTANCE_TYPE] = it.name
        labels[ZONE] = claim.choice.zone
        labels[CAPACITY_TYPE] = claim.choice.capacity_type
        for req in pool.requirements.items:  # a single allowed value of a NodePool key becomes a label
            if req.key not in MACHINE_KEYS and not req.complement and len(req.values) == 1:
                labels[req.key] = next(iter(req.values))
        labels.update(pool.labels)
        labels.update(claim.labels)
        labels[NODEPOOL] = pool.name
        labels[HOSTNAME] = claim.name
        for req in pool.requirements.items:
            if (req.key in MACHINE_KEYS or req.key in labels) and not _value_allowed(req, labels.get(req.key)):
                out.append(Violation("plan", "", claim.name, f"the node breaks its NodePool's requirement {req}"))
        taints = tuple(dict.fromkeys((*pool.taints, *claim.taints)))
        allocatable = dict(it.capacity.items)
        for name, amount in it.overhead.items:
            allocatable[name] = max(0, allocatable.get(name, 0) - amount)
        node = _Node(
            name=claim.name,
            labels=labels,
            taints=taints,
            allocatable=allocatable,
            bound=(),
            daemons=_daemons_for(daemon_pods, labels, taints),
            new=True,
            unschedulable=False,
        )
        nodes.append((node, claim.pods))
    return nodes


def _existing(node: ExistingNode) -> _Node:
    labels = dict(node.labels)
    labels.setdefault(HOSTNAME, node.name)
    return _Node(
        name=node.name,
        labels=labels,
        taints=node.taints,
        allocatable=dict(node.allocatable.items),
        bound=node.pods,
        daemons=(),
        new=False,
        unschedulable=node.unschedulable,
    )


# --- the checker -----------------------------------------------------------------------------


class _World:
    """Every pod with its node once the plan is carried out, with counts indexed lazily."""

    def __init__(self, nodes: Sequence[_Node], placed: Mapping[str, list[Pod]]) -> None:
        self.nodes = nodes
        self.entries: list[tuple[Pod, _Node, bool]] = []  # (pod, node, planned by this plan)
        for node in nodes:
            self.entries.extend((p, node, False) for p in node.bound)
            self.entries.extend((p, node, True) for p in placed.get(node.name, ()))
        self._term_counts: dict[tuple[PodAffinityTerm, str], tuple[Counter[str], int]] = {}
        self._eligible: dict[tuple[object, ...], dict[str, set[str]]] = {}
        self._spread_counts: dict[tuple[object, ...], tuple[Counter[str], int]] = {}
        self._anti: list[tuple[PodAffinityTerm, str, Counter[str]]] | None = None

    def anti_terms(self) -> list[tuple[PodAffinityTerm, str, Counter[str]]]:
        """Each distinct anti-affinity term (with its pod's namespace) and where its carriers are."""
        if self._anti is None:
            carriers: dict[tuple[PodAffinityTerm, str], Counter[str]] = defaultdict(Counter)
            for pod, node, _planned in self.entries:
                for term in pod.anti_affinity:
                    counter = carriers[(term, pod.namespace)]
                    value = node.labels.get(term.topology_key)
                    if value is not None:
                        counter[value] += 1
            self._anti = [(term, ns, counts) for (term, ns), counts in carriers.items()]
        return self._anti

    def term_counts(self, term: PodAffinityTerm, owner_ns: str) -> tuple[Counter[str], int]:
        """Pods the term selects, per value of its topology key, and in all."""
        key = (term, owner_ns)
        cached = self._term_counts.get(key)
        if cached is None:
            counts: Counter[str] = Counter()
            total = 0
            for pod, node, _planned in self.entries:
                if _term_selects(term, owner_ns, pod):
                    total += 1
                    value = node.labels.get(term.topology_key)
                    if value is not None:
                        counts[value] += 1
            cached = (counts, total)
            self._term_counts[key] = cached
        return cached

    def eligible(self, pod: Pod, spread: TopologySpread) -> dict[str, set[str]]:
        """Domain -> names of the eligible nodes, as kube-scheduler's PodTopologySpread filter
        selects them."""
        keys = frozenset(s.topology_key for s in pod.spread)  # a node must carry every key the pod spreads over
        key = (
            spread.topology_key,
            keys,
            pod.node_requirements if spread.honor_node_affinity else None,
            pod.tolerations if spread.honor_node_taints else None,
        )
        cached = self._eligible.get(key)
        if cached is None:
            found: dict[str, set[str]] = defaultdict(set)
            for node in self.nodes:
                value = node.labels.get(spread.topology_key)
                if value is None or not all(k in node.labels for k in keys):
                    continue
                if spread.honor_node_affinity and not _node_affinity_ok(pod, node.labels):
                    continue
                if spread.honor_node_taints and _untolerated(pod.tolerations, node.taints) is not None:
                    continue
                found[value].add(node.name)
            cached = dict(found)
            self._eligible[key] = cached
        return cached

    def spread_counts(
        self, pod: Pod, spread: TopologySpread, domains: Mapping[str, set[str]]
    ) -> tuple[Counter[str], int]:
        """Matching pods per eligible domain (same namespace), and the smallest count."""
        key = (
            spread.topology_key,
            spread.selector,
            pod.namespace,
            frozenset(s.topology_key for s in pod.spread),
            pod.node_requirements if spread.honor_node_affinity else None,
            pod.tolerations if spread.honor_node_taints else None,
        )
        cached = self._spread_counts.get(key)
        if cached is None:
            eligible = set().union(*domains.values())
            counts: Counter[str] = Counter(dict.fromkeys(domains, 0))
            for other, node, _planned in self.entries:
                if node.name in eligible and _spread_selects(spread, pod.namespace, other):
                    counts[node.labels[spread.topology_key]] += 1
            cached = (counts, min(counts.values(), default=0))
            self._spread_counts[key] = cached
        return cached


def check_plan(
    *,
    pods: Sequence[Pod],
    plan: Plan,
    node_pools: Sequence[NodePoolTemplate],
    existing_nodes: Sequence[ExistingNode] = (),
    daemon_pods: Sequence[Pod] = (),
) -> list[Violation]:
    """Every way ``plan`` breaks kube-scheduler's rules for ``pods``; empty when it keeps them all."""
    out: list[Violation] = []
    pending = {p.key: p for p in pods}
    pools = {p.name: p for p in node_pools}
    nodes: list[_Node] = [_existing(n) for n in existing_nodes]
    targets: dict[str, tuple[str, ...]] = {}
    for node, keys in _new_nodes(plan, pools, daemon_pods, out):
        nodes.append(node)
        targets[node.name] = keys
    by_name = {n.name: n for n in nodes}
    for name, keys in plan.existing_placements.items():
        if name not in by_name or by_name[name].new:
            out.append(Violation("plan", "", name, f"{len(keys)} pods placed on a node that does not exist"))
            continue
        targets[name] = keys
    placed: dict[str, list[Pod]] = defaultdict(list)
    seen: dict[str, str] = {}
    for name, keys in targets.items():
        for key in keys:
            pod = pending.get(key)
            if pod is None:
                out.append(Violation("plan", key, name, "the plan places a pod that is not pending"))
            elif key in seen:
                out.append(Violation("plan", key, name, f"placed twice (also on {seen[key]})"))
            else:
                seen[key] = name
                placed[name].append(pod)
    for key in pending:
        if key not in seen and key not in plan.unschedulable:
            out.append(Violation("plan", key, "", "neither placed nor reported unschedulable"))
    for node in nodes:
        _check_node(node, placed.get(node.name, []), out)
    world = _World(nodes, placed)
    for pod, node, planned in world.entries:
        if planned:
            _check_affinity(world, pod, node, out)
            _check_anti_affinity(world, pod, node, out)
            _check_spread(world, pod, node, out)
    _check_affinity_seeds(world, out)
    return out


def _check_node(node: _Node, placed: Sequence[Pod], out: list[Violation]) -> None:
    if not placed:
        return
    used: Counter[str] = Counter()
    for pod in (*node.daemons, *node.bound, *placed):
        used.update(_requests(pod))
    for name, amount in sorted(used.items()):
        have = node.allocatable.get(name, 0)
        if amount > have:
            reason = (
                f"{name} needs {_fmt(name, amount)} but {_fmt(name, have)} is allocatable "
                f"({len(node.daemons)} daemonset pods, {len(node.bound)} bound, {len(placed)} planned)"
            )
            out.append(Violation("fit", placed[-1].key, node.name, reason))
    taints = (*node.taints, UNSCHEDULABLE_TAINT) if node.unschedulable else node.taints
    for pod in placed:
        if not _node_affinity_ok(pod, node.labels):
            terms = " or ".join(str(_unmet(t, node.labels)) for t in pod.node_requirements)
            out.append(Violation("node-affinity", pod.key, node.name, f"the node's labels do not satisfy {terms}"))
        taint = _untolerated(pod.tolerations, taints)
        if taint is not None:
            out.append(Violation("taint", pod.key, node.name, f"taint {taint} is not tolerated"))
    on_node = [p for p in (*node.daemons, *node.bound, *placed) if p.host_ports]
    if len(on_node) > 1:
        planned = {p.key for p in placed}
        for i, pod in enumerate(on_node):
            if pod.key not in planned:
                continue
            for j, other in enumerate(on_node):
                clash = _shared_port(pod, other) if i != j else None
                if clash is not None:
                    reason = f"host port {clash} is taken by {other.key} too"
                    out.append(Violation("host-ports", pod.key, node.name, reason))
                    break


def _check_affinity(world: _World, pod: Pod, node: _Node, out: list[Violation]) -> None:
    for term in pod.affinity:
        counts, total = world.term_counts(term, pod.namespace)
        itself = _term_selects(term, pod.namespace, pod)
        value = node.labels.get(term.topology_key)
        if value is None:  # every topology label must exist, the first pod of a self-affine group's too
            reason = f"the node has no {term.topology_key} label"
            out.append(Violation("pod-affinity", pod.key, node.name, reason))
            continue
        here = counts.get(value, 0) - (1 if itself else 0)
        if here > 0:
            continue
        if total - (1 if itself else 0) == 0 and itself:
            continue  # the first pod of a self-affine group goes anywhere
        reason = f"no pod matching {term.selector} in {term.topology_key}={value} ({total - int(itself)} elsewhere)"
        out.append(Violation("pod-affinity", pod.key, node.name, reason))


def _check_affinity_seeds(world: _World, out: list[Violation]) -> None:
    """Self-affine pods with nothing to join: kube-scheduler binds the first anywhere and the rest
    must follow it into that one domain; a plan that starts several domains is not reachable."""
    carriers: dict[tuple[PodAffinityTerm, str], list[tuple[Pod, _Node]]] = defaultdict(list)
    for pod, node, planned in world.entries:
        if planned:
            for term in pod.affinity:
                carriers[(term, pod.namespace)].append((pod, node))
    for (term, namespace), group in carriers.items():
        carrier_keys = {p.key for p, _n in group}
        anchored = False
        for other, _node, planned in world.entries:
            if (not planned or other.key not in carrier_keys) and _term_selects(term, namespace, other):
                anchored = True
                break
        if anchored:
            continue
        domains = Counter(n.labels.get(term.topology_key) for p, n in group if _term_selects(term, namespace, p))
        if len(domains) <= 1:
            continue
        seed, _count = domains.most_common(1)[0]
        for pod, node in group:
            value = node.labels.get(term.topology_key)
            if value != seed:
                reason = (
                    f"self-affine pods matching {term.selector} start {len(domains)} {term.topology_key} "
                    f"domains ({', '.join(f'{d}: {c}' for d, c in domains.most_common())}) with no pod to join; "
                    "kube-scheduler lets only the first pod choose"
                )
                out.append(Violation("pod-affinity", pod.key, node.name, reason))


def _check_anti_affinity(world: _World, pod: Pod, node: _Node, out: list[Violation]) -> None:
    for term in pod.anti_affinity:
        value = node.labels.get(term.topology_key)
        if value is None:
            continue
        counts, _total = world.term_counts(term, pod.namespace)
        here = counts.get(value, 0) - (1 if _term_selects(term, pod.namespace, pod) else 0)
        if here > 0:
            reason = f"{here} other pods matching {term.selector} in {term.topology_key}={value}"
            out.append(Violation("pod-anti-affinity", pod.key, node.name, reason))
    for term, owner_ns, counts in world.anti_terms():
        if term in pod.anti_affinity and owner_ns == pod.namespace:
            continue  # the pod's own term, checked above
        if not _term_selects(term, owner_ns, pod):
            continue
        value = node.labels.get(term.topology_key)
        if value is not None and counts.get(value, 0) > 0:
            reason = (
                f"{counts[value]} pods in {term.topology_key}={value} have anti-affinity to pods matching "
                f"{term.selector}"
            )
            out.append(Violation("pod-anti-affinity", pod.key, node.name, reason))


def _check_spread(world: _World, pod: Pod, node: _Node, out: list[Violation]) -> None:
    for spread in pod.spread:
        value = node.labels.get(spread.topology_key)
        if value is None:  # even for a constraint that counts no pod
            out.append(Violation("topology-spread", pod.key, node.name, f"the node has no {spread.topology_key} label"))
            continue
        if spread.selector is None:
            continue
        domains = world.eligible(pod, spread)
        counts, lowest = world.spread_counts(pod, spread, domains)
        on_eligible = node.name in domains.get(value, ())
        itself = 1 if _spread_selects(spread, pod.namespace, pod) else 0
        mine = counts.get(value, 0) - (itself if on_eligible else 0)
        if value in counts:
            lowest = min(lowest, mine)  # the pod's own domain without the pod
        if spread.min_domains is not None and len(domains) < spread.min_domains:
            lowest = 0
        skew = mine + itself - lowest
        if skew > spread.max_skew:
            reason = (
                f"skew {skew} > maxSkew {spread.max_skew} on {spread.topology_key} for pods matching "
                f"{spread.selector} ({value}: {mine} others, least-loaded eligible domain: {lowest}, "
                f"{len(domains)} eligible domains)"
            )
            out.append(Violation("topology-spread", pod.key, node.name, reason))


def summarize(violations: Sequence[Violation]) -> str:
    """``0`` or ``N (rule: n, ...)`` for a benchmark's table."""
    if not violations:
        return "0"
    by_rule = Counter(v.rule for v in violations)
    return f"{len(violations)} (" + ", ".join(f"{r} {by_rule[r]}" for r in RULES if by_rule[r]) + ")"
