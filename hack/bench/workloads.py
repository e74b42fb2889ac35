"""Synthetic, seeded workloads for the solver benchmarks.

The mix follows the shape of Karpenter's scheduling benchmark (generic pods, zonal and hostname
topology spread, pod affinity, hostname anti-affinity) and adds GPU pods, as deployments of
identical replicas (real clusters run deployments, jobs and statefulsets, not unique pods).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from controller.cloudprovider.catalog import load_catalog
from controller.scheduling import (
    InstanceType,
    NodePoolTemplate,
    Pod,
    PodAffinityTerm,
    Requirement,
    Requirements,
    Resources,
    Taint,
    Toleration,
    TopologySpread,
    label_selector,
)

BENCH_CATALOG = Path(__file__).resolve().parent / "catalog-400.json"
GPU_TAINT = Taint(key="nvidia.com/gpu", effect="NoSchedule")
GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator="Exists")
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"

CPUS = ["100m", "250m", "500m", "1", "1500m", "2", "4"]
MEMS = ["128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi", "8Gi"]


def bench_catalog() -> tuple[InstanceType, ...]:
    return load_catalog(BENCH_CATALOG)


def bench_pools(catalog: tuple[InstanceType, ...]) -> list[NodePoolTemplate]:
    """A CPU pool (no GPU types) and a tainted GPU pool, spot and on-demand (and reserved)."""
    cpu = NodePoolTemplate(
        name="cpu",
        instance_types=catalog,
        requirements=Requirements((Requirement.new("joiner.sh/gpu-count", "DoesNotExist"),)),
    )
    gpu = NodePoolTemplate(
        name="gpu",
        instance_types=catalog,
        requirements=Requirements((Requirement.new("joiner.sh/gpu-count", "Exists"),)),
        taints=(GPU_TAINT,),
    )
    return [cpu, gpu]


@dataclass(frozen=True)
class _Deployment:
    kind: str
    replicas: int


def _requests(rng: random.Random) -> Resources:
    return Resources.parse({"cpu": rng.choice(CPUS), "memory": rng.choice(MEMS)})


def diverse_pods(count: int, *, seed: int = 42) -> list[Pod]:
    """``count`` pending pods in deployments of identical replicas.

    Share of pods: 40 % generic, 15 % zonal spread (maxSkew 1), 10 % hostname spread (maxSkew 2),
    8 % hostname anti-affinity (one per node), 7 % zonal pod affinity, 20 % GPU (1-GPU inference
    on L4/A10G/L40S/any, 2/4/8-GPU training on H100/A100).
    """
    rng = random.Random(seed)
    mix = [
        ("generic", 0.40, (5, 200)),
        ("zone-spread", 0.15, (6, 120)),
        ("host-spread", 0.10, (4, 60)),
        ("anti", 0.08, (2, 24)),
        ("zone-affinity", 0.07, (3, 40)),
        ("gpu", 0.20, (1, 32)),
    ]
    pods: list[Pod] = []
    deployment = 0
    for kind, share, (lo, hi) in mix:
        budget = round(count * share) if count >= 20 else (count if kind == "generic" else 0)
        while budget > 0:
            replicas = min(budget, rng.randint(lo, hi))
            budget -= replicas
            deployment += 1
            pods.extend(_deployment(kind, deployment, replicas, rng))
    return pods[:count] if len(pods) >= count else pods + _deployment("generic", 0, count - len(pods), rng)


def _deployment(kind: str, index: int, replicas: int, rng: random.Random) -> list[Pod]:
    app = f"{kind}-{index}"
    labels = {"app": app}
    owner = f"ReplicaSet/{app}"
    selector = label_selector({"app": app})
    requests = _requests(rng)
    spread: tuple[TopologySpread, ...] = ()
    anti: tuple[PodAffinityTerm, ...] = ()
    aff: tuple[PodAffinityTerm, ...] = ()
    node_reqs: tuple[Requirements, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    if kind == "zone-spread":
        spread = (TopologySpread(topology_key=ZONE, max_skew=1, selector=selector),)
    elif kind == "host-spread":
        spread = (TopologySpread(topology_key=HOSTNAME, max_skew=2, selector=selector),)
    elif kind == "anti":
        anti = (PodAffinityTerm(topology_key=HOSTNAME, selector=selector, namespaces=frozenset({"default"})),)
    elif kind == "zone-affinity":
        aff = (PodAffinityTerm(topology_key=ZONE, selector=selector, namespaces=frozenset({"default"})),)
    elif kind == "gpu":
        tolerations = (GPU_TOLERATION,)
        roll = rng.random()
        if roll < 0.55:
            gpus = 1
            name = rng.choice(["L4", "A10G", "L40S", None])
            requests = Resources.parse(
                {"cpu": rng.choice(["2", "4", "8"]), "memory": rng.choice(["8Gi", "16Gi", "24Gi"]), "nvidia.com/gpu": 1}
            )
        else:
            gpus = rng.choice([2, 4, 8])
            name = rng.choice(["H100", "A100", "H200"])
            requests = Resources.parse({"cpu": str(10 * gpus), "memory": f"{96 * gpus}Gi", "nvidia.com/gpu": gpus})
        if name is not None:
            node_reqs = (Requirements((Requirement.in_("joiner.sh/gpu-name", name),)),)
    return [
        Pod(
            name=f"{app}-{i}",
            namespace="default",
            requests=requests,
            labels=labels,
            node_requirements=node_reqs,
            tolerations=tolerations,
            spread=spread,
            affinity=aff,
            anti_affinity=anti,
            owner=owner,
        )
        for i in range(replicas)
    ]
