"""Small solver-level worlds for planner tests: a catalog, pools, nodes with pods, snapshots."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from controller.disruption.budgets import Budget
from controller.disruption.model import WHEN_EMPTY_OR_UNDERUTILIZED, Command, NodeState, PoolPolicy, Snapshot
from controller.scheduling import (
    ExistingNode,
    FrozenLabels,
    InstanceType,
    NodePoolTemplate,
    Offering,
    Pod,
    Requirement,
    Requirements,
    Resources,
    Taint,
    Toleration,
)
from controller.scheduling.resources import ONE_POD, sum_resources

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # a Monday
LONG_AGO = NOW - timedelta(hours=1)
ZONE = "zone-a"
GPU = "nvidia.com/gpu"
GPU_TAINT = Taint(key=GPU, effect="NoSchedule")
GPU_TOLERATION = Toleration(key=GPU, operator="Exists")


def _it(name: str, *, cpu: int, mem_gi: int, price: float, gpus: int = 0) -> InstanceType:
    capacity = {"cpu": cpu * 1000, "memory": mem_gi * 1024**3 * 1000, "pods": 110_000}
    labels = {"kubernetes.io/arch": "amd64"}
    if gpus:
        capacity[GPU] = gpus * 1000
        labels["joiner.sh/gpu-count"] = str(gpus)
    return InstanceType(
        name=name,
        capacity=Resources(capacity),
        labels=FrozenLabels(labels),
        offerings=(Offering(zone=ZONE, capacity_type="on-demand", price=price),),
    )


CATALOG: tuple[InstanceType, ...] = (
    _it("cpu-2", cpu=2, mem_gi=8, price=0.10),
    _it("cpu-4", cpu=4, mem_gi=16, price=0.20),
    _it("cpu-8", cpu=8, mem_gi=32, price=0.40),
    _it("cpu-16", cpu=16, mem_gi=64, price=0.80),
    _it("gpu-1", cpu=8, mem_gi=32, price=1.00, gpus=1),
    _it("gpu-4", cpu=32, mem_gi=128, price=4.40, gpus=4),
)
TYPES = {it.name: it for it in CATALOG}


def cpu_pool(name: str = "cpu") -> NodePoolTemplate:
    return NodePoolTemplate(
        name=name,
        instance_types=CATALOG,
        requirements=Requirements((Requirement.new("joiner.sh/gpu-count", "DoesNotExist"),)),
    )


def gpu_pool(name: str = "gpu") -> NodePoolTemplate:
    return NodePoolTemplate(
        name=name,
        instance_types=CATALOG,
        requirements=Requirements((Requirement.new("joiner.sh/gpu-count", "Exists"),)),
        taints=(GPU_TAINT,),
    )


def pod(
    name: str,
    *,
    cpu: float = 1,
    mem_gi: float = 1,
    gpus: int = 0,
    namespace: str = "default",
    owner: str | None = "rs-1",
) -> Pod:
    requests = {"cpu": int(cpu * 1000), "memory": int(mem_gi * 1024**3 * 1000)}
    tolerations: tuple[Toleration, ...] = ()
    if gpus:
        requests[GPU] = gpus * 1000
        tolerations = (GPU_TOLERATION,)
    return Pod(
        name=name,
        namespace=namespace,
        requests=Resources(requests),
        labels=FrozenLabels({"app": name.rsplit("-", 1)[0]}),
        tolerations=tolerations,
        owner=owner,
    )


def node(
    name: str,
    instance_type: str,
    pods: Sequence[Pod] = (),
    *,
    pool: str = "cpu",
    stable_since: datetime | None = LONG_AGO,
    **overrides: object,
) -> NodeState:
    it = TYPES[instance_type]
    labels = {
        **it.labels,
        "topology.kubernetes.io/zone": ZONE,
        "joiner.sh/capacity-type": "on-demand",
        "joiner.sh/nodepool": pool,
        "kubernetes.io/hostname": name,
    }
    taints = (GPU_TAINT,) if pool == "gpu" else ()
    view = ExistingNode(
        name=name,
        allocatable=it.allocatable,
        labels=FrozenLabels(labels),
        taints=taints,
        pods=tuple(pods),
        node_pool=pool,
    )
    state = NodeState(
        claim=f"claim-{name}",
        pool=pool,
        view=view,
        movable=tuple(pods),
        price=it.offerings[0].price,
        created=NOW - timedelta(days=1),
        stable_since=stable_since,
        instance_type=instance_type,
    )
    return replace(state, **overrides)  # type: ignore[arg-type]


def policy(
    name: str = "cpu",
    *,
    after: timedelta | None = timedelta(seconds=30),
    budgets: tuple[Budget, ...] = (Budget(nodes="100%"),),
    consolidation_policy: str = WHEN_EMPTY_OR_UNDERUTILIZED,
) -> PoolPolicy:
    return PoolPolicy(name=name, consolidation_policy=consolidation_policy, consolidate_after=after, budgets=budgets)


def snapshot(
    nodes: Iterable[NodeState],
    *,
    pools: Mapping[str, PoolPolicy] | None = None,
    templates: Sequence[NodePoolTemplate] | None = None,
    now: datetime = NOW,
    **extra: object,
) -> Snapshot:
    return Snapshot(
        now=now,
        nodes=tuple(nodes),
        pools=pools if pools is not None else {"cpu": policy("cpu"), "gpu": policy("gpu")},
        templates=tuple(templates) if templates is not None else (cpu_pool(), gpu_pool()),
        **extra,  # type: ignore[arg-type]
    )


def used(n: ExistingNode) -> Resources:
    return sum_resources(p.requests + ONE_POD for p in n.pods)


def apply(snap: Snapshot, command: Command) -> tuple[list[ExistingNode], float]:
    """The cluster after the command, as the simulation placed the pods: nodes and $/hour.

    Raises AssertionError when a moved pod has no place or a node is over-committed.
    """
    gone = set(command.candidates)
    by_key = {p.key: p for n in snap.nodes if n.claim in gone for p in n.movable}
    where = dict(command.placements)
    assert set(where) == set(by_key), f"pods without a place: {sorted(set(by_key) - set(where))}"
    nodes: dict[str, ExistingNode] = {}
    price = 0.0
    for n in snap.nodes:
        if n.claim not in gone:
            nodes[n.node] = n.view
            price += n.price
    for r in command.replacements:
        it = TYPES[r.choice.instance_type]
        nodes[r.name] = ExistingNode(name=r.name, allocatable=it.allocatable, labels=it.labels)
        price += r.price
    for key, target in where.items():
        assert target in nodes, f"pod {key} placed on unknown node {target}"
        nodes[target] = replace(nodes[target], pods=(*nodes[target].pods, by_key[key]))
    for view in nodes.values():
        assert used(view).fits_in(view.allocatable), f"node {view.name} is over-committed"
    return list(nodes.values()), price


def price_of(snap: Snapshot) -> float:
    return sum(n.price for n in snap.nodes)
