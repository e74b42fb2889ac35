"""A cluster cache fed by hand, for the metrics tests: NodePools, NodeClaims, Nodes and pods as the
watches would deliver them."""

from __future__ import annotations

from typing import Any

from controller.clock import FakeClock
from controller.state.cluster import ClusterState

Obj = dict[str, Any]


def new_cluster(clock: FakeClock | None = None) -> ClusterState:
    return ClusterState(source=None, clock=clock or FakeClock())  # type: ignore[arg-type]


def feed(cluster: ClusterState, *objs: Obj, etype: str = "ADDED") -> None:
    for obj in objs:
        cluster.informers[obj["kind"]]._apply(etype, obj)  # type: ignore[arg-type]


def nodepool(name: str, *, limits: Obj | None = None) -> Obj:
    spec: Obj = {"template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "d"}}}}
    if limits is not None:
        spec["limits"] = limits
    return {"apiVersion": "joiner.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def nodeclaim(
    name: str,
    *,
    pool: str,
    tier: str,
    capacity: Obj,
    price: str = "1.0",
    launched: bool = True,
    deleting: bool = False,
) -> Obj:
    meta: Obj = {
        "name": name,
        "labels": {"joiner.sh/nodepool": pool, "joiner.sh/capacity-type": tier},
        "annotations": {"joiner.sh/planned-price": price},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    conditions = [{"type": "Launched", "status": "True" if launched else "False"}]
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodeClaim",
        "metadata": meta,
        "spec": {},
        "status": {"providerID": f"kwok://{name}", "capacity": capacity, "conditions": conditions},
    }


def node(name: str, *, pool: str | None, tier: str = "on-demand", allocatable: Obj | None = None) -> Obj:
    labels: Obj = {
        "node.kubernetes.io/instance-type": "gpu-1",
        "topology.kubernetes.io/zone": "zone-a",
        "joiner.sh/capacity-type": tier,
    }
    if pool is not None:
        labels["joiner.sh/nodepool"] = pool
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": f"kwok://{name}"},
        "status": {"allocatable": allocatable or {"cpu": "7", "memory": "30Gi", "nvidia.com/gpu": "1"}},
    }


def pod(
    name: str,
    *,
    cpu: str = "1",
    gpus: int = 0,
    node_name: str | None = None,
    phase: str = "Pending",
    created: str = "2026-11-23T00:00:00Z",
    unschedulable: bool = False,
    gated: bool = False,
    daemon: bool = False,
) -> Obj:
    requests: Obj = {"cpu": cpu}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    spec: Obj = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if node_name:
        spec["nodeName"] = node_name
    if gated:
        spec["schedulingGates"] = [{"name": "joiner.sh/gang"}]
    status: Obj = {"phase": phase}
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    meta: Obj = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "creationTimestamp": created}
    if daemon:
        meta["ownerReferences"] = [{"kind": "DaemonSet", "name": "ds", "apiVersion": "apps/v1", "uid": "d"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
