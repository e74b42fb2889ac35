"""Packing quality: the solver's $/h against the exact optimum of a MILP (HiGHS via scipy).

    .venv/bin/python -m hack.bench.quality [--instances 200] [--seed 1] [--time-limit 20]
                                           [--min-pods 6] [--max-pods 28]

Each instance is small enough to solve exactly: 8-14 instance types drawn from the built-in
catalog (CPU and GPU types; each priced at its cheapest available offering), 2-6 groups of
identical pods (cpu/memory, some with GPUs and a GPU-model selector), one NodePool,
optionally a daemonset. The MILP assigns pod counts to at most P candidate nodes of at most
one type each (P = min(pods, plan price / cheapest price), a valid bound), respecting every
resource (cpu, memory, pods, nvidia.com/gpu, daemonset overhead included) and the selectors,
and minimises the total price. Topology constraints are not part of this benchmark (they are
tested for correctness instead). Instances the MILP does not prove optimal within the time
limit are skipped and counted. Every plan is also replayed through kube-scheduler's rules by
:mod:`hack.bench.checker`; the violations are reported beside the gap.

scipy is used only here, never by controller/.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from controller.cloudprovider.catalog import load_catalog
from controller.scheduling import (
    InstanceType,
    NodePoolTemplate,
    Plan,
    Pod,
    Requirement,
    Requirements,
    Resources,
    solve,
)
from controller.scheduling.resources import ONE_POD
from hack.bench.checker import check_plan

GPU_NAME = "joiner.sh/gpu-name"


@dataclass(frozen=True)
class Instance:
    types: tuple[InstanceType, ...]
    pods: tuple[Pod, ...]
    daemon: tuple[Pod, ...]
    pool: NodePoolTemplate


def make_instance(
    rng: random.Random, catalog: tuple[InstanceType, ...], *, min_pods: int = 6, max_pods: int = 28
) -> Instance:
    gpu_types = [t for t in catalog if "nvidia.com/gpu" in t.capacity and t.capacity.get("nvidia.com/gpu") <= 8000]
    cpu_types = [t for t in catalog if "nvidia.com/gpu" not in t.capacity]
    with_gpu = rng.random() < 0.6
    n_cpu = rng.randint(6, 10)
    chosen = rng.sample(cpu_types, n_cpu)
    if with_gpu:
        chosen += rng.sample([t for t in gpu_types if t.capacity.get("cpu") <= 96_000], rng.randint(2, 5))
    chosen = [t for t in chosen if t.cheapest_price() is not None]
    types = tuple(sorted(chosen, key=lambda t: t.name))
    pods: list[Pod] = []
    n_groups = rng.randint(2, 6)
    gpu_names = sorted({t.labels[GPU_NAME] for t in types if GPU_NAME in t.labels})
    budget = rng.randint(min_pods, max_pods)
    per_group = max(12, max_pods // n_groups)
    for g in range(n_groups):
        count = max(1, min(budget, rng.randint(1, per_group)))
        budget -= count
        req: dict[str, str | int] = {
            "cpu": rng.choice(["250m", "500m", "1", "1500m", "2", "3", "4", "6"]),
            "memory": rng.choice(["512Mi", "1Gi", "2Gi", "3Gi", "4Gi", "6Gi", "8Gi", "12Gi", "16Gi", "24Gi"]),
        }
        node_reqs: tuple[Requirements, ...] = ()
        if gpu_names and rng.random() < 0.45:
            req["nvidia.com/gpu"] = rng.choice([1, 1, 1, 2, 4])
            req["cpu"] = rng.choice(["2", "4", "8"])
            req["memory"] = rng.choice(["8Gi", "16Gi", "32Gi"])
            if rng.random() < 0.5:
                node_reqs = (Requirements((Requirement.in_(GPU_NAME, rng.choice(gpu_names)),)),)
        requests = Resources.parse(req)
        pods.extend(
            Pod(name=f"g{g}-{i}", requests=requests, labels={"app": f"g{g}"}, node_requirements=node_reqs)
            for i in range(count)
        )
        if budget <= 0:
            break
    daemon: tuple[Pod, ...] = ()
    if rng.random() < 0.4:
        daemon = (Pod(name="ds", requests=Resources.parse({"cpu": "100m", "memory": "200Mi"})),)
    pool = NodePoolTemplate(name="default", instance_types=types)
    return Instance(types=types, pods=tuple(pods), daemon=daemon, pool=pool)


def optimum(inst: Instance, *, time_limit: float, upper: float | None = None) -> float | None:
    """The exact minimum $/h, or None if HiGHS did not prove optimality in time."""
    solution = optimal_nodes(inst, time_limit=time_limit, upper=upper)
    return None if solution is None else solution[0]


def optimal_nodes(
    inst: Instance, *, time_limit: float, upper: float | None = None
) -> tuple[float, list[tuple[str, dict[str, int]]]] | None:
    """The exact minimum and its nodes: (instance type, {first pod name of group: count}).

    ``upper``, the cost of a known solution, bounds the number of nodes an optimum can use
    (every node costs at least the cheapest price), which keeps the model small.
    """
    resources = sorted({"cpu", "memory", "pods", *(n for p in inst.pods for n in p.requests.names())})
    groups: dict[tuple[object, ...], list[Pod]] = {}
    for pod in inst.pods:
        groups.setdefault(pod.scheduling_key(), []).append(pod)
    glist = list(groups.values())
    daemon = sum((d.requests + ONE_POD for d in inst.daemon), Resources())
    types: list[tuple[InstanceType, float, list[int]]] = []
    for candidate in inst.types:
        price = candidate.cheapest_price()
        if price is None:
            continue
        room = candidate.allocatable - daemon
        types.append((candidate, price, [room.get(r) for r in resources]))
    n_nodes = len(inst.pods)
    cheapest = min((price for _it, price, _c in types), default=0.0)
    if upper is not None and cheapest > 0:
        n_nodes = max(1, min(n_nodes, int(upper / cheapest + 1e-9)))
    T, G = len(types), len(glist)
    # variables: y[j,t] (binary), then x[g,j,t] (integer)
    ny = n_nodes * T
    nx = G * n_nodes * T

    def yi(j: int, t: int) -> int:
        return j * T + t

    def xi(g: int, j: int, t: int) -> int:
        return ny + (g * n_nodes + j) * T + t

    c = np.zeros(ny + nx)
    for j in range(n_nodes):
        for t, (_it, price, _a) in enumerate(types):
            c[yi(j, t)] = price
    lower = np.zeros(ny + nx)
    highs = np.zeros(ny + nx)
    highs[:ny] = 1
    for g, pods in enumerate(glist):
        rep = pods[0]
        for t, (it, _p, caps) in enumerate(types):
            ok = not rep.node_requirements or any(r.matches(it.labels) for r in rep.node_requirements)
            req = rep.requests + ONE_POD
            fits = all(req.get(r) <= caps[k] for k, r in enumerate(resources))
            if ok and fits:
                for j in range(n_nodes):
                    highs[xi(g, j, t)] = len(pods)
    lo_b: list[float] = []
    hi_b: list[float] = []
    n_rows = n_nodes + G + n_nodes * T * len(resources) + (n_nodes - 1)
    a = lil_matrix((n_rows, ny + nx))
    row = 0
    for j in range(n_nodes):  # at most one type per node
        for t in range(T):
            a[row, yi(j, t)] = 1
        lo_b.append(0)
        hi_b.append(1)
        row += 1
    for g, pods in enumerate(glist):  # every pod placed
        for j in range(n_nodes):
            for t in range(T):
                a[row, xi(g, j, t)] = 1
        lo_b.append(len(pods))
        hi_b.append(len(pods))
        row += 1
    for j in range(n_nodes):  # capacity
        for t, (_it, _p, caps) in enumerate(types):
            for k, r in enumerate(resources):
                for g, pods in enumerate(glist):
                    amount = (pods[0].requests + ONE_POD).get(r)
                    if amount:
                        a[row, xi(g, j, t)] = amount / 1e6
                a[row, yi(j, t)] = -caps[k] / 1e6
                lo_b.append(-np.inf)
                hi_b.append(0)
                row += 1
    for j in range(n_nodes - 1):  # symmetry: nodes used in order
        for t in range(T):
            a[row, yi(j, t)] = 1
            a[row, yi(j + 1, t)] = -1
        lo_b.append(0)
        hi_b.append(np.inf)
        row += 1
    res = milp(
        c,
        integrality=np.ones(ny + nx),
        bounds=Bounds(lower, highs),
        constraints=LinearConstraint(a.tocsr(), np.array(lo_b), np.array(hi_b)),
        options={"time_limit": time_limit, "mip_rel_gap": 1e-6, "disp": False},
    )
    if res.status != 0 or res.x is None:
        return None
    nodes = []
    for j in range(n_nodes):
        for t, (it, _p, _a) in enumerate(types):
            if res.x[yi(j, t)] > 0.5:
                counts = {glist[g][0].name: round(res.x[xi(g, j, t)]) for g in range(G) if res.x[xi(g, j, t)] > 0.5}
                nodes.append((it.name, counts))
    return float(res.fun), nodes


def truly_unschedulable(inst: Instance, plan: Plan) -> bool:
    """Brute force: no instance type alone can host any pod the plan calls unschedulable."""
    daemon = sum((d.requests + ONE_POD for d in inst.daemon), Resources())
    by_key = {p.key: p for p in inst.pods}
    for key in plan.unschedulable:
        pod = by_key[key]
        for it in inst.types:
            ok = not pod.node_requirements or any(r.matches(it.labels) for r in pod.node_requirements)
            if ok and it.cheapest_price() is not None and (pod.requests + ONE_POD + daemon).fits_in(it.allocatable):
                return False
    return True


def plan_price(inst: Instance) -> tuple[float, Plan]:
    plan = solve(pods=inst.pods, node_pools=[inst.pool], daemon_pods=inst.daemon)
    return plan.total_price, plan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=20.0, help="seconds per MILP")
    parser.add_argument("--verbose", action="store_true", help="print every instance")
    parser.add_argument("--min-pods", type=int, default=6, help="smallest instance (pods)")
    parser.add_argument("--max-pods", type=int, default=28, help="largest instance (pods)")
    args = parser.parse_args()
    catalog = load_catalog()
    rng = random.Random(args.seed)
    gaps: list[float] = []
    skipped = 0
    unsched = 0
    worst: tuple[float, int] = (0.0, -1)
    violations = 0
    started = time.perf_counter()
    for i in range(args.instances):
        inst = make_instance(rng, catalog, min_pods=args.min_pods, max_pods=args.max_pods)
        price, plan = plan_price(inst)
        found = check_plan(pods=inst.pods, plan=plan, node_pools=[inst.pool], daemon_pods=inst.daemon)
        violations += len(found)
        if found and args.verbose:
            print(f"#{i}: " + "; ".join(str(v) for v in found[:3]))
        if plan.unschedulable:
            if not truly_unschedulable(inst, plan):
                print(f"#{i}: the plan leaves pods unschedulable that some instance type could host")
                return 1
            unsched += 1
            continue
        opt = optimum(inst, time_limit=args.time_limit, upper=price)
        if opt is None or opt <= 0:
            skipped += 1
            continue
        gap = 100.0 * (price - opt) / opt
        gaps.append(gap)
        if gap > worst[0]:
            worst = (gap, i)
        if args.verbose:
            print(
                f"#{i:3d} pods={len(inst.pods):2d} types={len(inst.types):2d} "
                f"plan={price:9.4f} opt={opt:9.4f} gap={gap:6.2f}%"
            )
    elapsed = time.perf_counter() - started
    if not gaps:
        print("no instance solved")
        return 1
    over2 = sum(1 for g in gaps if g > 2.0)
    exact = sum(1 for g in gaps if g <= 1e-6)
    print(
        f"instances: {len(gaps)} compared, {skipped} MILP not proven optimal in time, {unsched} with pods "
        "no instance type can host (verified by brute force, not compared)"
    )
    print(
        f"gap vs optimum: mean {statistics.mean(gaps):.2f} %, median {statistics.median(gaps):.2f} %, "
        f"max {max(gaps):.2f} % (instance #{worst[1]}), optimal in {exact}, over 2 % in {over2}"
    )
    print(f"constraint violations (hack.bench.checker) over all {args.instances} plans: {violations}")
    print(f"elapsed {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
