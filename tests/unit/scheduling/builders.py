"""Builders for solver inputs and an independent checker of plans (used by tests only)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controller.scheduling import (
    ExistingNode,
    HostPort,
    InstanceType,
    NodePoolTemplate,
    Offering,
    OfferingKey,
    Plan,
    Pod,
    PodAffinityTerm,
    Requirement,
    Requirements,
    Resources,
    Taint,
    Toleration,
    TopologySpread,
    first_untolerated,
    label_selector,
)
from controller.scheduling.resources import ONE_POD, sum_resources

ZONES = ("zone-a", "zone-b", "zone-c")
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
CAPACITY_TYPE = "joiner.sh/capacity-type"
NODEPOOL = "joiner.sh/nodepool"
GPU = "nvidia.com/gpu"
GPU_TAINT = Taint(key=GPU, effect="NoSchedule")
TOLERATE_GPU = Toleration(key=GPU, operator="Exists")


def res(**values: str | int) -> Resources:
    """``res(cpu="500m", memory="1Gi", gpu=1)``; ``gpu`` means nvidia.com/gpu."""
    out: dict[str, str | int] = {}
    for name, value in values.items():
        out[GPU if name == "gpu" else name.replace("_", "-")] = value
    return Resources.parse(out)


def itype(
    name: str,
    *,
    cpu: int,
    mem_gi: int,
    price: float,
    gpu: int = 0,
    gpu_name: str | None = None,
    pods: int = 110,
    zones: Sequence[str] = ZONES,
    spot: float | None = None,
    overhead: Resources | None = None,
    labels: Mapping[str, str] | None = None,
    unavailable: Iterable[tuple[str, str]] = (),
) -> InstanceType:
    capacity: dict[str, str | int] = {"cpu": cpu, "memory": f"{mem_gi}Gi", "pods": pods}
    all_labels = {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", **(labels or {})}
    if gpu:
        capacity[GPU] = gpu
        all_labels |= {"joiner.sh/gpu-count": str(gpu), "joiner.sh/gpu-name": gpu_name or "L4"}
    gone = set(unavailable)
    offerings = [Offering(z, "on-demand", price, (z, "on-demand") not in gone) for z in zones]
    if spot is not None:
        offerings += [Offering(z, "spot", spot, (z, "spot") not in gone) for z in zones]
    return InstanceType(
        name=name,
        capacity=Resources.parse(capacity),
        overhead=overhead or Resources(),
        labels=all_labels,
        offerings=tuple(offerings),
    )


def pod(
    name: str,
    *,
    requests: Resources | None = None,
    labels: Mapping[str, str] | None = None,
    namespace: str = "default",
    selector: Mapping[str, str] | None = None,
    terms: Sequence[Requirements] = (),
    tolerations: Sequence[Toleration] = (),
    spread: Sequence[TopologySpread] = (),
    affinity: Sequence[PodAffinityTerm] = (),
    anti_affinity: Sequence[PodAffinityTerm] = (),
    gang: str | None = None,
    owner: str | None = None,
    preferred: Sequence[tuple[int, Requirements]] = (),
    host_ports: Sequence[HostPort] = (),
) -> Pod:
    from controller.scheduling import PreferredTerm

    node_reqs: list[Requirements] = []
    base = Requirements.from_labels(selector or {})
    if terms:
        node_reqs = [base.intersect(t) for t in terms]
    elif selector:
        node_reqs = [base]
    return Pod(
        name=name,
        namespace=namespace,
        requests=requests if requests is not None else res(cpu="500m", memory="512Mi"),
        labels=labels or {},
        node_requirements=tuple(node_reqs),
        preferred=tuple(PreferredTerm(weight=w, requirements=r) for w, r in preferred),
        tolerations=tuple(tolerations),
        spread=tuple(spread),
        affinity=tuple(affinity),
        anti_affinity=tuple(anti_affinity),
        gang=gang,
        owner=owner,
        host_ports=tuple(host_ports),
    )


def pods(prefix: str, count: int, **kwargs: Any) -> list[Pod]:
    return [pod(f"{prefix}-{i}", **kwargs) for i in range(count)]


def pool(
    name: str,
    types: Sequence[InstanceType],
    *,
    weight: int = 0,
    requirements: Sequence[Requirement] = (),
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    startup_taints: Sequence[Taint] = (),
    limits: Resources | None = None,
    usage: Resources | None = None,
) -> NodePoolTemplate:
    return NodePoolTemplate(
        name=name,
        instance_types=tuple(types),
        weight=weight,
        requirements=Requirements(requirements),
        labels=labels or {},
        taints=tuple(taints),
        startup_taints=tuple(startup_taints),
        limits=limits or Resources(),
        usage=usage or Resources(),
    )


def node(
    name: str,
    *,
    allocatable: Resources,
    zone: str = "zone-a",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    bound: Sequence[Pod] = (),
    in_flight: bool = False,
    unschedulable: bool = False,
    node_pool: str | None = None,
) -> ExistingNode:
    all_labels = {ZONE: zone, HOSTNAME: name, "kubernetes.io/arch": "amd64", **(labels or {})}
    if node_pool:
        all_labels[NODEPOOL] = node_pool
    return ExistingNode(
        name=name,
        allocatable=allocatable,
        labels=all_labels,
        taints=tuple(taints),
        pods=tuple(bound),
        in_flight=in_flight,
        unschedulable=unschedulable,
    )


def spread(key: str, app: str, max_skew: int = 1) -> TopologySpread:
    return TopologySpread(topology_key=key, max_skew=max_skew, selector=label_selector({"app": app}))


def anti(key: str, app: str) -> PodAffinityTerm:
    return PodAffinityTerm(topology_key=key, selector=label_selector({"app": app}), namespaces=frozenset({"default"}))


# --- an independent checker ---------------------------------------------------------------------


def _node_labels(p: NodePoolTemplate, it: InstanceType, zone: str, capacity_type: str) -> dict[str, str]:
    return {**p.labels, **it.labels, ZONE: zone, CAPACITY_TYPE: capacity_type, NODEPOOL: p.name}


def _pod_fits_labels(pd: Pod, labels: Mapping[str, str]) -> bool:
    if not pd.node_requirements:
        return True
    return any(t.without(HOSTNAME).matches(labels) for t in pd.node_requirements)


def daemon_overhead(daemons: Sequence[Pod], p: NodePoolTemplate, labels: Mapping[str, str]) -> Resources:
    return sum_resources(
        d.requests + ONE_POD
        for d in daemons
        if first_untolerated(d.tolerations, p.taints) is None and _pod_fits_labels(d, labels)
    )


def check_plan(
    plan: Plan,
    *,
    pending: Sequence[Pod],
    pools: Sequence[NodePoolTemplate],
    existing: Sequence[ExistingNode] = (),
    daemons: Sequence[Pod] = (),
    unavailable: Iterable[OfferingKey] = (),
) -> dict[str, tuple[str, str | None]]:
    """Assert the plan is valid; return pod key -> (node name, zone) for placed pods."""
    by_key = {p.key: p for p in pending}
    gone = set(unavailable)
    placed: dict[str, tuple[str, str | None]] = {}
    node_pods: dict[str, list[Pod]] = {}
    node_zone: dict[str, str | None] = {}
    pools_by_name = {p.name: p for p in pools}
    # every pending pod exactly once
    for n in plan.new_nodes:
        for key in n.pods:
            assert key not in placed, f"{key} placed twice"
            placed[key] = (n.name, n.choice.zone)
    for name, keys in plan.existing_placements.items():
        for key in keys:
            assert key not in placed, f"{key} placed twice"
            zone = next(e.labels.get(ZONE) for e in existing if e.name == name)
            placed[key] = (name, zone)
    for key in plan.unschedulable:
        assert key not in placed, f"{key} both placed and unschedulable"
    assert set(placed) | set(plan.unschedulable) == set(by_key), "pods missing from the plan"
    # new nodes: offering, requirements, taints, resources (for every candidate)
    total = 0.0
    for n in plan.new_nodes:
        p = pools_by_name[n.node_pool]
        its = {it.name: it for it in p.instance_types}
        assert n.candidates[0].instance_type == n.choice.instance_type
        prices = [c.price for c in n.candidates]
        assert prices == sorted(prices), "candidates not cheapest first"
        hosted = [by_key[k] for k in n.pods]
        for cand in n.candidates:
            it = its[cand.instance_type]
            for off in cand.offerings:
                assert off.available
                assert (it.name, off.zone, off.capacity_type) not in gone
                labels = _node_labels(p, it, off.zone, off.capacity_type)
                assert p.requirements.without(NODEPOOL).matches(labels), f"{n.name}: pool requirements"
                for pd in hosted:
                    assert _pod_fits_labels(pd, labels), f"{pd.key} requirements vs {it.name}/{off.zone}"
                    assert first_untolerated(pd.tolerations, p.taints) is None, f"{pd.key} taints"
            labels = _node_labels(p, it, cand.offerings[0].zone, cand.offerings[0].capacity_type)
            need = sum_resources(pd.requests + ONE_POD for pd in hosted) + daemon_overhead(daemons, p, labels)
            assert need.fits_in(it.allocatable), f"{n.name} overcommitted on {it.name}: {need} > {it.allocatable}"
        choice = n.choice
        assert choice.price == n.candidates[0].offerings[0].price
        total += choice.price
        node_pods[n.name] = hosted
        node_zone[n.name] = choice.zone
    assert abs(total - plan.total_price) < 1e-6
    # host ports: the daemon pods a new node runs take theirs too
    for n in plan.new_nodes:
        p = pools_by_name[n.node_pool]
        it = next(t for t in p.instance_types if t.name == n.choice.instance_type)
        labels = _node_labels(p, it, n.choice.zone, n.choice.capacity_type)
        running = [
            d for d in daemons if first_untolerated(d.tolerations, p.taints) is None and _pod_fits_labels(d, labels)
        ]
        _assert_ports_free(n.name, running + node_pods[n.name], by_key)
    # existing nodes: free capacity, labels, taints, cordon
    for e in existing:
        hosted = [by_key[k] for k in plan.existing_placements.get(e.name, ())]
        node_pods[e.name] = list(e.pods) + hosted
        node_zone[e.name] = e.labels.get(ZONE)
        if not hosted:
            continue
        assert not e.unschedulable, f"pod placed on cordoned {e.name}"
        used = sum_resources(pd.requests + ONE_POD for pd in node_pods[e.name])
        assert used.fits_in(e.allocatable), f"{e.name} overcommitted"
        for pd in hosted:
            labels = {**e.labels, "metadata.name": e.name}
            assert not pd.node_requirements or any(t.matches(labels) for t in pd.node_requirements)
            assert first_untolerated(pd.tolerations, e.taints) is None
        _assert_ports_free(e.name, node_pods[e.name], by_key)
    # pod anti-affinity (both directions) and hostname spread
    for name, hosted in node_pods.items():
        for pd in hosted:
            for term in pd.anti_affinity:
                others = (
                    node_pods[name]
                    if term.topology_key == HOSTNAME
                    else [o for n2, ps in node_pods.items() if node_zone[n2] == node_zone[name] for o in ps]
                )
                for other in others:
                    if other is pd or other.key == pd.key:
                        continue
                    if pd.key in by_key or other.key in by_key:
                        assert not term.selects(other.namespace, other.labels), (
                            f"{pd.key} and {other.key} violate anti-affinity on {term.topology_key}"
                        )
            for sc in pd.spread:
                if sc.topology_key == HOSTNAME and pd.key in by_key:
                    count = sum(1 for o in node_pods[name] if o.namespace == pd.namespace and sc.selects(o.labels))
                    assert count <= sc.max_skew, f"{name}: {count} pods over hostname maxSkew {sc.max_skew}"
    return placed


def _assert_ports_free(node_name: str, on_node: Sequence[Pod], pending: Mapping[str, Pod]) -> None:
    """No pending pod on the node takes a host port another pod there takes (kube-scheduler's
    NodePorts filter: the same port and protocol, on the same address or on 0.0.0.0)."""
    for i, pd in enumerate(on_node):
        if pd.key not in pending:
            continue
        for j, other in enumerate(on_node):
            if i == j:
                continue
            for a in pd.host_ports:
                for b in other.host_ports:
                    same_address = a.ip == b.ip or "0.0.0.0" in (a.ip, b.ip)
                    assert not (a.port == b.port and a.protocol == b.protocol and same_address), (
                        f"{node_name}: {pd.key} and {other.key} both take host port {a.protocol}/{a.port}"
                    )


# --- an independent count of matching pods per topology domain ----------------------------------


def _pods_by_domain(
    plan: Plan, *, pending: Sequence[Pod], existing: Sequence[ExistingNode], key: str
) -> dict[str, list[Pod]]:
    """Every pod the plan leaves running (bound pods of existing nodes and placed pending pods),
    by the value of ``key`` on its node; a new node's hostname is its name, its zone its choice."""
    by_key = {p.key: p for p in pending}
    out: dict[str, list[Pod]] = {}
    for e in existing:
        value = e.labels.get(key, e.name if key == HOSTNAME else None)
        hosted = list(e.pods) + [by_key[k] for k in plan.existing_placements.get(e.name, ())]
        if value is not None:
            out.setdefault(value, []).extend(hosted)
    for n in plan.new_nodes:
        value = n.name if key == HOSTNAME else n.choice.zone if key == ZONE else n.labels.get(key)
        if value is not None:
            out.setdefault(value, []).extend(by_key[k] for k in n.pods)
    return out


