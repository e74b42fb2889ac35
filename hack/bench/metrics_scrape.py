"""Times one scrape of the cache-derived gauges (controller/state/metrics.py) on a synthetic cache:
N nodes of one NodePool, each with its NodeClaim, and P running pods spread over them.

    .venv/bin/python -m hack.bench.metrics_scrape --nodes 1000 --pods 10000
"""

from __future__ import annotations

import argparse
import time

from controller.state.metrics import ClusterCollector
from tests.unit.builders import nodepool
from tests.unit.metrics.world import feed, new_cluster, node, nodeclaim, pod

GPU_NODE = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cluster = new_cluster()
    feed(cluster, nodepool("gpu", limits={"cpu": "1000000"}))
    for i in range(args.nodes):
        feed(cluster, nodeclaim(f"n{i}", pool="gpu", tier="spot", capacity=GPU_NODE), node(f"n{i}", pool="gpu"))
    for j in range(args.pods):
        feed(cluster, pod(f"p{j}", cpu="100m", node_name=f"n{j % args.nodes}", phase="Running"))
    collector = ClusterCollector()
    collector.cluster = cluster
    times = []
    series = 0
    for _ in range(args.repeat):
        start = time.perf_counter()
        series = sum(len(f.samples) for f in collector.collect())
        times.append(time.perf_counter() - start)
    warm = sorted(times[1:])[len(times[1:]) // 2] if len(times) > 1 else times[0]
    print(
        f"nodes={args.nodes} pods={args.pods} series={series} "
        f"first scrape {times[0] * 1000:.0f} ms, then median {warm * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
