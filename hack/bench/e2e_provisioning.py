"""End to end on KWOK: N pending pods to all Running, with the controller's peak RSS and CPU.

    .venv/bin/python -m hack.bench.e2e_provisioning --pods 1000

Runs on its own cluster (JOINER_CLUSTER_DIR, default /tmp/joiner-bench-kwok) with registration
delay 0, starts `joiner run --provider kwok`, applies Deployments of mixed CPU and GPU pods, and
polls until every pod is Running. The controller's peak RSS is its VmHWM from /proc; CPU is
user+system seconds from /proc/<pid>/stat over the run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()

    os.environ.setdefault("JOINER_CLUSTER_DIR", "/tmp/joiner-bench-kwok")
    from tests.e2e.harness import CLUSTER_DIR, Cluster, clean_cluster
    from tests.e2e.joiner import Joiner
    from tests.e2e.manifests import deployment, nodeclass, nodepool, req

    subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "up"], check=True)
    cluster = Cluster(kubeconfig=CLUSTER_DIR / "kubeconfig", bin_dir=Path((CLUSTER_DIR / "bindir").read_text().strip()))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "deploy" / "crds"))
    clean_cluster(cluster)
    ns = cluster.create_namespace(f"bench-{int(time.time())}")
    cluster.apply(
        [
            nodeclass(registrationDelay="0s"),
            nodepool("cpu", requirements=[req("joiner.sh/gpu-count", "DoesNotExist")]),
            nodepool(
                "gpu",
                requirements=[req("joiner.sh/gpu-count", "Exists")],
                taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            ),
        ]
    )
    n = args.pods
    gpu_pods = n // 10
    workloads = [
        deployment("web", ns, replicas=n // 2, cpu="500m", memory="1Gi"),
        deployment("batch", ns, replicas=n - n // 2 - gpu_pods, cpu="2", memory="4Gi"),
        deployment("infer", ns, replicas=gpu_pods, cpu="4", memory="16Gi", gpus=1),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        joiner = Joiner(cluster=cluster, log_path=Path(tmp) / "joiner.log").start()
        assert joiner.proc is not None
        pid = joiner.proc.pid
        cpu0 = _cpu_seconds(pid)
        start = time.monotonic()
        cluster.apply(workloads)
        running = 0
        while time.monotonic() - start < args.timeout:
            pods = cluster.items("pods", namespace=ns)
            running = sum(p["status"].get("phase") == "Running" for p in pods)
            print(f"  {time.monotonic() - start:6.1f}s  {running}/{n} Running", flush=True)
            if running == n:
                break
            time.sleep(2)
        elapsed = time.monotonic() - start
        cpu = _cpu_seconds(pid) - cpu0
        rss = _peak_rss_mb(pid)
        claims = len(cluster.items("nodeclaims.joiner.sh"))
        joiner.stop()
    clean_cluster(cluster)
    print(
        f"pods={n} running={running} seconds_to_all_running={elapsed:.1f} nodeclaims={claims} "
        f"controller_peak_rss_mb={rss:.0f} controller_cpu_seconds={cpu:.1f}"
    )
    return 0 if running == n else 1


if __name__ == "__main__":
    raise SystemExit(main())
