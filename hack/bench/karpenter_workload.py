"""Karpenter's scheduling-benchmark workload, rebuilt as joiner inputs (our code, their recipe).

Karpenter's ``scheduling_benchmark_test.go`` (v1.15.0) solves "diverse" pods against 400 fake
instance types in one NodePool. This module builds the same mix so joiner can be measured on it:

* **pods** (``count`` in five equal parts, the remainder generic), each requesting a CPU drawn from
  100m/250m/500m/1/1.5 and a memory from 100Mi/256Mi/512Mi/1Gi/2Gi/4Gi, all in ``default``:
  generic pods labelled ``my-label: <a..g>``; zone-spread pods (same label, and a
  ``maxSkew: 1`` ``DoNotSchedule`` zone spread over ``my-label: <a..g>``, drawn independently, so
  a pod need not match its own selector); hostname-spread pods (the same over the hostname);
  zone self-affinity pods (``my-affinity: <a..g>``, required pod affinity to their own label over
  the zone); hostname anti-affinity pods (all ``app: nginx``, anti-affine to each other).
* **instance types** ``fake-it-0`` .. ``fake-it-399``: type *i* has i+1 CPUs, 2(i+1) GiB, 10(i+1)
  pods, 100m CPU and 10Mi reserved, labels arch/os/size/special/integer as the fake cloud
  provider sets them, and five offerings -- spot in test-zone-1 and -2, on-demand in test-zone-1,
  -2 and -3 -- all at 0.1 $/h per CPU plus 0.1 $/h per 10^9 bytes of memory.
* **one NodePool** ``default`` with no requirements, no taints, no daemonsets.

Karpenter draws its random values from Go's ``math/rand`` seeded 42; this uses Python's ``random``
with the same seed, so the distribution is the same, not the individual draws.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from controller.scheduling import InstanceType, NodePoolTemplate, Offering, Pod, Resources, catalog_to_dict
from controller.scheduling.kubeconv import pod_from_dict

TYPES = 400
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
OFFERINGS = (
    ("test-zone-1", "spot"),
    ("test-zone-2", "spot"),
    ("test-zone-1", "on-demand"),
    ("test-zone-2", "on-demand"),
    ("test-zone-3", "on-demand"),
)
LABEL_VALUES = ("a", "b", "c", "d", "e", "f", "g")
CPUS = ("100m", "250m", "500m", "1000m", "1500m")
MEMORIES = ("100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi")
KINDS = ("generic", "zone-spread", "hostname-spread", "zone-affinity", "hostname-anti-affinity")
POOL = "default"


def _price(cpus: int, memory_bytes: int) -> float:
    return 0.1 * cpus + 0.1 * memory_bytes / 1e9


def karpenter_catalog(total: int = TYPES) -> tuple[InstanceType, ...]:
    """The fake cloud provider's ``total`` instance types, with their offerings and prices."""
    out = []
    for i in range(total):
        cpus = i + 1
        memory = 2 * cpus * 2**30
        large = cpus > 4 and memory > 8 * 2**30
        labels = {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "size": "large" if large else "small",
            "integer": str(cpus),
        }
        if large:
            labels["special"] = "optional"
        price = round(_price(cpus, memory), 6)
        out.append(
            InstanceType(
                name=f"fake-it-{i}",
                capacity=Resources.parse({"cpu": str(cpus), "memory": f"{2 * cpus}Gi", "pods": str(10 * cpus)}),
                overhead=Resources.parse({"cpu": "100m", "memory": "10Mi"}),
                labels=labels,
                offerings=tuple(Offering(zone=z, capacity_type=ct, price=price) for z, ct in OFFERINGS),
            )
        )
    return tuple(out)


def karpenter_pool(catalog: tuple[InstanceType, ...]) -> NodePoolTemplate:
    return NodePoolTemplate(name=POOL, instance_types=catalog)


def nodepool_document() -> dict[str, Any]:
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": POOL},
        "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}}}
        },
    }


def _kinds(count: int) -> Iterator[str]:
    part = count // len(KINDS)
    for kind in KINDS:
        yield from [kind] * part
    yield from ["generic"] * (count - part * len(KINDS))


def karpenter_pod_documents(count: int, *, seed: int = 42) -> list[dict[str, Any]]:
    """``count`` pending Pod documents in the benchmark's mix and order."""
    rng = random.Random(seed)
    docs = []
    for i, kind in enumerate(_kinds(count)):
        spec: dict[str, Any] = {}
        if kind == "zone-affinity":
            labels = {"my-affinity": rng.choice(LABEL_VALUES)}
            term = {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": ZONE}
            spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        elif kind == "hostname-anti-affinity":
            labels = {"app": "nginx"}
            term = {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": HOSTNAME}
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        else:
            labels = {"my-label": rng.choice(LABEL_VALUES)}
            if kind != "generic":
                spec["topologySpreadConstraints"] = [
                    {
                        "maxSkew": 1,
                        "topologyKey": ZONE if kind == "zone-spread" else HOSTNAME,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"my-label": rng.choice(LABEL_VALUES)}},
                    }
                ]
        requests = {"cpu": rng.choice(CPUS), "memory": rng.choice(MEMORIES)}
        spec["containers"] = [{"name": "app", "image": "registry.k8s.io/pause", "resources": {"requests": requests}}]
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{kind}-{i}", "namespace": "default", "labels": labels},
                "spec": spec,
            }
        )
    return docs