def matching_per_domain(
    plan: Plan,
    *,
    pending: Sequence[Pod],
    existing: Sequence[ExistingNode] = (),
    key: str,
    namespace: str,
    selector: Requirements | None,
    domains: Iterable[str] = (),
) -> dict[str, int]:
    """How many pods in ``namespace`` that ``selector`` matches run in each domain of ``key``
    once the plan is carried out (``domains`` are listed even when they hold none)."""
    counts = dict.fromkeys(domains, 0)
    for value, hosted in _pods_by_domain(plan, pending=pending, existing=existing, key=key).items():
        n = sum(1 for p in hosted if p.namespace == namespace and selector is not None and selector.matches(p.labels))
        if n or value in counts:
            counts[value] = counts.get(value, 0) + n
    return counts


def spread_violations(
    plan: Plan,
    *,
    pending: Sequence[Pod],
    existing: Sequence[ExistingNode] = (),
    zones: Mapping[str, Iterable[str]],
) -> list[str]:
    """Every placed pending pod whose topology spread constraint the final plan breaks, counted as
    kube-scheduler counts it: over all pods of the namespace its selector matches, whatever their size.

    ``zones`` gives, per pod key, the zones eligible for it (its node affinity allows them and a
    node there can host it). For ``topology.kubernetes.io/zone`` the skew of the pod's zone is its
    count minus the lowest count over the eligible zones (zero when there are fewer eligible zones
    than ``minDomains``); for ``kubernetes.io/hostname`` the lowest count is zero (a new node can be
    made), so a node may hold at most ``maxSkew`` matching pods.
    """
    by_key = {p.key: p for p in pending}
    where: dict[str, dict[str, str]] = {}
    for key in (ZONE, HOSTNAME):
        for value, hosted in _pods_by_domain(plan, pending=pending, existing=existing, key=key).items():
            for p in hosted:
                if p.key in by_key:
                    where.setdefault(p.key, {})[key] = value
    out: list[str] = []
    for p in pending:
        if p.key in plan.unschedulable:
            continue
        for sc in p.spread:
            if sc.topology_key not in (ZONE, HOSTNAME):
                continue
            eligible = list(zones.get(p.key, ())) if sc.topology_key == ZONE else []
            counts = matching_per_domain(
                plan,
                pending=pending,
                existing=existing,
                key=sc.topology_key,
                namespace=p.namespace,
                selector=sc.selector,
                domains=eligible,
            )
            low = min((counts[d] for d in eligible), default=0)
            if sc.min_domains is not None and len(eligible) < sc.min_domains:
                low = 0
            mine = where[p.key][sc.topology_key]
            if counts.get(mine, 0) - low > sc.max_skew:
                out.append(
                    f"{p.key} in {mine}: {counts.get(mine, 0)} matching pods, lowest {low}, "
                    f"maxSkew {sc.max_skew} on {sc.topology_key}"
                )
    return out
