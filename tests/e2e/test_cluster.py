"""The local KWOK cluster behaves like the clusters joiner is built for."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.e2e.harness import Cluster, eventually


def _fake_node(name: str, *, cpu: str = "8", memory: str = "32Gi", gpus: int = 0) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
        },
        "spec": {},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def _pod(name: str, ns: str, *, cpu: str = "1", gpus: int = 0, gates: list[str] | None = None) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu}
    limits: dict[str, str] = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": limits}}],
    }
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def _condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def _ns(cluster: Cluster) -> str:
    return cluster.create_namespace(f"e2e-{uuid.uuid4().hex[:8]}")


def test_versions_are_the_pinned_ones(cluster: Cluster) -> None:
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"].startswith("v1.36.")
    assert version["clientVersion"]["gitVersion"] == version["serverVersion"]["gitVersion"]


def test_fake_node_becomes_ready_and_its_pods_run(cluster: Cluster) -> None:
    ns = _ns(cluster)
    node = f"kwok-{uuid.uuid4().hex[:6]}"
    cluster.apply(_fake_node(node, gpus=8))
    eventually(
        lambda: (_condition(cluster.get("node", node), "Ready") or {}).get("status") == "True",
        what=f"node {node} Ready",
    )
    cluster.apply(_pod("trainer", ns, gpus=1))
    pod = eventually(
        lambda: (p := cluster.get("pod", "trainer", namespace=ns))["status"].get("phase") == "Running" and p,
        what="pod Running",
    )
    assert pod["spec"]["nodeName"] == node


def test_scheduler_marks_pods_it_cannot_place_unschedulable(cluster: Cluster) -> None:
    ns = _ns(cluster)
    cluster.apply(_pod("too-big", ns, gpus=64))
    cond = eventually(
        lambda: _condition(cluster.get("pod", "too-big", namespace=ns), "PodScheduled"),
        what="PodScheduled condition",
    )
    assert cond["status"] == "False"
    assert cond["reason"] == "Unschedulable"


def test_scheduling_gates_are_honoured(cluster: Cluster) -> None:
    ns = _ns(cluster)
    node = f"kwok-{uuid.uuid4().hex[:6]}"
    cluster.apply(_fake_node(node))
    eventually(
        lambda: (_condition(cluster.get("node", node), "Ready") or {}).get("status") == "True",
        what=f"node {node} Ready",
    )
    cluster.apply(_pod("gated", ns, gates=["joiner.sh/gang"]))
    cond = eventually(
        lambda: _condition(cluster.get("pod", "gated", namespace=ns), "PodScheduled"), what="gated condition"
    )
    assert cond["reason"] == "SchedulingGated"
    assert not cluster.get("pod", "gated", namespace=ns)["spec"].get("nodeName")
    cluster.kubectl(
        "patch",
        "pod",
        "gated",
        "-n",
        ns,
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/spec/schedulingGates"}]',
    )
    eventually(
        lambda: cluster.get("pod", "gated", namespace=ns)["status"].get("phase") == "Running",
        what="ungated pod Running",
    )
