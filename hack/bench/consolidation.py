"""Scale down: a cluster whose pods are cut by half at random, consolidated by the disruption planner.

    .venv/bin/python -m hack.bench.consolidation [--nodes 200] [--small 12] [--seed 7] [--milp-time-limit 120]

1. **Grow** a cluster the way real ones grow: deployments (CPU web/API/worker/cache/batch pods, and
   GPU inference and training pods, some pinned to a GPU model) scale up in waves; each wave is
   provisioned by the solver onto the free room of the nodes so far plus new nodes, from a CPU
   NodePool and a tainted GPU NodePool over the built-in catalog (143 types, 3 zones, spot,
   on-demand and reserved offerings). Waves go on until the cluster has ``--nodes`` nodes.
2. **Cut** half of the pods, chosen at random.
3. **Consolidate**: planner passes (``controller.disruption.planner.plan``) on snapshots of that
   cluster, each command applied at once as the simulation placed the pods (replacements become
   nodes), until a pass finds nothing. Budgets are the default (10 %), ``consolidateAfter`` 0.
4. **Compare** with the best possible: the cheapest set of nodes that can host the remaining pods.
   For the small cluster (``--small`` nodes) it is the exact MILP optimum (HiGHS via scipy: bins
   with one instance type each, integer pod counts per deployment and bin, every resource, GPU
   model selectors, NodePool taints). For the big one it is a lower bound: the LP that buys
   fractional machines covering each pool's total cpu, memory, pod slots and GPUs (per GPU model
   where pods ask for one). The share of the best saving reached is then a lower bound too.

Reported: nodes and $/h before the cut, after the cut, after consolidation; the best possible $/h;
the share of the best saving; passes; pods disrupted; planner time; and a modelled timeline, with
the controller's defaults: a pass every 10 s (``--disruption-poll-interval``); a command acts 15 s
after its pass (``--disruption-validation-delay``), plus 60 s of replacement start-up when it buys
a node; while a replacement starts, passes that would replace or consolidate wait (the planner
does), so only the next command's pass overlaps. The time starts once ``consolidateAfter`` has
passed after the cut; reported are the times to 90 % of the best saving and to the last command.

Every provisioning plan of the growth phase is replayed through kube-scheduler's rules by
:mod:`hack.bench.checker`; the violation count is printed with the figures.

No cluster needed; scipy is used only here, never by controller/.
"""

from __future__ import annotations

import argparse
import platform
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import lil_matrix

from controller.cloudprovider.catalog import load_catalog
from controller.disruption.model import Command, NodeState, PoolPolicy, Snapshot
from controller.disruption.planner import Options, plan
from controller.scheduling import (
    ExistingNode,
    FrozenLabels,
    InstanceChoice,
    InstanceType,
    NodePoolTemplate,
    Pod,
    Requirement,
    Requirements,
    Resources,
    Taint,
    Toleration,
    solve,
)
from controller.scheduling.resources import ONE_POD, sum_resources
from hack.bench.checker import check_plan
from hack.bench.workloads import bench_pools

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
GPU = "nvidia.com/gpu"
GPU_NAME = "joiner.sh/gpu-name"
GPU_TAINT = Taint(key=GPU, effect="NoSchedule")
GPU_TOLERATION = Toleration(key=GPU, operator="Exists")
POLL_S, VALIDATION_S, STARTUP_S = 10.0, 15.0, 60.0
RESOURCES = ("cpu", "memory", "pods", GPU)


# --- the cluster -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    app: str
    cpu: str
    memory: str
    gpus: int = 0
    gpu_name: str | None = None
    weight: float = 1.0


SHAPES = (
    Shape("web", "500m", "1Gi", weight=5),
    Shape("api", "1", "2Gi", weight=4),
    Shape("worker", "2", "4Gi", weight=3),
    Shape("cache", "1", "8Gi", weight=2),
    Shape("batch", "4", "8Gi", weight=2),
    Shape("infer-l4", "4", "16Gi", gpus=1, gpu_name="L4", weight=1.5),
    Shape("infer", "4", "16Gi", gpus=1, weight=1.5),
    Shape("embed-a10g", "2", "8Gi", gpus=1, gpu_name="A10G", weight=1),
    Shape("train-h100", "32", "256Gi", gpus=4, gpu_name="H100", weight=0.3),
    Shape("train-a100", "16", "128Gi", gpus=2, gpu_name="A100", weight=0.4),
)


