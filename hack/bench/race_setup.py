"""What both sides of the race (`hack.bench.race`) race on: Karpenter's KWOK provider, built once
from its Go module; the one catalog both buy from (Karpenter's kwok instance types, or joiner's own
GPU catalog written as a Karpenter instance-type file) and its prices; and the workloads applied
(the Deployments of each mix, the constraints of the ``spread`` workload, the log agent of
``--daemonset``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from hack.bench.karpenter_side_by_side import _go_env, _local_go, module_source

ROOT = Path(__file__).resolve().parents[2]
MODULE = "sigs.k8s.io/karpenter"
VERSION = "v1.15.0"
ZONE = "topology.kubernetes.io/zone"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
# the Deployments of each workload: name, share of the pods, cpu, memory, GPUs
Mix = tuple[tuple[str, float, str, str, int], ...]
MIX: Mix = (
    ("web", 0.5, "500m", "1Gi", 0),
    ("batch", 0.4, "2", "4Gi", 0),
    ("big", 0.1, "4", "16Gi", 0),
)
GPU_MIX: Mix = (
    ("l4-small", 0.3, "3", "12Gi", 1),
    ("l4-large", 0.15, "12", "48Gi", 1),
    ("l4-pair", 0.15, "16", "64Gi", 2),
    ("cpu", 0.4, "1", "2Gi", 0),
)


def _diverse() -> tuple[Mix, dict[str, dict[str, Any]]]:
    """Karpenter's scheduling-benchmark recipe (``hack/bench/karpenter_workload.py``) as Deployments:
    its five kinds (plain; a zone spread and a Node spread, ``maxSkew: 1``, over ``my-label``
    values drawn apart from the pods' own; a self-affinity over the zone; one a Node by
    anti-affinity, across all seven of that kind) times seven label values, each Deployment a size
    drawn from its CPUs and memories (seeded), each a 35th of the pods."""
    import random

    from hack.bench.karpenter_workload import CPUS, HOSTNAME, KINDS, LABEL_VALUES, MEMORIES

    rng = random.Random(42)
    mix: list[tuple[str, float, str, str, int]] = []
    extra: dict[str, dict[str, Any]] = {}
    share = 1 / (len(KINDS) * len(LABEL_VALUES))
    for kind in KINDS:
        for value in LABEL_VALUES:
            name = f"{kind}-{value}"
            mix.append((name, share, rng.choice(CPUS), rng.choice(MEMORIES), 0))
            labels = {"my-label": value}
            spec: dict[str, Any] = {}
            if kind in ("zone-spread", "hostname-spread"):
                key = ZONE if kind == "zone-spread" else HOSTNAME
                selector = {"matchLabels": {"my-label": rng.choice(LABEL_VALUES)}}
                spec["topologySpreadConstraints"] = [
                    {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}
                ]
            elif kind == "zone-affinity":
                labels = {"my-affinity": value}
                term = {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": ZONE}
                spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
            elif kind == "hostname-anti-affinity":
                labels = {"anti": "nginx"}
                term = {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": HOSTNAME}
                spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
            extra[name] = {"spec": spec, "labels": labels}
    return tuple(mix), extra


DIVERSE_MIX, _DIVERSE = _diverse()
MIXES = {"cpu": MIX, "gpu": GPU_MIX, "spread": MIX, "diverse": DIVERSE_MIX}
# what each Deployment of a workload adds to its pods' spec: ``spread`` is the CPU mix kept apart the
# ways users keep replicas apart, each counted by kube-scheduler over every Node, in flight or not
CONSTRAINTS: dict[str, dict[str, Obj]] = {
    "spread": {
        # even over the zones
        "web": {
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }
            ]
        },
        # even over the Nodes, within 2 of each other
        "batch": {
            "topologySpreadConstraints": [
                {
                    "maxSkew": 2,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "batch"}},
                }
            ]
        },
        # one a Node
        "big": {
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "big"}}}
                    ]
                }
            }
        },
    },
    "diverse": {name: extra["spec"] for name, extra in _DIVERSE.items()},
}
# labels a workload's Deployments add to their pods' own (``app: <name>``)
LABELS: dict[str, dict[str, dict[str, str]]] = {"diverse": {name: extra["labels"] for name, extra in _DIVERSE.items()}}
# the GPU workload's machines: joiner's built-in catalog's L4 family (its other GPU families aside)
GPU_FAMILIES = ("g6",)
GPU = "nvidia.com/gpu"
# what Karpenter's kwok provider keeps on every instance type (its kube-reserved)
KWOK_RESERVED = {"cpu": "100m", "memory": "10Mi"}
Obj = dict[str, Any]


def karpenter_cache() -> Path:
    root = os.environ.get("JOINER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "joiner"
    )
    return Path(root) / "karpenter-kwok" / VERSION


def karpenter_source() -> Path:
    """Karpenter's module, copied to a writable folder with its ``go`` line lowered (done once)."""
    src = karpenter_cache() / "src"
    if (src / "kwok" / "main.go").is_file():
        return src
    module_dir = module_source(MODULE, VERSION)
    partial = src.with_name("src.partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(module_dir, partial)
    for path in partial.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    go_mod = partial / "go.mod"
    go_mod.write_text(re.sub(r"(?m)^go \d+\.\d+(\.\d+)?$", f"go {_local_go()}", go_mod.read_text()))
    partial.rename(src)
    return src


def build_karpenter_kwok() -> tuple[Path, Path]:
    """(Karpenter's kwok controller binary, its source folder), built once and cached."""
    src = karpenter_source()
    binary = karpenter_cache() / f"kwok-go{_local_go()}"
    if binary.is_file():
        return binary, src
    print(f"building Karpenter {VERSION}'s kwok provider in {src} (a few minutes) ...", flush=True)
    started = time.monotonic()
    subprocess.run(
        ["nice", "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", f"{binary}.partial", "./kwok"],
        check=True,
        env={**_go_env(), "CGO_ENABLED": "0"},
        cwd=src,
    )
    Path(f"{binary}.partial").rename(binary)
    print(f"built {binary} in {time.monotonic() - started:.0f}s", flush=True)
    return binary, src


# --- the catalog ------------------------------------------------------------------------------


def joiner_catalog(karpenter_types: list[Obj]) -> Obj:
    """Karpenter's kwok instance types as a joiner catalog: same names, resources, zones, capacity
    types and prices; its kube-reserved as the overhead (so allocatable is the same on both sides)."""
    out: list[Obj] = []
    for it in karpenter_types:
        offerings = []
        for offering in it["offerings"]:
            reqs = {r["key"]: r["values"] for r in offering["Requirements"]}
            for zone in reqs[ZONE]:
                for capacity_type in reqs["karpenter.sh/capacity-type"]:
                    offerings.append(
                        {
                            "zone": zone,
                            "capacityType": capacity_type,
                            "price": offering["Price"],
                            "available": bool(offering.get("Available", True)),
                        }
                    )
        oses = it.get("operatingSystems") or ["linux"]
        labels = {INSTANCE_TYPE: it["name"], "kubernetes.io/arch": it["architecture"]}
        if len(oses) == 1:
            labels["kubernetes.io/os"] = oses[0]
        out.append(
            {
                "name": it["name"],
                "capacity": dict(it["resources"]),
                "overhead": dict(KWOK_RESERVED),
                "labels": labels,
                "offerings": offerings,
            }
        )
    return {"instanceTypes": out}


def karpenter_types(catalog: Obj, *, gpu_families: tuple[str, ...] = GPU_FAMILIES) -> list[Obj]:
    """A joiner catalog as a Karpenter kwok instance-types file (``INSTANCE_TYPES_FILE_PATH``): same
    names, capacity (GPUs included), architecture, zones, capacity types and prices. GPU machines
    only of ``gpu_families``; offerings marked unavailable are left out (Karpenter's kwok provider
    makes every offering it reads available)."""
    out: list[Obj] = []
    for it in catalog["instanceTypes"]:
        labels = it.get("labels") or {}
        family = labels.get("joiner.sh/instance-family") or it["name"].split(".", 1)[0]
        if GPU in it["capacity"] and family not in gpu_families:
            continue
        offerings = [
            {
                "Price": float(o["price"]),
                "Available": True,
                "Requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [o["capacityType"]]},
                    {"key": ZONE, "operator": "In", "values": [o["zone"]]},
                ],
            }
            for o in it["offerings"]
            if o.get("available", True) and o["capacityType"] in ("spot", "on-demand")
        ]
        if not offerings:
            continue
        out.append(
            {
                "name": it["name"],
                "offerings": offerings,
                "architecture": labels.get("kubernetes.io/arch", "amd64"),
                "operatingSystems": [labels.get("kubernetes.io/os", "linux")],
                "resources": dict(it["capacity"]),
            }
        )
    return out