def karpenter_pods(count: int, *, seed: int = 42) -> list[Pod]:
    return [pod_from_dict(d) for d in karpenter_pod_documents(count, seed=seed)]


_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _KubectlDumper(_Dumper):  # type: ignore[valid-type,misc]
    """Writes as kubectl (go-yaml) does: a string that would read as another type in double quotes
    (``resourceVersion: "10000"``), one plain YAML cannot hold in single quotes, folded at 80."""


def _kubectl_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    tag = dumper.resolve(yaml.ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
    style = '"' if tag != "tag:yaml.org,2002:str" else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_KubectlDumper.add_representer(str, _kubectl_str)


def kubectl_pod(doc: dict[str, Any], index: int, rng: random.Random) -> dict[str, Any]:
    """The pending pod ``doc`` as the apiserver returns it: spec defaults, the service account's
    projected volume, the default tolerations, owner, uid, resourceVersion, an Unschedulable status."""
    name = doc["metadata"]["name"]
    suffix = hashlib.sha1(name.encode()).hexdigest()[:5]
    volume = f"kube-api-access-{suffix}"
    spec = doc["spec"]
    mount = {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": volume, "readOnly": True}
    containers = [
        {
            **c,
            "imagePullPolicy": "Always",
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "volumeMounts": [mount],
        }
        for c in spec["containers"]
    ]
    tolerations = [
        {"effect": "NoExecute", "key": f"node.kubernetes.io/{taint}", "operator": "Exists", "tolerationSeconds": 300}
        for taint in ("not-ready", "unreachable")
    ]
    namespace = {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}
    sources = [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
        {"downwardAPI": {"items": [namespace]}},
    ]
    full = {
        **spec,
        "containers": containers,
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": tolerations,
        "volumes": [{"name": volume, "projected": {"defaultMode": 420, "sources": sources}}],
    }
    labels = doc["metadata"].get("labels") or {}
    owner = f"{next(iter(labels.values()), 'pods')}-7d9c5b8f6"
    meta = {
        **doc["metadata"],
        "creationTimestamp": "2026-11-26T10:00:00Z",
        "generateName": owner + "-",
        "labels": {**labels, "pod-template-hash": "7d9c5b8f6"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "blockOwnerDeletion": True,
                "controller": True,
                "kind": "ReplicaSet",
                "name": owner,
                "uid": str(uuid.UUID(int=rng.getrandbits(128))),
            }
        ],
        "resourceVersion": str(10000 + index),
        "uid": str(uuid.UUID(int=rng.getrandbits(128))),
    }
    message = (
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: "
        "3 No preemption victims found for incoming pod."
    )
    condition = {
        "lastProbeTime": None,
        "lastTransitionTime": "2026-11-26T10:00:01Z",
        "message": message,
        "reason": "Unschedulable",
        "status": "False",
        "type": "PodScheduled",
    }
    status = {"conditions": [condition], "phase": "Pending", "qosClass": "Burstable"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": full, "status": status}


def kubectl_pod_list(count: int, *, seed: int = 42) -> str:
    """What ``kubectl get pods -o yaml`` prints for the benchmark's ``count`` pods, all pending: a
    ``kind: List``, keys sorted, go-yaml's quoting (about 2.5 kB a pod against 0.4 kB for the plain
    documents)."""
    rng = random.Random(1)
    items = [kubectl_pod(doc, i, rng) for i, doc in enumerate(karpenter_pod_documents(count, seed=seed))]
    listed = {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
    out: str = yaml.dump(listed, Dumper=_KubectlDumper, sort_keys=True, default_flow_style=False)
    return out


def write_scenario(directory: Path, count: int, *, seed: int = 42, kubectl: bool = False) -> tuple[Path, Path]:
    """Write ``scenario-<count>.yaml`` (the NodePool and the pods) and ``catalog-karpenter.json``;
    ``kubectl``: the pods as ``kubectl get pods -o yaml`` prints them (:func:`kubectl_pod_list`)."""
    directory.mkdir(parents=True, exist_ok=True)
    scenario = directory / f"scenario-{count}.yaml"
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    if kubectl:
        scenario.write_text(
            yaml.dump(nodepool_document(), Dumper=dumper) + "---\n" + kubectl_pod_list(count, seed=seed)
        )
    else:
        docs = [nodepool_document(), *karpenter_pod_documents(count, seed=seed)]
        scenario.write_text(yaml.dump_all(docs, Dumper=dumper, sort_keys=False))
    catalog = directory / "catalog-karpenter.json"
    catalog.write_text(json.dumps(catalog_to_dict(karpenter_catalog())))
    return scenario, catalog