def make_pod(shape: Shape, index: int) -> Pod:
    requests: dict[str, str | int] = {"cpu": shape.cpu, "memory": shape.memory}
    node_reqs: tuple[Requirements, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    if shape.gpus:
        requests[GPU] = shape.gpus
        tolerations = (GPU_TOLERATION,)
        if shape.gpu_name:
            node_reqs = (Requirements((Requirement.in_(GPU_NAME, shape.gpu_name),)),)
    return Pod(
        name=f"{shape.app}-{index}",
        requests=Resources.parse(requests),
        labels=FrozenLabels({"app": shape.app}),
        node_requirements=node_reqs,
        tolerations=tolerations,
        owner=f"ReplicaSet/{shape.app}",
    )


@dataclass
class Node:
    name: str
    pool: str
    instance_type: InstanceType
    zone: str
    capacity_type: str
    price: float
    pods: list[Pod] = field(default_factory=list)

    def view(self) -> ExistingNode:
        labels = {
            **self.instance_type.labels,
            "topology.kubernetes.io/zone": self.zone,
            "joiner.sh/capacity-type": self.capacity_type,
            "joiner.sh/nodepool": self.pool,
            "kubernetes.io/hostname": self.name,
        }
        return ExistingNode(
            name=self.name,
            allocatable=self.instance_type.allocatable,
            labels=FrozenLabels(labels),
            taints=(GPU_TAINT,) if self.pool == "gpu" else (),
            pods=tuple(self.pods),
            node_pool=self.pool,
        )


class Cluster:
    def __init__(self, catalog: tuple[InstanceType, ...]) -> None:
        self.types = {it.name: it for it in catalog}
        self.templates = bench_pools(catalog)
        self.nodes: dict[str, Node] = {}
        self.serial = 0
        self.violations = 0

    def add_node(self, pool: str, choice: InstanceChoice) -> Node:
        self.serial += 1
        it = self.types[choice.instance_type]
        node = Node(f"node-{self.serial:04d}", pool, it, choice.zone, choice.capacity_type, choice.price)
        self.nodes[node.name] = node
        return node

    def provision(self, pods: list[Pod]) -> None:
        views = [n.view() for n in self.nodes.values()]
        result = solve(pods=pods, node_pools=self.templates, existing_nodes=views)
        self.violations += len(check_plan(pods=pods, plan=result, node_pools=self.templates, existing_nodes=views))
        by_key = {p.key: p for p in pods}
        for name, keys in result.existing_placements.items():
            self.nodes[name].pods.extend(by_key[k] for k in keys)
        for new in result.new_nodes:
            node = self.add_node(new.node_pool, new.choice)
            node.pods.extend(by_key[k] for k in new.pods)
        assert not result.unschedulable, result.unschedulable

    def price(self) -> float:
        return sum(n.price for n in self.nodes.values())

    def pods(self) -> list[Pod]:
        return [p for n in self.nodes.values() for p in n.pods]

    def snapshot(self, policies: dict[str, PoolPolicy]) -> Snapshot:
        states = tuple(
            NodeState(
                claim=n.name,
                pool=n.pool,
                view=n.view(),
                movable=tuple(n.pods),
                price=n.price,
                created=NOW - timedelta(days=1),
                stable_since=NOW - timedelta(hours=1),
                instance_type=n.instance_type.name,
            )
            for n in self.nodes.values()
        )
        return Snapshot(now=NOW, nodes=states, pools=policies, templates=tuple(self.templates))

    def apply(self, command: Command) -> None:
        moving = {p.key: p for claim in command.candidates for p in self.nodes[claim].pods}
        for claim in command.candidates:
            del self.nodes[claim]
        renamed: dict[str, str] = {}
        for r in command.replacements:
            node = self.add_node(r.node_pool, r.choice)
            renamed[r.name] = node.name
        for key, target in command.placements:
            self.nodes[renamed.get(target, target)].pods.append(moving.pop(key))
        assert not moving, f"pods left without a place: {sorted(moving)}"
        for node in self.nodes.values():
            used = sum_resources(p.requests + ONE_POD for p in node.pods)
            assert used.fits_in(node.instance_type.allocatable), f"{node.name} over-committed"


def grow(catalog: tuple[InstanceType, ...], *, target: int, rng: random.Random) -> Cluster:
    cluster = Cluster(catalog)
    counts: Counter[str] = Counter()
    weights = [s.weight for s in SHAPES]
    while len(cluster.nodes) < target:
        wave = []
        for _ in range(rng.randint(2, 4)):  # a few deployments scale up together
            shape = rng.choices(SHAPES, weights)[0]
            for _ in range(rng.randint(1, 12) if not shape.gpus else rng.randint(1, 4)):
                counts[shape.app] += 1
                wave.append(make_pod(shape, counts[shape.app]))
        cluster.provision(wave)
    return cluster


def cut_half(cluster: Cluster, rng: random.Random) -> int:
    pods = [(n.name, p.key) for n in cluster.nodes.values() for p in n.pods]
    doomed = set(rng.sample(pods, len(pods) // 2))
    for node in cluster.nodes.values():
        node.pods = [p for p in node.pods if (node.name, p.key) not in doomed]
    return len(doomed)


# --- the best possible ---------------------------------------------------------------------------


def _pool_of(pod: Pod) -> str:
    return "gpu" if GPU in pod.requests else "cpu"


def _compatible(pod: Pod, it: InstanceType, pool: NodePoolTemplate) -> bool:
    if not pool.requirements.matches(it.labels):
        return False
    return not pod.node_requirements or any(r.matches(it.labels) for r in pod.node_requirements)


def _frontier(types: list[tuple[InstanceType, float]]) -> list[tuple[InstanceType, float]]:
    """Types no other type beats on price while offering at least as much of every resource."""
    out = []
    for it, price in types:
        vec = [it.allocatable.get(r) for r in RESOURCES]
        beaten = False
        for other, other_price in types:
            if other is it or other_price > price or other.labels.get(GPU_NAME) != it.labels.get(GPU_NAME):
                continue
            ovec = [other.allocatable.get(r) for r in RESOURCES]
            if all(o >= v for o, v in zip(ovec, vec, strict=True)) and (other_price < price or ovec != vec):
                beaten = True
                break
        if not beaten:
            out.append((it, price))
    return out


def _priced(catalog: tuple[InstanceType, ...], pool: NodePoolTemplate) -> list[tuple[InstanceType, float]]:
    out = []
    for it in catalog:
        price = it.cheapest_price()
        if price is not None and pool.requirements.matches(it.labels):
            out.append((it, price))
    return out


def lower_bound(pods: list[Pod], catalog: tuple[InstanceType, ...], templates: list[NodePoolTemplate]) -> float:
    """The LP: fractional machines per pool covering total cpu, memory, pod slots, GPUs (per model)."""
    total = 0.0
    for pool in templates:
        mine = [p for p in pods if _pool_of(p) == pool.name]
        if not mine:
            continue
        types = _priced(catalog, pool)
        rows: list[list[float]] = []
        need: list[float] = []
        demand = sum_resources(p.requests + ONE_POD for p in mine)
        for r in RESOURCES:
            if demand.get(r):
                rows.append([it.allocatable.get(r) / 1e6 for it, _ in types])
                need.append(demand.get(r) / 1e6)
        for model in sorted({str(p.node_requirements[0].items[0].values) for p in mine if p.node_requirements}):
            want = [p for p in mine if p.node_requirements and str(p.node_requirements[0].items[0].values) == model]
            rows.append([it.allocatable.get(GPU) / 1e6 if _compatible(want[0], it, pool) else 0.0 for it, _ in types])
            need.append(sum(p.requests.get(GPU) for p in want) / 1e6)
        res = linprog(
            c=[price for _, price in types],
            A_ub=-np.array(rows),
            b_ub=-np.array(need),
            bounds=[(0, None)] * len(types),
            method="highs",
        )
        assert res.status == 0, res.message
        total += float(res.fun)
    return total


def milp_optimum(
    pods: list[Pod], catalog: tuple[InstanceType, ...], templates: list[NodePoolTemplate], *, time_limit: float
) -> tuple[float, bool]:
    """The cheapest nodes for ``pods`` (bins of one type each, integer pods per group and bin).

    Returns ($/h, proven optimal); when HiGHS does not prove optimality within ``time_limit``, the
    $/h is its dual bound, a lower bound on the optimum. Each pool is solved on its own (their pods
    never mix)."""
    total, proven = 0.0, True
    for pool in templates:
        mine = [p for p in pods if _pool_of(p) == pool.name]
        if not mine:
            continue
        groups: dict[tuple[object, ...], list[Pod]] = {}
        for p in mine:
            groups.setdefault(p.scheduling_key(), []).append(p)
        glist = list(groups.values())
        types = _frontier(_priced(catalog, pool))
        reqs = [[(g[0].requests + ONE_POD).get(r) / 1e6 for r in RESOURCES] for g in glist]
        caps = [[it.allocatable.get(r) / 1e6 for r in RESOURCES] for it, _ in types]
        fits = [
            [
                _compatible(g[0], it, pool) and all(a <= b for a, b in zip(reqs[gi], caps[ti], strict=True))
                for ti, (it, _) in enumerate(types)
            ]
            for gi, g in enumerate(glist)
        ]
        bins = len(mine)
        G, T, B = len(glist), len(types), bins
        ny, nx = B * T, G * B  # y[b,t] binary: bin b is of type t; x[g,b] integer: pods of g in b

        c = np.zeros(ny + nx)
        for b in range(B):
            for t, (_it, price) in enumerate(types):
                c[b * T + t] = price
        upper = np.concatenate([np.ones(ny), np.array([len(glist[g]) for g in range(G) for _ in range(B)], float)])
        a = lil_matrix((B + G + B * len(RESOURCES) + B * G + (B - 1), ny + nx))
        lo: list[float] = []
        hi: list[float] = []
        row = 0
        for b in range(B):  # one type per bin
            for t in range(T):
                a[row, b * T + t] = 1
            lo.append(0)
            hi.append(1)
            row += 1
        for g in range(G):  # every pod placed
            for b in range(B):
                a[row, ny + g * B + b] = 1
            lo.append(len(glist[g]))
            hi.append(len(glist[g]))
            row += 1
        for b in range(B):  # capacity per resource
            for k in range(len(RESOURCES)):
                for g in range(G):
                    if reqs[g][k]:
                        a[row, ny + g * B + b] = reqs[g][k]
                for t in range(T):
                    a[row, b * T + t] = -caps[t][k]
                lo.append(-np.inf)
                hi.append(0)
                row += 1
        for b in range(B):  # a group only in bins of a type it may use
            for g in range(G):
                a[row, ny + g * B + b] = 1
                for t in range(T):
                    if fits[g][t]:
                        a[row, b * T + t] = -len(glist[g])
                lo.append(-np.inf)
                hi.append(0)
                row += 1
        for b in range(B - 1):  # symmetry: bins are used in order
            for t in range(T):
                a[row, b * T + t] = 1
                a[row, (b + 1) * T + t] = -1
            lo.append(0)
            hi.append(np.inf)
            row += 1
        res = milp(
            c,
            integrality=np.ones(ny + nx),
            bounds=Bounds(np.zeros(ny + nx), upper),
            constraints=LinearConstraint(a.tocsr(), np.array(lo), np.array(hi)),
            options={"time_limit": time_limit, "mip_rel_gap": 1e-6, "disp": False},
        )
        if res.x is None:
            raise RuntimeError(f"MILP for pool {pool.name} found no solution in {time_limit}s")
        proven = proven and res.status == 0
        # not proven in time: the dual bound is what is known to be reachable at best
        total += float(res.fun) if res.status == 0 else float(getattr(res, "mip_dual_bound", 0.0) or 0.0)
    return total, proven


# --- the run ---------------------------------------------------------------------------------------


@dataclass
class Result:
    nodes_before: int
    price_before: float
    pods_before: int
    pods_after_cut: int
    nodes_after: int
    price_after: float
    best: float
    best_exact: bool
    lp_bound: float
    passes: int
    commands: Counter[str]
    pods_disrupted: int
    planner_seconds: float
    largest_pass_seconds: float
    stable_seconds: float
    ninety_seconds: float
    violations: int

    @property
    def share(self) -> float:
        possible = self.price_before - self.best
        return (self.price_before - self.price_after) / possible if possible > 0 else 1.0


def run(*, nodes: int, seed: int, exact: bool, time_limit: float, catalog: tuple[InstanceType, ...]) -> Result:
    rng = random.Random(seed)
    cluster = grow(catalog, target=nodes, rng=rng)
    nodes_before, price_before, pods_before = len(cluster.nodes), cluster.price(), len(cluster.pods())
    cut_half(cluster, rng)
    remaining = cluster.pods()
    policies = {name: PoolPolicy(name=name, consolidate_after=timedelta(0)) for name in ("cpu", "gpu")}
    passes, disrupted, planner, slowest = 0, 0, 0.0, 0.0
    clock, done_at = 0.0, 0.0  # modelled seconds: when the next pass runs, when the last command acted
    timeline: list[tuple[float, float]] = []  # (when a command acted, $/h saved by it)
    kinds: Counter[str] = Counter()
    while passes < 1000:
        started = time.perf_counter()
        decision = plan(cluster.snapshot(policies), Options())
        took = time.perf_counter() - started
        planner += took
        slowest = max(slowest, took)
        if not decision.commands:
            break
        [command] = decision.commands
        passes += 1
        kinds[f"{command.reason}/{command.action}"] += 1
        disrupted += len(command.pods)
        acts = clock + VALIDATION_S + (STARTUP_S if command.replacements else 0.0)
        timeline.append((acts, command.saving))
        done_at = max(done_at, acts)
        clock = acts if command.replacements else clock + POLL_S
        cluster.apply(command)
    bound = lower_bound(remaining, catalog, cluster.templates)
    if exact:
        best, proven = milp_optimum(remaining, catalog, cluster.templates, time_limit=time_limit)
    else:
        best, proven = bound, False
    target = 0.9 * (price_before - best)
    saved, at_90 = 0.0, float("nan")
    for when, saving in sorted(timeline):
        saved += saving
        if saved >= target - 1e-9:
            at_90 = when
            break
    return Result(
        nodes_before=nodes_before,
        price_before=price_before,
        pods_before=pods_before,
        pods_after_cut=len(remaining),
        nodes_after=len(cluster.nodes),
        price_after=cluster.price(),
        best=best,
        best_exact=exact and proven,
        lp_bound=bound,
        passes=passes,
        commands=kinds,
        pods_disrupted=disrupted,
        planner_seconds=planner,
        largest_pass_seconds=slowest,
        stable_seconds=done_at,
        ninety_seconds=at_90,
        violations=cluster.violations,
    )


def report(label: str, r: Result, *, exact: bool) -> None:
    best = (
        "exact MILP optimum" if r.best_exact else ("MILP dual bound, not proven in time" if exact else "LP lower bound")
    )
    share = f"{100 * r.share:.1f} %" + ("" if r.best_exact else " (at least)")
    print(f"== {label}")
    print(
        f"  before the cut   {r.nodes_before:4d} nodes  {r.pods_before:5d} pods  ${r.price_before:9.2f}/h"
        f"  (constraint violations in the growth plans: {r.violations})"
    )
    print(f"  after the cut    {r.nodes_before:4d} nodes  {r.pods_after_cut:5d} pods  ${r.price_before:9.2f}/h")
    print(f"  consolidated     {r.nodes_after:4d} nodes  {r.pods_after_cut:5d} pods  ${r.price_after:9.2f}/h")
    print(f"  best possible                          ${r.best:9.2f}/h  ({best})")
    if exact:
        print(f"  LP lower bound                         ${r.lp_bound:9.2f}/h  (what the big run compares with)")
    saved, possible = r.price_before - r.price_after, r.price_before - r.best
    print(f"  saving           ${saved:.2f}/h of at most ${possible:.2f}/h: {share}")
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(r.commands.items()))
    print(f"  passes           {r.passes} ({kinds})")
    print(
        f"  pods disrupted   {r.pods_disrupted} ({r.pods_disrupted / max(1, r.pods_after_cut):.2f} per remaining pod)"
    )
    print(f"  planner time     {r.planner_seconds:.1f} s in all, slowest pass {r.largest_pass_seconds:.2f} s")
    ninety = "never" if r.ninety_seconds != r.ninety_seconds else f"{r.ninety_seconds / 60:.1f} min"
    print(
        f"  modelled time    90 % of the best saving after {ninety}, last command after {r.stable_seconds / 60:.1f} min"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200, help="size of the big cluster (LP lower bound)")
    parser.add_argument("--small", type=int, default=16, help="size of the small cluster (exact MILP); 0: skip")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=1, help="repeat with this many seeds from --seed")
    parser.add_argument("--milp-time-limit", type=float, default=120.0)
    args = parser.parse_args()
    catalog = load_catalog()
    print(f"python {platform.python_version()} on {platform.machine()}, built-in catalog: {len(catalog)} types")
    for seed in range(args.seed, args.seed + args.seeds):
        if args.small:
            r = run(nodes=args.small, seed=seed, exact=True, time_limit=args.milp_time_limit, catalog=catalog)
            report(f"{args.small}-node cluster, seed {seed}", r, exact=True)
        if args.nodes:
            r = run(nodes=args.nodes, seed=seed, exact=False, time_limit=args.milp_time_limit, catalog=catalog)
            report(f"{args.nodes}-node cluster, seed {seed}", r, exact=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