def prices(catalog: Obj) -> dict[tuple[str, str, str], float]:
    """(instance type, zone, capacity type) -> $/h."""
    return {
        (it["name"], o["zone"], o["capacityType"]): float(o["price"])
        for it in catalog["instanceTypes"]
        for o in it["offerings"]
    }


def workloads(
    namespace: str,
    pods: int,
    mix: Mix = MIX,
    constraints: dict[str, Obj] | None = None,
    labels: dict[str, dict[str, str]] | None = None,
) -> list[Obj]:
    from tests.e2e.manifests import deployment

    out = []
    left = pods
    for i, (name, share, cpu, memory, gpus) in enumerate(mix):
        replicas = left if i == len(mix) - 1 else round(pods * share)
        left -= replicas
        dep = deployment(name, namespace, replicas=replicas, cpu=cpu, memory=memory, gpus=gpus)
        dep["spec"]["template"]["spec"].update((constraints or {}).get(name) or {})
        dep["spec"]["template"]["metadata"]["labels"].update((labels or {}).get(name) or {})
        out.append(dep)
    return out


# the label of the Node `system_node` makes: not bought by either side, and not counted as theirs
SYSTEM_NODE_LABEL = "race.joiner.sh/system"


def system_node(zone: str) -> Obj:
    """The Node every real cluster has before a burst comes: one of the node pool its own add-ons run
    on, tainted `CriticalAddonsOnly` (as EKS and GKE system pools are) so that no workload pod lands
    there. kwok plays it like the Nodes the controllers buy. Without it, a pod tried before any Node
    exists fails with "no nodes available", which kube-scheduler counts as an error: such a pod goes
    back on its back-off timer whatever happens, where a pod refused by a Node's taint waits for a
    Node whose taints it tolerates.

    ``zone``: one the catalog offers machines in, as a real cluster's system pool shares its zones.
    kube-scheduler counts a tainted Node's zone among a zone spread's domains (its default
    ``nodeTaintsPolicy: Ignore``), so a zone no machine can be bought in would hold every pod of
    such a spread at a skew it cannot fix."""
    name = "system-0"
    resources = {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                SYSTEM_NODE_LABEL: "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                ZONE: zone,
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": [{"key": "CriticalAddonsOnly", "value": "true", "effect": "NoSchedule"}]},
        "status": {"allocatable": resources, "capacity": resources},
    }


def log_agent(namespace: str) -> Obj:
    """A node agent as most clusters run one (logs, metrics): on every Node, tolerating no taint."""
    labels = {"app": "log-agent"}
    container = {"name": "agent", "image": "agent", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "log-agent", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }
