"""Fingerprints of the plans the benchmarks make, to check that a speed change keeps them.

    .venv/bin/python -m hack.bench.fingerprint > before.txt
    ... change the solver ...
    .venv/bin/python -m hack.bench.fingerprint | diff before.txt -

One line per plan: the workload, its size, the number of new nodes, $/h, unschedulable pods,
nodes by zone, and a SHA-256 over everything the plan says (every node's pool, pods, requests,
requirements, candidates and choice; placements on existing nodes; refusals with their
reasons). Plans: Karpenter's benchmark workload (``hack.bench.karpenter_workload``) at 1,000
and 5,000 pods, the identical-replica benchmark (``hack.bench.solver``) at 1, 100, 1,000 and
5,000 pods, and the 40 instances of ``hack.bench.quality --instances 40 --seed 1`` (one hash
over all of them, with their total $/h); and the output of the whole ``joiner plan -o json``
command on Karpenter's workload at 1,000 and 5,000 pods. Violations are counted by
``hack.bench.checker``.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from controller.cloudprovider.catalog import load_catalog
from controller.scheduling import Plan, Requirements, solve
from hack.bench.checker import check_plan
from hack.bench.karpenter_workload import karpenter_catalog, karpenter_pods, karpenter_pool, write_scenario
from hack.bench.quality import make_instance
from hack.bench.workloads import bench_catalog, bench_pools, diverse_pods


def _requirements(reqs: Requirements) -> str:
    return " ".join(
        f"{r.key}:{r.complement}:{sorted(r.values)}:{r.allow_absent}:{r.gt}:{r.lt}:{r.min_values}" for r in reqs.items
    )


def plan_text(plan: Plan) -> str:
    """Everything the plan says, in a canonical order (sets sorted, so the hash seed does not matter)."""
    lines = [f"total {plan.total_price!r}"]
    for node in plan.new_nodes:
        lines.append(
            f"node {node.name} {node.index} {node.node_pool} {node.choice!r} {node.gang} "
            f"{sorted(node.pods)} {node.requests!r} {_requirements(node.requirements)} {node.candidates!r} "
            f"{sorted(node.labels.items())} {node.taints!r} {node.startup_taints!r}"
        )
    for name, pods in sorted(plan.existing_placements.items()):
        lines.append(f"existing {name} {sorted(pods)}")
    for key, why in sorted(plan.unschedulable.items()):
        lines.append(f"refused {key} {why}")
    return "\n".join(lines)


def line(label: str, plan: Plan, violations: int) -> str:
    digest = hashlib.sha256(plan_text(plan).encode()).hexdigest()[:16]
    zones = Counter(n.choice.zone for n in plan.new_nodes)
    by_zone = ",".join(f"{z}:{c}" for z, c in sorted(zones.items()))
    return (
        f"{label}: {len(plan.new_nodes)} nodes, ${plan.total_price:.2f}/h, {len(plan.unschedulable)} refused, "
        f"{violations} violations, zones {by_zone}, sha256 {digest}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--karpenter", default="1000,5000", help="sizes of Karpenter's workload")
    parser.add_argument("--replicas", default="1,100,1000,5000", help="sizes of the identical-replica workload")
    parser.add_argument("--quality", type=int, default=40, help="quality instances (seed 1)")
    parser.add_argument(
        "--command", default="1000,5000", help="sizes of Karpenter's workload to run through `joiner plan -o json`"
    )
    args = parser.parse_args()
    catalog = karpenter_catalog()
    pool = karpenter_pool(catalog)
    for size in (int(s) for s in args.karpenter.split(",") if s):
        pods = karpenter_pods(size)
        plan = solve(pods=pods, node_pools=[pool])
        print(line(f"karpenter {size}", plan, len(check_plan(pods=pods, plan=plan, node_pools=[pool]))), flush=True)
    bench = bench_catalog()
    pools = bench_pools(bench)
    for size in (int(s) for s in args.replicas.split(",") if s):
        pods = diverse_pods(size, seed=42)
        plan = solve(pods=pods, node_pools=pools)
        print(line(f"replicas {size}", plan, len(check_plan(pods=pods, plan=plan, node_pools=pools))), flush=True)
    if args.quality:
        rng = random.Random(1)
        qcatalog = load_catalog()
        digest = hashlib.sha256()
        total = 0.0
        violations = 0
        for _ in range(args.quality):
            inst = make_instance(rng, qcatalog)
            plan = solve(pods=inst.pods, node_pools=[inst.pool], daemon_pods=inst.daemon)
            digest.update(plan_text(plan).encode())
            total += plan.total_price
            violations += len(check_plan(pods=inst.pods, plan=plan, node_pools=[inst.pool], daemon_pods=inst.daemon))
        print(
            f"quality {args.quality} (seed 1): ${total:.4f}/h in all, {violations} violations, "
            f"sha256 {digest.hexdigest()[:16]}"
        )
    joiner = Path(sys.executable).with_name("joiner")
    with tempfile.TemporaryDirectory(prefix="joiner-fingerprint-") as tmp:
        for size in (int(s) for s in args.command.split(",") if s):
            scenario, catalog_file = write_scenario(Path(tmp), size)
            out = subprocess.run(
                [str(joiner), "plan", "-f", str(scenario), "--catalog", str(catalog_file), "-o", "json"],
                capture_output=True,
                check=True,
            ).stdout
            print(f"joiner plan {size} -o json: {len(out)} bytes, sha256 {hashlib.sha256(out).hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
