"""The race: joiner and the real Karpenter (its KWOK provider) on one local KWOK cluster, same pods.

    .venv/bin/python -m hack.bench.race [--pods 1000] [--runs 3] [--sides joiner,karpenter]
                                        [--workload cpu|spread|gpu|diverse] [--daemonset] [--system-node]
                                        [--joiner-flag plan-untried-after=0]
                                        [--dump DIR]

* **Karpenter**: ``sigs.k8s.io/karpenter@v1.15.0`` from the Go module proxy, copied out of the module
  cache, its ``go`` line lowered to the local toolchain, its ``kwok`` main package built once (with
  ``nice``) and cached under ``~/.cache/joiner/karpenter-kwok`` (or ``$JOINER_CACHE_DIR``). It runs
  as a plain process against the cluster, with its CRDs, a ``KWOKNodeClass`` and one NodePool.
* **joiner**: ``joiner run --provider kwok --catalog`` a catalog converted from Karpenter's
  ``kwok/cloudprovider/instance_types.json`` (same 144 types, prices, zones and kube-reserved), so
  both buy from the same list at the same prices; the default batch window (1 s idle, 10 s max).
* Both NodePools: only ``capacity-type In [spot, on-demand]``, never expire, consolidation off.
* Each run on a fresh cluster (``hack/cluster.sh down``/``up`` in ``$JOINER_CLUSTER_DIR``), the sides
  alternating; the pods are three Deployments: 50 % 500m/1Gi, 40 % 2/4Gi, 10 % 4/16Gi.
* ``--workload gpu``: the catalog is joiner's own built-in one instead (its CPU types and its L4
  machines, g6), written as a Karpenter kwok instance-types file that Karpenter's provider reads
  (``INSTANCE_TYPES_FILE_PATH``) and converted back for joiner as above; the pods are four
  Deployments: 30 % 1 GPU 3/12Gi, 15 % 1 GPU 12/48Gi, 15 % 2 GPUs 16/64Gi, 40 % CPU 1/2Gi.
* ``--workload spread``: the CPU workload's catalog and pods, kept apart as users keep replicas apart:
  ``web`` spread evenly over the zones (``maxSkew: 1``), ``batch`` over the Nodes (``maxSkew: 2``),
  both ``DoNotSchedule``, and ``big`` one a Node (required pod anti-affinity on the hostname).
* ``--workload diverse``: the CPU workload's catalog; the pods are Karpenter's scheduling-benchmark
  recipe as 35 Deployments (plain, zone spread, Node spread, zone self-affinity, one a Node, each
  over seven label values, sizes drawn from its CPUs and memories), spreads counting other
  Deployments' pods.
* ``--waves K`` (``--wave-gap S``): the burst in K steps S seconds apart, each Deployment scaled up
  by a K-th of its replicas each time, as an autoscaler or a queue of work scales them: each wave
  arrives while the Nodes bought for the ones before are still coming up.
* ``--joiner-instance-types a,b``: joiner's NodePool may buy only these (a requirement on
  ``node.kubernetes.io/instance-type``), to compare plans of another shape, such as Karpenter's.
* ``--daemonset``: a log agent DaemonSet (100m/128Mi, no tolerations) on every Node, on both sides,
  as most clusters run one; its pods are not counted in the burst.
* ``--system-node``: one Node there before the burst, as in every real cluster: its add-ons' pool,
  tainted ``CriticalAddonsOnly`` so no pod of the burst lands there (not counted as either side's).
  Without it a pod tried before any Node exists fails with "no nodes available", an error to
  kube-scheduler: it goes back on its back-off timer whatever happens, and its first try once Nodes
  exist writes a new status inside kube-scheduler's loop.

Per run: apply -> first NodeClaim, -> last NodeClaim, -> half the pods Running (the median pod,
``½ Run``), -> all Running (seen by a watch in this process); NodeClaims bought, the first solve's
plan (joiner: ``provisioner.solved``; Karpenter: ``computed new nodeclaim(s)``) and every solve's
together (``Σplan``); nodes left without a pod of the burst; $/h of the Nodes at the catalog's
prices; nodes per zone; the controller's CPU-seconds and peak RSS (MiB); kube-apiserver's
CPU-seconds; apiserver requests (all clients); joiner's ``provisioner.nomination_released`` count
and follow-up solves that bought; from a pod's NodeClaim Initialized to the pod Running
(``init→Run``, median/slowest pod, as this process's watch saw them). With ``--audit``, each run's
requests by client, and the Nodes' way from the audit log: created, the `not-ready` taint taken off
by kube-controller-manager (8 workers: on kwok, a burst of many Nodes queues there), pods bound
(``race_logs.NodeWay``). ``--dump`` keeps each run's
objects and controller log, and ``scheduler.json``: kube-scheduler's queue lengths and scheduling
attempts and every cluster process's CPU-seconds, twice a second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from hack.bench.e2e_provisioning import (
    _apiserver_requests,
    _cluster_pids,
    _cpu_by_process,
    _cpu_seconds,
    _peak_rss_mb,
    scheduler_sample,
)
from hack.bench.race_logs import (
    _first_plan_karpenter,
    _joiner_log,
    _when,
    audit_counts,
    audit_creates,
    audit_node_way,
)
from hack.bench.race_setup import (
    CONSTRAINTS,
    INSTANCE_TYPE,
    LABELS,
    MIX,
    MIXES,
    ROOT,
    SYSTEM_NODE_LABEL,
    ZONE,
    Mix,
    Obj,
    build_karpenter_kwok,
    joiner_catalog,
    karpenter_cache,
    karpenter_source,
    karpenter_types,
    log_agent,
    prices,
    system_node,
    workloads,
)
from hack.ports import free_port

# --- watching the run --------------------------------------------------------------------------


class _Watch:
    """Informers (in a thread with its own loop) on pods and on one group's NodeClaims: when this
    process first saw each NodeClaim and each pod Running, each pod's Node, and when each NodeClaim's
    Node was first seen Initialized."""

    def __init__(self, kubeconfig: Path, claim_group: str, namespace: str) -> None:
        self.claims: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.node_of: dict[str, str] = {}  # pod -> its Node, as it was seen Running
        self.initialized: dict[str, float] = {}  # Node -> when its NodeClaim was first seen Initialized
        self._kubeconfig = kubeconfig
        self._group = claim_group
        self._namespace = namespace
        self._main: asyncio.Task[None] | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._task = asyncio.run_coroutine_threadsafe(self._run(), self._loop)
        if not self._ready.wait(timeout=60):
            raise RuntimeError("the informers did not sync within 60 s")

    async def _run(self) -> None:
        from controller.clock import RealClock
        from controller.kube.client import KubeClient
        from controller.kube.resources import PODS, Resource
        from controller.state.informer import Informer

        self._main = asyncio.current_task()
        client = await KubeClient.connect(str(self._kubeconfig))
        claims = Resource(self._group, "v1", "nodeclaims", "NodeClaim", namespaced=False)

        def on_pod(_t: str, pod: Obj, _old: Obj | None) -> None:
            if (
                pod["metadata"].get("namespace") == self._namespace
                and (pod.get("status") or {}).get("phase") == "Running"
            ):
                name = pod["metadata"]["name"]
                self.running.setdefault(name, time.time())
                self.node_of.setdefault(name, pod["spec"].get("nodeName") or "")

        def on_claim(_t: str, claim: Obj, _old: Obj | None) -> None:
            now = time.time()
            self.claims.setdefault(claim["metadata"]["name"], now)
            status = claim.get("status") or {}
            node = status.get("nodeName")
            if node and any(
                c.get("type") == "Initialized" and c.get("status") == "True" for c in status.get("conditions") or ()
            ):
                self.initialized.setdefault(node, now)

        informers = [
            Informer(source=client, resource=PODS, clock=RealClock(), handler=on_pod),
            Informer(source=client, resource=claims, clock=RealClock(), handler=on_claim),
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

    def stop(self) -> None:
        async def shutdown() -> None:
            # only the main task: it stops its informers and closes its client (cancelled again while
            # closing, the client's session was left open)
            main = self._main
            if main is not None:
                main.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await main

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


def after_initialized(running: dict[str, float], node_of: dict[str, str], initialized: dict[str, float]) -> list[float]:
    """Per pod Running on a Node whose NodeClaim was seen Initialized: seconds from that to the pod
    seen Running (negative: the pod was seen Running first), sorted."""
    out = []
    for pod, at in running.items():
        ready = initialized.get(node_of.get(pod, ""))
        if ready is not None:
            out.append(at - ready)
    return sorted(out)


@dataclass
class Run:
    side: str
    pods: int
    first_claim: float = float("nan")
    last_claim: float = float("nan")
    all_running: float = float("nan")
    half_running: float = float("nan")  # apply -> half the pods Running (the median pod)
    claims: int = 0
    first_plan: int = 0
    first_pods: int = 0  # pods the first solve that bought was given
    planned: int = 0  # NodeClaims every solve that bought asked for, together
    empty_nodes: int = 0
    price: float = 0.0
    cpu: float = 0.0
    rss: float = 0.0  # the controller's peak resident memory, MiB (VmHWM)
    apiserver_cpu: float = 0.0  # kube-apiserver's CPU-seconds during the run
    requests: int = 0
    released: int = 0  # joiner: pods whose nomination was released (provisioner.nomination_released)
    # seconds from a pod's NodeClaim seen Initialized to the pod seen Running: median and slowest pod
    init_to_running: float = float("nan")
    init_to_running_max: float = float("nan")
    follow_ups: int = 0  # solves after the first that bought NodeClaims
    zones: dict[str, int] = field(default_factory=dict)
    # --audit: requests during the run by client, and by client, verb and resource
    by_client: Counter[str] = field(default_factory=Counter)
    by_call: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    # --audit: the Nodes' way, created -> not-ready taint off -> pods bound (`race_logs.NodeWay.line`)
    node_way: str = ""

    def row(self) -> str:
        zones = " ".join(f"{z[-1]}{n}" for z, n in sorted(self.zones.items()))
        return (
            f"{self.side:<9} {self.pods:>6} {self.first_claim:7.1f} {self.last_claim:7.1f} {self.half_running:7.1f} "
            f"{self.all_running:7.1f} "
            f"{self.claims:>5} ({self.first_plan:>3}/{self.first_pods:>5}) {self.planned:>5} {self.empty_nodes:>5} "
            f"{self.price:8.2f} {self.cpu:6.1f} {self.rss:5.0f} {self.apiserver_cpu:6.1f} "
            f"{self.requests:>7} {self.released:>5} {self.follow_ups:>3} "
            f"{self.init_to_running:5.1f}/{self.init_to_running_max:<5.1f}  {zones}"
        )


HEADER = (
    f"{'side':<9} {'pods':>6} {'1st NC':>7} {'last NC':>7} {'½ Run':>7} {'Running':>7} {'NCs':>5} {'(plan/pods)':>11} "
    f"{'Σplan':>5} {'empty':>5} {'$/h':>8} {'CPU-s':>6} {'RSS':>5} {'apiCPU':>6} {'apisrv':>7} {'rel.':>5} {'fu':>3} "
    f"{'init→Run':>11}  zones"
)


def _cluster_dir() -> Path:
    return Path(os.environ.get("JOINER_CLUSTER_DIR", str(ROOT / ".kwok")))


def _fresh_cluster() -> Any:
    from tests.e2e.harness import CLUSTER_DIR, Cluster

    subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "down"], check=False, capture_output=True)
    subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "up"], check=True, capture_output=True)
    return Cluster(kubeconfig=CLUSTER_DIR / "kubeconfig", bin_dir=Path((CLUSTER_DIR / "bindir").read_text().strip()))


def run_once(
    side: str,
    *,
    pods: int,
    karpenter: tuple[Path, Path],
    catalog: Path,
    flags: dict[str, str],
    mix: Mix = MIX,
    constraints: dict[str, Obj] | None = None,
    pod_labels: dict[str, dict[str, str]] | None = None,
    instance_types: Path | None = None,
    timeout: float,
    dump: Path | None,
    daemonset: bool = False,
    system: bool = False,
    waves: int = 1,
    wave_gap: float = 5.0,
    joiner_types: list[str] | None = None,
) -> Run:
    from tests.e2e.harness import eventually
    from tests.e2e.joiner import Joiner
    from tests.e2e.manifests import nodeclass, nodepool, req

    cluster = _fresh_cluster()
    ns = cluster.create_namespace("race")
    if daemonset:
        cluster.apply([log_agent(cluster.create_namespace("agents"))])
    table = prices(json.loads(catalog.read_text()))  # both sides' offerings: $/h, and their zones
    if system:
        # in a zone both sides buy in (the catalog's first)
        cluster.apply([system_node(min(zone for _, zone, _ in table))])
        eventually(lambda: _ready(cluster.get("node", "system-0")), timeout=60, what="the system Node Ready")
    capacity = ["spot", "on-demand"]
    tmp = Path(tempfile.mkdtemp(prefix=f"race-{side}-"))
    log_path = tmp / f"{side}.log"
    proc: subprocess.Popen[bytes] | None = None
    joiner: Joiner | None = None
    if side == "joiner":
        cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "deploy" / "crds"))
        requirements = [req("joiner.sh/capacity-type", "In", *capacity)]
        if joiner_types:
            requirements.append(req(INSTANCE_TYPE, "In", *joiner_types))
        pool = nodepool("race", requirements=requirements)
        pool["spec"]["template"]["spec"]["expireAfter"] = "Never"
        pool["spec"]["disruption"] = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}
        cluster.apply([nodeclass(registrationDelay="0s"), pool])
        batching = {"batch-idle-duration": "1", "batch-max-duration": "10", "catalog": str(catalog)}
        joiner = Joiner(cluster=cluster, log_path=log_path, flags={**batching, **flags}).start()
        assert joiner.proc is not None
        pid = joiner.proc.pid
        group, capacity_label = "joiner.sh", "joiner.sh/capacity-type"
    else:
        binary, src = karpenter
        for crds in (src / "kwok" / "charts" / "crds", src / "kwok" / "apis" / "crds"):
            cluster.kubectl("apply", "--server-side", "-f", str(crds))
        cluster.apply(
            [
                {
                    "apiVersion": "karpenter.kwok.sh/v1alpha1",
                    "kind": "KWOKNodeClass",
                    "metadata": {"name": "default"},
                    "spec": {},
                },
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodePool",
                    "metadata": {"name": "race"},
                    "spec": {
                        "template": {
                            "spec": {
                                "nodeClassRef": {
                                    "group": "karpenter.kwok.sh",
                                    "kind": "KWOKNodeClass",
                                    "name": "default",
                                },
                                "requirements": [req("karpenter.sh/capacity-type", "In", *capacity)],
                                "expireAfter": "Never",
                            }
                        },
                        "disruption": {"consolidateAfter": "Never"},
                    },
                },
            ]
        )
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": str(free_port()),
            "HEALTH_PROBE_PORT": str(free_port()),
            "LOG_LEVEL": "info",
        }
        if instance_types is not None:
            env["INSTANCE_TYPES_FILE_PATH"] = str(instance_types)
        with log_path.open("wb") as out:
            proc = subprocess.Popen([str(binary)], stdout=out, stderr=subprocess.STDOUT, env=env)
        pid = proc.pid
        group, capacity_label = "karpenter.sh", "karpenter.sh/capacity-type"
        time.sleep(5)  # its caches sync; its first solve must not meet half-synced state
    result = Run(side=side, pods=pods)
    # --dump: kube-scheduler's queues and attempts so far and each process's CPU seconds so far, twice a
    # second (at: seconds since the apply)
    scheduler: list[dict[str, Any]] = []
    watch = _Watch(cluster.kubeconfig, group, ns)
    try:
        cpu0 = _cpu_seconds(pid)
        cluster_cpu0 = _cpu_by_process(_cluster_pids(_cluster_dir()))
        requests0 = _apiserver_requests(cluster)
        burst = workloads(ns, pods, mix, constraints, pod_labels)
        start = time.time()
        cluster.apply(in_wave(burst, 1, waves))
        wave = 1
        while time.time() - start < timeout and len(watch.running) < pods:
            time.sleep(0.5)
            if wave < waves and time.time() - start >= wave * wave_gap:
                wave += 1
                cluster.apply(in_wave(burst, wave, waves))
            if dump is not None:
                sample = scheduler_sample(_cluster_dir())
                cpu = _cpu_by_process({**_cluster_pids(_cluster_dir()), side: pid})
                scheduler.append(
                    {
                        "at": round(time.time() - start, 2),
                        "queues": sample[0] if sample else {},
                        "attempts": sample[1] if sample else {},
                        "cpu": {k: round(v, 2) for k, v in cpu.items()},
                    }
                )
        if len(watch.running) >= pods:
            result.all_running = max(watch.running.values()) - start
        if watch.running:
            times = sorted(watch.running.values())
            if len(times) * 2 >= pods:
                result.half_running = times[(pods + 1) // 2 - 1] - start
        time.sleep(3)  # anything bought late shows up
        result.cpu = _cpu_seconds(pid) - cpu0
        result.rss = _peak_rss_mb(pid)
        cluster_cpu = _cpu_by_process(_cluster_pids(_cluster_dir()))
        if "kube-apiserver" in cluster_cpu and "kube-apiserver" in cluster_cpu0:
            result.apiserver_cpu = cluster_cpu["kube-apiserver"] - cluster_cpu0["kube-apiserver"]
        result.requests = sum((_apiserver_requests(cluster) - requests0).values())
        audit = _cluster_dir() / "logs" / "audit.log"
        result.by_client, result.by_call = audit_counts(audit, start, time.time())
        created = audit_creates(audit, start, time.time(), "nodeclaims")
        if result.by_client:  # the audit log saw this run (a cluster started with --audit)
            result.node_way = audit_node_way(audit, start, time.time()).line(start)
        if created:  # --audit: when the apiserver stored them
            result.first_claim, result.last_claim = created[0] - start, created[-1] - start
        elif watch.claims:
            result.first_claim = min(watch.claims.values()) - start
            result.last_claim = max(watch.claims.values()) - start
        result.claims = len(watch.claims)
        waits = after_initialized(watch.running, watch.node_of, watch.initialized)
        if waits:
            result.init_to_running = statistics.median(waits)
            result.init_to_running_max = waits[-1]
    finally:
        watch.stop()
        if joiner is not None:
            joiner.stop()
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    nodes = cluster.items("nodes")
    used = {p["spec"].get("nodeName") for p in cluster.items("pods", namespace=ns)}
    zones: Counter[str] = Counter()
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        if SYSTEM_NODE_LABEL in labels:
            continue  # there before the burst, bought by neither side
        key = (labels.get(INSTANCE_TYPE, ""), labels.get(ZONE, ""), labels.get(capacity_label, ""))
        result.price += table.get(key, 0.0)
        zones[key[1]] += 1
        result.empty_nodes += node["metadata"]["name"] not in used
    result.zones = dict(zones)
    text = log_path.read_text(errors="replace")
    if side == "joiner":
        result.first_plan, result.first_pods, result.follow_ups, result.released, result.planned = _joiner_log(text)
    else:
        result.first_plan, result.first_pods, result.follow_ups, result.planned = _first_plan_karpenter(text)
    if dump is not None:
        where = dump / f"{side}-{int(start)}"
        where.mkdir(parents=True, exist_ok=True)
        shutil.copy(log_path, where / log_path.name)
        objects = {"start": start, "pods": cluster.items("pods", namespace=ns), "nodes": nodes}
        objects["events"] = cluster.items("events", namespace=ns)
        objects["nodeclaims"] = cluster.items(f"nodeclaims.{group}")
        (where / "objects.json").write_text(json.dumps(objects))
        (where / "scheduler.json").write_text(json.dumps(scheduler))
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "down"], check=False, capture_output=True)
    return result


def _ready(node: Obj) -> bool:
    return _true_condition(node, "Ready") is not None


def _true_condition(obj: Obj, kind: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return dict(c)
    return None


def _condition_time(obj: Obj, kind: str) -> float | None:
    c = _true_condition(obj, kind)
    return _when(c.get("lastTransitionTime")) if c is not None else None


def explain(where: Path) -> None:
    """Where joiner's plan and kube-scheduler parted, from one dumped joiner run (``--dump``, with
    ``--joiner-flag log-level=debug``): per NodeClaim of the plan, when it became usable, when its pods
    were told (nominated there, or given the toleration of its reservation), and how many of the pods
    bound to it were planned there."""
    objects = json.loads((where / "objects.json").read_text())
    start = float(objects["start"])
    planned: dict[str, str] = {}  # pod name -> NodeClaim the first decision put it on
    solves = 0
    nominated: dict[str, list[float]] = {}  # node -> times of nominations written to it
    first_nomination: dict[str, float] = {}  # pod -> first nomination or toleration written
    tolerated: dict[str, list[float]] = {}  # NodeClaim -> times of tolerations of its reservation
    released = 0
    for line in (where / "joiner.log").read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            at = (_when(event.get("timestamp")) or start) - start
            name = event.get("event")
            if name == "provisioner.solved" and event.get("new_nodeclaims"):
                solves += 1
            elif name == "provisioner.planned" and solves == 1:
                for key in event["pods"]:
                    planned.setdefault(key.split("/", 1)[1], event["nodeclaim"])
            elif name == "provisioner.nominated" and event.get("node"):
                nominated.setdefault(event["node"], []).append(at)
                first_nomination.setdefault(event["pod"].split("/", 1)[1], at)
            elif name == "provisioner.tolerated" and event.get("nodeclaim"):
                tolerated.setdefault(event["nodeclaim"], []).append(at)
                first_nomination.setdefault(event["pod"].split("/", 1)[1], at)
            elif name == "provisioner.nomination_released":
                released += int(event.get("pods", 0))
    bound: dict[str, tuple[str, float | None]] = {}
    for pod in objects["pods"]:
        node = pod["spec"].get("nodeName")
        if node:
            bound[pod["metadata"]["name"]] = (node, _condition_time(pod, "PodScheduled"))
    claims = {c["metadata"]["name"]: c for c in objects["nodeclaims"]}
    nodes = {n["metadata"]["name"]: n for n in objects["nodes"]}
    on_plan = sum(1 for pod, claim in planned.items() if bound.get(pod, ("", None))[0] == claim)
    print(f"first plan: {len(set(planned.values()))} NodeClaims for {len(planned)} pods; {on_plan} bound where planned")
    print(f"NodeClaims in the end: {len(claims)}; pods whose nomination was released: {released}")
    foreign_unnominated = 0
    foreign_nominated_after = 0

    def rel(t: float | None) -> str:
        return f"{t - start:6.1f}" if t else "     -"

    print("nodeclaim                  planned  own  foreign  node created  ready  initialized  told first/last")
    for claim_name in sorted(
        set(planned.values()), key=lambda c: _condition_time(claims.get(c, {}), "Initialized") or 0
    ):
        claim = claims.get(claim_name, {})
        node_name = (claim.get("status") or {}).get("nodeName") or claim_name
        node = nodes.get(node_name, {})
        mine = [p for p, c in planned.items() if c == claim_name]
        here = [p for p, (n, _t) in bound.items() if n == node_name]
        own = sum(1 for p in here if planned.get(p) == claim_name)
        foreign = [p for p in here if planned.get(p) != claim_name]
        for p in foreign:
            t = first_nomination.get(p)
            if t is None:
                foreign_unnominated += 1
            elif (bound[p][1] or 0) - start < t:
                foreign_nominated_after += 1
        times = [*nominated.get(node_name, []), *tolerated.get(claim_name, [])]
        created = rel(_when(node.get("metadata", {}).get("creationTimestamp")))
        print(
            f"{claim_name:<26} {len(mine):>7} {own:>4} {len(foreign):>8}  "
            f"{created}       {rel(_condition_time(node, 'Ready'))} "
            f" {rel(_condition_time(claim, 'Initialized'))}       "
            + (f"{min(times):6.1f} {max(times):6.1f} ({len(times)})" if times else "-")
        )
    print(
        f"pods bound off their planned node: never told before binding {foreign_unnominated}, "
        f"bound before they were first told {foreign_nominated_after}"
    )


def in_wave(burst: list[Obj], wave: int, waves: int) -> list[Obj]:
    """The burst's Deployments as applied in wave ``wave`` of ``waves`` (1-based): each scaled to
    ``wave/waves`` of its replicas, as an autoscaler or a queue of work scales them up in steps."""
    out = []
    for dep in burst:
        scaled = json.loads(json.dumps(dep))
        scaled["spec"]["replicas"] = dep["spec"]["replicas"] * wave // waves
        out.append(scaled)
    return out


def _median(runs: list[Run], attr: str) -> float:
    return float(statistics.median(float(getattr(r, attr)) for r in runs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", default="1000", help="comma-separated burst sizes (default 1000)")
    parser.add_argument("--runs", type=int, default=3, help="runs per side and size (default 3)")
    parser.add_argument("--sides", default="joiner,karpenter")
    parser.add_argument(
        "--workload",
        choices=sorted(MIXES),
        default="cpu",
        help="cpu: Karpenter's kwok catalog, CPU pods; spread: the same, kept apart over zones and Nodes; "
        "gpu: joiner's catalog (CPU and L4), GPU and CPU pods; diverse: the CPU catalog, Karpenter's "
        "scheduling-benchmark mix as 35 Deployments",
    )
    parser.add_argument(
        "--daemonset",
        action="store_true",
        help="run a log agent DaemonSet (100m/128Mi, no tolerations) on every Node, as most clusters do",
    )
    parser.add_argument(
        "--system-node",
        action="store_true",
        help="a Node there before the burst, as in every real cluster (its add-ons' pool, tainted "
        'CriticalAddonsOnly): no pod first fails with "no nodes available"',
    )
    parser.add_argument(
        "--waves",
        type=int,
        default=1,
        help="apply the burst in this many steps, each Deployment scaled up by an equal part each time",
    )
    parser.add_argument("--wave-gap", type=float, default=5.0, help="seconds between two waves (default 5)")
    parser.add_argument(
        "--joiner-instance-types",
        help="comma-separated: joiner's NodePool may buy only these (to compare plans of other shapes)",
    )
    parser.add_argument("--joiner-flag", action="append", default=[], help="KEY=VALUE or KEY for `joiner run`")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--dump", type=Path, help="keep each run's controller log and objects here")
    parser.add_argument("--explain", type=Path, help="explain one dumped joiner run (see explain()) and exit")
    parser.add_argument(
        "--audit",
        action="store_true",
        help="run the apiserver with an audit log and count each run's requests by client, verb and resource",
    )
    args = parser.parse_args()
    if args.explain:
        explain(args.explain)
        return 0
    if args.waves < 1 or args.wave_gap < 0:
        parser.error("--waves takes 1 or more, --wave-gap 0 s or more")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    os.environ.setdefault("JOINER_CLUSTER_DIR", str(ROOT / ".kwok"))
    sides = args.sides.split(",")
    karpenter = build_karpenter_kwok() if "karpenter" in sides else (Path(), karpenter_source())
    instance_types: Path | None = None
    if args.workload == "gpu":
        from controller.cloudprovider.catalog import builtin_catalog_text

        types = karpenter_types(json.loads(builtin_catalog_text()))
        instance_types = karpenter_cache() / "karpenter-gpu-instance-types.json"
        instance_types.write_text(json.dumps(types))
    else:
        types = json.loads((karpenter[1] / "kwok" / "cloudprovider" / "instance_types.json").read_text())
    catalog = karpenter_cache() / f"joiner-catalog-{args.workload}.json"
    catalog.write_text(json.dumps(joiner_catalog(types)))
    flags = dict(f.split("=", 1) if "=" in f else (f, "") for f in args.joiner_flag)
    if args.audit:
        os.environ["JOINER_APISERVER_AUDIT"] = "1"  # read by hack/cluster.sh up
    print(
        f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; workload {args.workload} "
        f"({len(types)} instance types); joiner flags {flags or '-'}"
    )
    print(HEADER, flush=True)
    results: list[Run] = []
    for pods in (int(p) for p in args.pods.split(",")):
        for _ in range(args.runs):
            for side in sides:
                run = run_once(
                    side,
                    pods=pods,
                    karpenter=karpenter,
                    catalog=catalog,
                    flags=flags,
                    mix=MIXES[args.workload],
                    constraints=CONSTRAINTS.get(args.workload),
                    pod_labels=LABELS.get(args.workload),
                    instance_types=instance_types,
                    daemonset=args.daemonset,
                    system=args.system_node,
                    waves=args.waves,
                    wave_gap=args.wave_gap,
                    joiner_types=args.joiner_instance_types.split(",") if args.joiner_instance_types else None,
                    timeout=args.timeout,
                    dump=args.dump,
                )
                results.append(run)
                print(run.row(), flush=True)
                if run.by_client:
                    print("          by client: " + ", ".join(f"{c} {n}" for c, n in run.by_client.most_common()))
                if run.node_way:
                    print(f"          {run.node_way}")
        print(f"medians at {pods} pods:")
        for side in sides:
            runs = [r for r in results if r.side == side and r.pods == pods]
            med = Run(side=side, pods=pods)
            for attr in (
                "first_pods",
                "first_claim",
                "last_claim",
                "half_running",
                "all_running",
                "claims",
                "first_plan",
                "planned",
                "empty_nodes",
                "price",
                "cpu",
                "rss",
                "apiserver_cpu",
                "requests",
                "released",
                "follow_ups",
                "init_to_running",
                "init_to_running_max",
            ):
                value = _median(runs, attr)
                setattr(med, attr, value if isinstance(getattr(med, attr), float) else round(value))
            print(med.row(), flush=True)
        if args.audit:
            print_audit(results, pods, sides)
    return 0


def print_audit(results: list[Run], pods: int, sides: list[str]) -> None:
    """Per side, the mean requests of its runs at ``pods`` by client, then by client, verb and resource."""
    for side in sides:
        runs = [r for r in results if r.side == side and r.pods == pods and r.by_client]
        if not runs:
            continue
        clients: Counter[str] = sum((r.by_client for r in runs), Counter())
        calls: Counter[tuple[str, str, str]] = sum((r.by_call for r in runs), Counter())
        n = len(runs)
        total = sum(clients.values()) / n
        per_pod = total / pods
        print(f"{side}, {pods} pods, requests a run (mean of {n}, no watches): {total:,.0f} = {per_pod:.2f} per pod")
        for client, count in clients.most_common():
            print(f"  {client:<34} {count / n:>8,.0f}")
        for (client, verb, resource), count in calls.most_common(15):
            print(f"    {client:<24} {verb:<7} {resource:<34} {count / n:>8,.0f}")


if __name__ == "__main__":
    raise SystemExit(main())
