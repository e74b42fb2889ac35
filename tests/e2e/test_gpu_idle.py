"""Idle GPUs, as the operator of a GPU cluster sees them: joiner reads DCGM utilization from a
real Prometheus, marks the NodeClaims whose GPUs sit idle, and consolidation reclaims only the
pods that opted in."""

from __future__ import annotations

import uuid
from typing import Any

from tests.e2e.harness import Cluster, eventually
from tests.e2e.manifests import condition, expect_event, expect_pods_running, nodeclaims, nodeclass, nodepool, pod, req
from tests.e2e.prometheus import DCGMExporter, Prometheus, dcgm

__all__ = ["dcgm"]

Obj = dict[str, Any]
GPU_NAME = "joiner.sh/gpu-name"
NODEPOOL = "joiner.sh/nodepool"
RECLAIM = "joiner.sh/idle-gpu-reclaim"


def _claim_of_node(cluster: Cluster, node: str) -> Obj | None:
    return next((c for c in nodeclaims(cluster) if (c.get("status") or {}).get("nodeName") == node), None)


def test_idle_gpus_are_marked_and_only_opted_in_pods_are_reclaimed(
    cluster: Cluster, start_joiner: Any, dcgm: tuple[DCGMExporter, Prometheus]
) -> None:
    exporter, prom = dcgm
    ns = cluster.create_namespace(f"idle-{uuid.uuid4().hex[:6]}")
    pool = nodepool("l4", requirements=[req(GPU_NAME, "In", "L4")])
    pool["spec"]["disruption"] = {"consolidateAfter": "5s", "budgets": [{"nodes": "100%"}]}
    cluster.apply([nodeclass(), pool])
    notebook = pod("notebook", ns, cpu="3", memory="12Gi", gpus=1)
    notebook["metadata"]["annotations"] = {RECLAIM: "true"}
    session = pod("session", ns, cpu="3", memory="12Gi", gpus=1)  # a bare pod that did not opt in
    cluster.apply([notebook, session])
    joiner = start_joiner(
        prometheus_url=prom.url,
        gpu_idle_window="6",
        gpu_idle_poll="1",
        disruption_poll_interval="1",
        disruption_validation_delay="1",
    )
    running = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in expect_pods_running(cluster, ns, 2)}
    assert running["notebook"] != running["session"]  # one L4 each
    exporter.gpus = {running["notebook"]: [2.0], running["session"]: [4.0]}

    def marked(node: str) -> Obj | None:
        claim = _claim_of_node(cluster, node)
        cond = condition(claim, "GPUIdle") if claim is not None else None
        return cond if cond is not None and cond["status"] == "True" else None

    idle = eventually(lambda: marked(running["session"]), timeout=90, what="GPUIdle=True on the session's NodeClaim")
    assert "below 20% utilization" in idle["message"]
    claim = _claim_of_node(cluster, running["session"])
    assert claim is not None
    expect_event(cluster, namespace="default", name=claim["metadata"]["name"], reason="GPUIdle")

    # the notebook opted in: its node goes, and the notebook with it; the session keeps its node
    eventually(
        lambda: not any(p["metadata"]["name"] == "notebook" for p in cluster.items("pods", namespace=ns)),
        timeout=90,
        what="the opted-in notebook reclaimed",
    )
    eventually(lambda: running["notebook"] not in {n["metadata"]["name"] for n in cluster.items("nodes")}, timeout=90)
    blocked = expect_event(cluster, namespace="default", name=claim["metadata"]["name"], reason="DisruptionBlocked")
    assert "no controller" in blocked["message"]
    assert cluster.get("pod", "session", namespace=ns)["status"]["phase"] == "Running"
    eventually(
        lambda: joiner.metric("joiner_gpu_idle_nodes", nodepool="l4") == 1, timeout=10, what="one idle node left"
    )
    assert joiner.metric("joiner_gpu_idle_marks_total", nodepool="l4") >= 2

    # the session's GPU gets busy: the mark goes
    exporter.gpus = {running["session"]: [93.0]}

    def busy() -> Obj | None:
        current = _claim_of_node(cluster, running["session"])
        cond = condition(current, "GPUIdle") if current is not None else None
        return cond if cond is not None and cond["status"] == "False" else None

    cleared = eventually(busy, timeout=60, what="GPUIdle=False once the GPU is used")
    assert cleared["reason"] == "GPUBusy"
    assert prom.query(
        'DCGM_FI_DEV_GPU_UTIL{{Hostname="{}"}}'.format(running["session"])
    )  # the data came from Prometheus
