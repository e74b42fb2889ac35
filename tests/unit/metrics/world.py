"""A cluster cache fed by hand, for the metrics tests: NodePools, NodeClaims, Nodes and pods as the
watches would deliver them."""

from __future__ import annotations

from typing import Any

from api.v1.labels import (
    LABEL_CAPACITY_TYPE,
    LABEL_GANG,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
    RESOURCE_NVIDIA_GPU,
)
from controller.clock import FakeClock
from controller.state.cluster import ClusterState
from tests.unit import builders

Obj = dict[str, Any]


def new_cluster(clock: FakeClock | None = None) -> ClusterState:
    return ClusterState(source=None, clock=clock or FakeClock())  # type: ignore[arg-type]


def feed(cluster: ClusterState, *objs: Obj, etype: str = "ADDED") -> None:
    for obj in objs:
        cluster.informers[obj["kind"]]._apply(etype, obj)  # type: ignore[arg-type]


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
    """A gpu-1 Node in zone-a as the kwok provider makes it, of ``pool`` (None: not joiner's)."""
    labels = {LABEL_INSTANCE_TYPE: "gpu-1", LABEL_ZONE: "zone-a", LABEL_CAPACITY_TYPE: tier}
    if pool is not None:
        labels[LABEL_NODEPOOL] = pool
    room = allocatable or {"cpu": "7", "memory": "30Gi", "nvidia.com/gpu": "1"}
    return builders.node(name, provider_id=f"kwok://{name}", labels=labels, allocatable=room)


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
    """A pod in namespace ns, pending unless told, created at ``created``."""
    return builders.pod(
        name,
        namespace="ns",
        node=node_name,
        phase=phase,
        cpu=cpu,
        requests={RESOURCE_NVIDIA_GPU: str(gpus)} if gpus else None,
        gates=[LABEL_GANG] if gated else (),
        owner=("DaemonSet", "ds") if daemon else None,
        unschedulable=unschedulable,
        metadata={"uid": f"uid-{name}", "creationTimestamp": created},
    )
