"""Builders for the objects users apply, and expectations that read what they see with kubectl."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.harness import ROOT, Cluster, eventually

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
CATALOG = ROOT / "controller" / "cloudprovider" / "kwok" / "catalog.json"


def nodeclass(name: str = "default", **spec: Any) -> Obj:
    return {"apiVersion": "joiner.sh/v1", "kind": "KWOKNodeClass", "metadata": {"name": name}, "spec": spec}


def nodepool(
    name: str,
    *,
    requirements: list[Obj] | None = None,
    taints: list[Obj] | None = None,
    limits: dict[str, str] | None = None,
    weight: int | None = None,
    nodeclass_name: str = "default",
    labels: dict[str, str] | None = None,
) -> Obj:
    spec: Obj = {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": nodeclass_name},
                "requirements": requirements or [],
            }
        },
    }
    if labels:
        spec["template"]["metadata"] = {"labels": labels}
    if taints:
        spec["template"]["spec"]["taints"] = taints
    if limits:
        spec["limits"] = limits
    if weight is not None:
        spec["weight"] = weight
    return {"apiVersion": "joiner.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def req(key: str, operator: str, *values: str) -> Obj:
    out: Obj = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


def pod(
    name: str,
    namespace: str,
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    gpus: int = 0,
    node_selector: dict[str, str] | None = None,
    tolerations: list[Obj] | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    requests = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU] = limits[GPU] = str(gpus)
    spec: Obj = {
        "containers": [
            {
                "name": "main",
                "image": "example.com/app:1",
                "resources": {"requests": requests, "limits": limits},
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations is not None:
        spec["tolerations"] = tolerations
    elif gpus:
        spec["tolerations"] = [GPU_TOLERATION]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": name}},
        "spec": spec,
    }


def deployment(name: str, namespace: str, *, replicas: int, **pod_args: Any) -> Obj:
    template = pod(name, namespace, **pod_args)
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": template["spec"]},
        },
    }


# --- what a user sees -------------------------------------------------------------------------


def nodeclaims(cluster: Cluster) -> list[Obj]:
    return cluster.items("nodeclaims.joiner.sh")


def condition(obj: Obj, ctype: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def is_true(obj: Obj, ctype: str) -> bool:
    return (condition(obj, ctype) or {}).get("status") == "True"


def expect_pods_running(cluster: Cluster, namespace: str, count: int, *, timeout: float = 120) -> list[Obj]:
    def probe() -> list[Obj] | None:
        pods = cluster.items("pods", namespace=namespace)
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return running if len(running) == count and len(pods) == count else None

    return eventually(probe, timeout=timeout, interval=1.0, what=f"{count} pods Running in {namespace}")


def expect_event(cluster: Cluster, *, namespace: str, name: str, reason: str, timeout: float = 60) -> Obj:
    def probe() -> Obj | None:
        events = cluster.items("events", namespace=namespace)
        for ev in events:
            if ev["involvedObject"].get("name") == name and ev.get("reason") == reason:
                return ev
        return None

    return eventually(probe, timeout=timeout, what=f"event {reason} on {namespace}/{name}")


def expect_nodeclaims_initialized(cluster: Cluster, count: int, *, timeout: float = 120) -> list[Obj]:
    def probe() -> list[Obj] | None:
        claims = nodeclaims(cluster)
        ready = [c for c in claims if is_true(c, "Initialized")]
        return ready if len(ready) == count and len(claims) == count else None

    return eventually(probe, timeout=timeout, interval=1.0, what=f"{count} NodeClaims Initialized")


def node_of(cluster: Cluster, namespace: str, pod_name: str) -> Obj:
    bound = cluster.get("pod", pod_name, namespace=namespace)
    return cluster.get("node", bound["spec"]["nodeName"])


def catalog() -> list[Obj]:
    data: list[Obj] = json.loads(Path(CATALOG).read_text())["instanceTypes"]
    return data


def cheapest_offering(predicate: Any) -> tuple[str, float]:
    """The cheapest available (instance type, price) in the built-in catalog whose type passes `predicate`."""
    best: tuple[str, float] | None = None
    for it in catalog():
        if not predicate(it):
            continue
        for off in it["offerings"]:
            if off.get("available", True) and (best is None or float(off["price"]) < best[1]):
                best = (it["name"], float(off["price"]))
    assert best is not None, "no instance type in the catalog matches"
    return best


def offline_plan(setup: list[Obj], workloads: list[Obj]) -> Obj:
    """`joiner plan -o json` for these NodePools and the pods of these Deployments (Pods as they are)."""
    docs = list(setup)
    for w in workloads:
        if w["kind"] != "Deployment":
            docs.append(w)
            continue
        template = w["spec"]["template"]
        for i in range(w["spec"]["replicas"]):
            meta = {
                "name": f"{w['metadata']['name']}-{i}",
                "namespace": w["metadata"]["namespace"],
                "labels": template["metadata"]["labels"],
            }
            docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]})
    out = subprocess.run(
        [str(Path(sys.executable).parent / "joiner"), "plan", "-f", "-", "-o", "json"],
        input="\n---\n".join(json.dumps(d) for d in docs),
        capture_output=True,
        text=True,
        check=True,
    )
    result: Obj = json.loads(out.stdout)
    return result


def spot_warning(instance_id: str, *, region: str) -> str:
    """The EventBridge message AWS sends to the interruption queue two minutes before it reclaims a
    spot instance (detail-type "EC2 Spot Instance Interruption Warning")."""
    return json.dumps(
        {
            "version": "0",
            "id": str(uuid.uuid4()),
            "source": "aws.ec2",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "region": region,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )
