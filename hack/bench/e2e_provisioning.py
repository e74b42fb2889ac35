"""End to end on KWOK: N pending pods to all Running, with the controller's peak RSS and CPU.

    .venv/bin/python -m hack.bench.e2e_provisioning --pods 1000

Runs on its own cluster (JOINER_CLUSTER_DIR, default /tmp/joiner-bench-kwok) with registration
delay 0, starts `joiner run --provider kwok`, applies Deployments of mixed CPU and GPU pods, and
polls until every pod is Running. The controller's peak RSS is its VmHWM from /proc; CPU is
user+system seconds from /proc/<pid>/stat over the run.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

ROOT = Path(__file__).resolve().parents[2]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _cluster_pids(cluster_dir: Path) -> dict[str, int]:
    pids: dict[str, int] = {}
    for f in sorted((cluster_dir / "pids").glob("*")):
        try:
            pids[f.name] = int(f.read_text().strip())
        except (OSError, ValueError):
            continue
    return pids


def _cpu_by_process(pids: dict[str, int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            out[name] = _cpu_seconds(pid)
        except OSError:
            continue
    return out


def _apiserver_requests(cluster: Any) -> Counter[str]:
    """apiserver_request_total by verb and resource[/subresource] (watches and gets of health aside)."""
    out: Counter[str] = Counter()
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if labels.get("verb") in ("WATCH", "CONNECT") or not labels.get("resource"):
            continue
        sub = labels.get("subresource")
        key = f"{labels['verb']} {labels['resource']}{'/' + sub if sub else ''}"
        out[key] += int(float(line.rsplit(" ", 1)[1]))
    return out


def scheduler_sample(cluster_dir: Path) -> tuple[dict[str, int], Counter[str]] | None:
    """kube-scheduler's queue lengths (by queue) and scheduling attempts so far (by result), from its
    /metrics (hack/cluster.sh serves them on loopback); None when it does not answer."""
    try:
        port = int((cluster_dir / "scheduler-port").read_text())
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=2, context=context) as resp:
            text = resp.read().decode()
    except (OSError, ValueError):
        return None
    queues: dict[str, int] = {}
    attempts: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("scheduler_pending_pods{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            queues[labels.get("queue", "?")] = int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("scheduler_schedule_attempts_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            attempts[labels.get("result", "?")] += int(float(line.rsplit(" ", 1)[1]))
    return queues, attempts


def _scheduler_queues(cluster_dir: Path) -> str:
    sample = scheduler_sample(cluster_dir)
    if sample is None:
        return ""
    queues, attempts = sample
    q = " ".join(f"{k}={v}" for k, v in sorted(queues.items()) if v)
    a = " ".join(f"{k}={v}" for k, v in sorted(attempts.items()))
    return f"kube-scheduler queues: {q or 'empty'}; attempts: {a}"


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def _cond(obj: dict[str, Any], kind: str) -> float | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return _ts(c.get("lastTransitionTime"))
    return None


class _Watch:
    """Informers on pods and Nodes (in a thread with its own event loop): when this process first saw
    each pod unschedulable, bound and Running, and each Node Ready without taints that keep pods off
    (the GPU taint aside). Watching costs the apiserver far less than listing 1,000 pods every poll."""

    def __init__(self, kubeconfig: Path) -> None:
        self.seen: dict[str, dict[str, float]] = {"unschedulable": {}, "bound": {}, "running": {}, "usable": {}}
        self._kubeconfig = kubeconfig
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._main: asyncio.Task[None] | None = None
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        if not self._ready.wait(timeout=60):
            raise RuntimeError("the pod and Node informers did not sync within 60 s")

    async def _start(self) -> None:
        self._main = asyncio.create_task(self._run())

    async def _run(self) -> None:
        from controller.clock import RealClock
        from controller.kube.client import KubeClient
        from controller.kube.resources import NODES, PODS
        from controller.state.informer import Informer

        client = await KubeClient.connect(str(self._kubeconfig))
        clock = RealClock()
        informers = [
            Informer(source=client, resource=PODS, clock=clock, handler=lambda _t, obj, _old: self._observe_pod(obj)),
            Informer(source=client, resource=NODES, clock=clock, handler=lambda _t, obj, _old: self._observe_node(obj)),
        ]
        tasks = [asyncio.create_task(i.run()) for i in informers]
        try:
            await asyncio.gather(*(i.synced.wait() for i in informers))
            self._ready.set()
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.close()

    def _observe_node(self, node: dict[str, Any]) -> None:
        conditions = (node.get("status") or {}).get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        blocking = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != "nvidia.com/gpu"]
        if ready and not blocking:
            self.seen["usable"].setdefault(node["metadata"]["name"], time.time())

    def _observe_pod(self, pod: dict[str, Any]) -> None:
        now = time.time()
        name = (pod.get("metadata") or {}).get("name", "")
        conditions = (pod.get("status") or {}).get("conditions") or []
        scheduled: dict[str, Any] = next((c for c in conditions if c["type"] == "PodScheduled"), {})
        if scheduled.get("reason") == "Unschedulable":
            self.seen["unschedulable"].setdefault(name, now)
        if (pod.get("spec") or {}).get("nodeName"):
            self.seen["bound"].setdefault(name, now)
        if (pod.get("status") or {}).get("phase") == "Running":
            self.seen["running"].setdefault(name, now)

    def count(self, what: str) -> int:
        return len(self.seen[what])

    def stop(self) -> None:
        async def shutdown() -> None:
            main = self._main
            if main is not None:
                main.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await main

        with contextlib.suppress(concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


def _timeline(
    start: float,
    pods: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    log: Path,
    seen: dict[str, dict[str, float]],
) -> None:
    """Where the seconds went: when pods, NodeClaims and Nodes reached each step (apiserver clock, 1 s
    grain; the "(watch)" rows are when this process saw it)."""
    rows: list[tuple[str, list[float]]] = [
        ("pod created", [t for p in pods if (t := _ts(p["metadata"].get("creationTimestamp")))]),
        ("pod unschedulable (watch)", list(seen["unschedulable"].values())),
        ("nodeclaim created", [t for c in claims if (t := _ts(c["metadata"].get("creationTimestamp")))]),
        ("nodeclaim launched", [t for c in claims if (t := _cond(c, "Launched"))]),
        ("nodeclaim registered", [t for c in claims if (t := _cond(c, "Registered"))]),
        ("nodeclaim initialized", [t for c in claims if (t := _cond(c, "Initialized"))]),
        ("node usable (watch)", list(seen["usable"].values())),
        ("pod bound (watch)", list(seen["bound"].values())),
        ("pod running (watch)", list(seen["running"].values())),
    ]
    print(f"  {'step':<26} {'n':>5} {'first':>7} {'p50':>7} {'p90':>7} {'last':>7}   (seconds after apply)")
    for name, times in rows:
        if not times:
            continue
        xs = sorted(t - start for t in times)
        pick = [xs[0], xs[len(xs) // 2], xs[min(len(xs) - 1, int(len(xs) * 0.9))], xs[-1]]
        print(f"  {name:<26} {len(xs):>5} " + " ".join(f"{x:7.1f}" for x in pick))
    initialized = [t for c in claims if (t := _cond(c, "Initialized"))]
    if seen["unschedulable"] and initialized:
        first = min(seen["unschedulable"].values())
        last_claim = max(initialized)
        after = {what: max(seen[what].values()) - last_claim for what in ("usable", "bound", "running") if seen[what]}
        print(
            f"  joiner's share: first pod unschedulable -> last NodeClaim Initialized {last_claim - first:.1f}s "
            f"(1 s grain); after that: last node usable (kwok) +{after.get('usable', 0):.1f}s, last pod bound "
            f"(kube-scheduler) +{after.get('bound', 0):.1f}s, last pod Running (kwok) +{after.get('running', 0):.1f}s"
        )
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "provisioner.solved":
            at = (_ts(event.get("timestamp")) or start) - start
            print(
                f"  solve at {at:6.1f}s: pods={event['pods']} new={event['new_nodeclaims']} "
                f"on_existing={event['on_existing']} unschedulable={event['unschedulable']} "
                f"in {event['seconds']}s"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument(
        "--no-nominate", action="store_true", help="run joiner with --no-nominate (kube-scheduler is not told the plan)"
    )
    parser.add_argument("--batch-idle", type=float, default=1.0, help="joiner --batch-idle-duration (default 1)")
    parser.add_argument("--batch-max", type=float, default=10.0, help="joiner --batch-max-duration (default 10)")
    parser.add_argument(
        "--linger", type=float, default=0, help="keep the controller running this long after all pods run"
    )
    parser.add_argument(
        "--settle", type=float, default=0, help="before --linger: wait this long for the cluster to come to rest"
    )
    parser.add_argument(
        "--one-per-node",
        action="store_true",
        help="N pods of 3 CPUs on 4-CPU nodes: N nodes (for the idle cost at rest with many nodes)",
    )
    parser.add_argument(
        "--gangs", type=int, default=0, help="also this many gangs of 4 pods x 8 GPUs (bare pods, gated, gang-size 4)"
    )
    parser.add_argument("--dump", type=Path, help="write the pods, NodeClaims, Nodes, Events and the joiner log here")
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the controller with py-spy (pip install py-spy into the venv) over the run and write its "
        "collapsed stacks here (flamegraph.pl / speedscope read them)",
    )
    args = parser.parse_args()

    os.environ.setdefault("JOINER_CLUSTER_DIR", "/tmp/joiner-bench-kwok")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    from tests.e2e.harness import CLUSTER_DIR, Cluster, clean_cluster
    from tests.e2e.joiner import Joiner
    from tests.e2e.manifests import deployment, nodeclass, nodepool, pod, req

    subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "up"], check=True)
    cluster = Cluster(kubeconfig=CLUSTER_DIR / "kubeconfig", bin_dir=Path((CLUSTER_DIR / "bindir").read_text().strip()))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "deploy" / "crds"))
    clean_cluster(cluster)
    ns = cluster.create_namespace(f"bench-{int(time.time())}")
    cpu_requirements = [req("joiner.sh/gpu-count", "DoesNotExist")]
    if args.one_per_node:
        cpu_requirements.append(req("node.kubernetes.io/instance-type", "In", "c6i.xlarge"))
    cluster.apply(
        [
            nodeclass(registrationDelay="0s"),
            nodepool("cpu", requirements=cpu_requirements),
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
    if args.one_per_node:
        workloads = [deployment("solo", ns, replicas=n, cpu="3", memory="4Gi")]
    for g in range(args.gangs):
        for i in range(4):
            member = pod(f"gang{g}-{i}", ns, cpu="16", memory="64Gi", gpus=8)
            member["metadata"]["labels"] = {"joiner.sh/gang": f"gang{g}", "app": f"gang{g}"}
            member["metadata"]["annotations"] = {"joiner.sh/gang-size": "4"}
            member["spec"]["schedulingGates"] = [{"name": "joiner.sh/gang"}]
            workloads.append(member)
    n += 4 * args.gangs
    with tempfile.TemporaryDirectory() as tmp:
        # the batch window users get (1 s idle, 10 s at most), not the e2e tests' shortened one
        batching = {"batch-idle-duration": str(args.batch_idle), "batch-max-duration": str(args.batch_max)}
        flags = {**batching, **({"no-nominate": ""} if args.no_nominate else {})}
        joiner = Joiner(cluster=cluster, log_path=Path(tmp) / "joiner.log", flags=flags).start()
        assert joiner.proc is not None
        pid = joiner.proc.pid
        cpu0 = _cpu_seconds(pid)
        components = _cluster_pids(CLUSTER_DIR)
        components_cpu0 = _cpu_by_process(components)
        watch = _Watch(cluster.kubeconfig)
        profiler = None
        if args.profile:
            profiler = subprocess.Popen(
                [
                    *(str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--rate", "50"),
                    *("--format", "raw", "--nonblocking", "--output", str(args.profile)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        requests0 = _apiserver_requests(cluster)
        start = time.monotonic()
        wall_start = time.time()
        cluster.apply(workloads)
        running = 0
        ticks = 0
        while time.monotonic() - start < args.timeout:
            running = watch.count("running")
            queues = _scheduler_queues(CLUSTER_DIR) if ticks % 5 == 0 else ""
            ticks += 1
            print(f"  {time.monotonic() - start:6.1f}s  {running}/{n} Running  {queues}", flush=True)
            if running == n:
                break
            time.sleep(2)
        elapsed = time.monotonic() - start
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            profiler.wait(timeout=60)
        cpu = _cpu_seconds(pid) - cpu0
        components_cpu = {k: v - components_cpu0.get(k, 0.0) for k, v in _cpu_by_process(components).items()}
        requests = _apiserver_requests(cluster) - requests0
        if args.linger > 0:
            if args.settle > 0:
                print(f"  letting the cluster settle for {args.settle:.0f}s", flush=True)
                time.sleep(args.settle)
            before = _apiserver_requests(cluster)
            cpu_before = _cpu_seconds(pid)
            time.sleep(args.linger)
            at_rest = _apiserver_requests(cluster) - before
            writes = {k: v for k, v in at_rest.items() if not k.startswith(("GET", "LIST"))}
            top_writes = ", ".join(f"{k} {v}" for k, v in Counter(writes).most_common(8))
            rest_cpu = _cpu_seconds(pid) - cpu_before
            print(
                f"  at rest for {args.linger:.0f}s: controller CPU {rest_cpu:.2f}s "
                f"({100 * rest_cpu / args.linger:.2f}% of a core), "
                f"apiserver writes {sum(writes.values())} ({top_writes})"
            )
        watch.stop()
        rss = _peak_rss_mb(pid)
        claim_objs = cluster.items("nodeclaims.joiner.sh")
        claims = len(claim_objs)
        joiner.stop()
        pod_objs = cluster.items("pods", namespace=ns)
        _timeline(wall_start, pod_objs, claim_objs, Path(tmp) / "joiner.log", watch.seen)
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            dumped = {"start": wall_start, "pods": pod_objs, "nodeclaims": claim_objs}
            dumped["nodes"] = cluster.items("nodes")
            dumped["events"] = cluster.items("events", namespace=ns)
            (args.dump / "objects.json").write_text(json.dumps(dumped))
            (args.dump / "joiner.log").write_text((Path(tmp) / "joiner.log").read_text(errors="replace"))
    top = ", ".join(f"{k} {v}" for k, v in requests.most_common(14))
    print(f"  apiserver requests during the run: {sum(requests.values())} ({top})")
    print("  CPU-seconds during the run: " + ", ".join(f"{k} {v:.1f}" for k, v in components_cpu.items()))
    print(
        f"pods={n} running={running} seconds_to_all_running={elapsed:.1f} nodeclaims={claims} "
        f"controller_peak_rss_mb={rss:.0f} controller_cpu_seconds={cpu:.1f}"
    )
    clean_cluster(cluster)  # after the figures: removing 10,000 pods can take minutes on a busy machine
    return 0 if running == n else 1


if __name__ == "__main__":
    raise SystemExit(main())
