"""Solver throughput on the shape of Karpenter's scheduling benchmark.

    .venv/bin/python -m hack.bench.solver [--sizes 1,100,1000,5000,10000,20000] [--repeat 3]

Pending pods (see ``hack.bench.workloads.diverse_pods``) over the ~400-type bench catalog
(3 zones x spot/on-demand, reserved on the big GPU types), a CPU and a tainted GPU NodePool.
Prints one row per size: wall time (best of ``--repeat``), pods/s, nodes, $/h, unschedulable, and
the violations :mod:`hack.bench.checker` finds when it replays the plan through kube-scheduler's
rules (outside the timing).
"""

from __future__ import annotations

import argparse
import platform
import time

from controller.scheduling import Plan, solve
from hack.bench.checker import check_plan, summarize
from hack.bench.workloads import bench_catalog, bench_pools, diverse_pods

DEFAULT_SIZES = (1, 100, 1000, 5000, 10000, 20000)


def run_once(size: int, *, seed: int = 42) -> tuple[float, float, Plan, int]:
    """(wall seconds, CPU seconds, plan, pods) for one solve (inputs built outside the timing)."""
    catalog = bench_catalog()
    pools = bench_pools(catalog)
    pods = diverse_pods(size, seed=seed)
    start, cpu = time.perf_counter(), time.process_time()
    plan = solve(pods=pods, node_pools=pools)
    return time.perf_counter() - start, time.process_time() - cpu, plan, len(pods)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; the best time is reported")
    parser.add_argument("--profile", action="store_true", help="profile the largest size with cProfile")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    catalog = bench_catalog()
    slots = sum(len(it.offerings) for it in catalog)
    print(
        f"python {platform.python_version()} on {platform.machine()}, {len(catalog)} instance types, {slots} offerings"
    )
    print(
        f"{'pods':>7} {'groups':>6} {'wall s':>8} {'cpu s':>8} {'pods/s':>9} {'nodes':>6} {'$/h':>10} "
        f"{'unsched':>7}  (wall of every run, s)  violations"
    )
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        run_once(max(sizes))
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        return 0
    for size in sizes:
        times: list[float] = []
        cpus: list[float] = []
        plan: Plan | None = None
        count = 0
        for _ in range(max(1, args.repeat)):
            elapsed, cpu, plan, count = run_once(size)
            times.append(elapsed)
            cpus.append(cpu)
        assert plan is not None
        best = min(times)
        rate = count / best if best > 0 else float("inf")
        runs = ", ".join(f"{t:.3f}" for t in times)
        pods = diverse_pods(size)
        groups = len({p.scheduling_key() for p in pods})
        violations = summarize(check_plan(pods=pods, plan=plan, node_pools=bench_pools(catalog)))
        print(
            f"{count:>7} {groups:>6} {best:>8.3f} {min(cpus):>8.3f} {rate:>9.0f} {len(plan.new_nodes):>6} "
            f"{plan.total_price:>10.2f} {len(plan.unschedulable):>7}  ({runs})  {violations}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
