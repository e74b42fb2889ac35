"""Pods, NodeClaims and records as the gang controller sees them, built in one line each."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from controller.clock import format_time
from controller.gang.decide import GangView
from controller.gang.planner import gang_toleration
from controller.gang.record import ADMITTED, PROVISIONING, Record
from controller.scheduling.instancetypes import parse_catalog
from controller.state.views import NodeClaimView, NodeView, PodView
from tests.unit import builders

Obj = dict[str, Any]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
GID = "ml.train"
KEY = "ml/train"


def member(
    name: str,
    *,
    gated: bool = True,
    record: Record | None = None,
    pinned: bool = False,
    created: datetime = T0,
    uid: str | None = None,
) -> Obj:
    annotations: dict[str, str] = {"joiner.sh/gang-size": "3"}
    if record is not None:
        annotations["joiner.sh/gang-state"] = record.to_json()
    spec: Obj = {"containers": [{"name": "c", "image": "x"}]}
    if pinned:
        spec["nodeSelector"] = {"joiner.sh/gang": GID}
        spec["tolerations"] = [gang_toleration(GID)]
    return builders.pod(
        name,
        namespace="ml",
        phase="Pending" if gated else "Running",
        labels={"joiner.sh/gang": "train"},
        annotations=annotations,
        gates=["joiner.sh/gang"] if gated else (),
        metadata={"uid": uid or f"uid-{name}", "creationTimestamp": format_time(created)},
        spec=spec,
    )


def claim(
    name: str,
    *,
    initialized: bool = False,
    deleting: bool = False,
    reason: str | None = None,
    admitted: bool | None = None,
    attempt: str = "a1",
    zone: str = "zone-a",
) -> Obj:
    annotations = {"joiner.sh/gang-attempt": attempt, "joiner.sh/gang-name": KEY}
    if reason:
        annotations["joiner.sh/termination-reason"] = reason
    conditions = [
        {"type": "Launched", "status": "True", "reason": "Launched", "lastTransitionTime": format_time(T0)},
        {
            "type": "Initialized",
            "status": "True" if initialized else "Unknown",
            "reason": "Initialized" if initialized else "AwaitingNode",
            "message": "" if initialized else "the Node has not joined yet",
            "lastTransitionTime": format_time(T0),
        },
    ]
    if admitted is not None:
        conditions.append(
            {
                "type": "GangAdmitted",
                "status": "True" if admitted else "False",
                "reason": "GangAdmitted" if admitted else "GangFinished",
                "lastTransitionTime": format_time(T0),
            }
        )
    meta: Obj = {
        "name": name,
        "labels": {
            "joiner.sh/gang": GID,
            "joiner.sh/nodepool": "gpu",
            "node.kubernetes.io/instance-type": "gpu-8",
            "topology.kubernetes.io/zone": zone,
            "joiner.sh/capacity-type": "on-demand",
        },
        "annotations": annotations,
        "resourceVersion": "7",
    }
    if deleting:
        meta["deletionTimestamp"] = format_time(T0)
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodeClaim",
        "metadata": meta,
        "spec": {},
        "status": {"conditions": conditions},
    }


def provisioning(
    *names: str, seq: int = 2, attempt: int = 1, id: str = "a1", deadline: timedelta = timedelta(minutes=15)
) -> Record:
    return Record(
        seq=seq,
        attempt=attempt,
        id=id,
        phase=PROVISIONING,
        nodeclaims=names,
        started=T0,
        deadline=T0 + deadline,
    )


def admitted(*names: str, seq: int = 3, id: str = "a1") -> Record:
    return Record(seq=seq, attempt=1, id=id, phase=ADMITTED, nodeclaims=names, started=T0, admitted_at=T0)


def view(
    gated: list[Obj],
    *,
    released: list[Obj] | None = None,
    claims: list[Obj] | None = None,
    pending: Record | None = None,
    admitted: Record | None = None,
    size: int | None = 3,
    seen: set[str] | None = None,
    policy: str = "restart-gang",
    strays: list[Obj] | None = None,
    written_seq: int = 0,
) -> GangView:
    return GangView(
        key=KEY,
        gid=GID,
        size=size,
        gated=tuple(PodView.of(p) for p in gated),
        released=tuple(PodView.of(p) for p in released or ()),
        claims={c["metadata"]["name"]: NodeClaimView.of(c) for c in claims or []},
        pending=pending,
        admitted=admitted,
        seen=frozenset(seen or ()),
        first_created=T0,
        member_loss_policy=policy,
        strays={n["metadata"]["name"]: NodeView.of(n) for n in strays or []},
        written_seq=written_seq,
    )


def node(name: str, *, taints: list[Obj] | None = None, deleting: bool = False) -> Obj:
    """A Node of the gang's, with its taint (and ``taints``)."""
    gang_taint = {"key": "joiner.sh/gang", "value": GID, "effect": "NoSchedule"}
    return builders.node(
        name,
        labels={"joiner.sh/gang": GID},
        taints=[gang_taint, *(taints or [])],
        metadata={"deletionTimestamp": format_time(T0)} if deleting else None,
    )


CATALOG = parse_catalog(
    {
        "instanceTypes": [
            {
                "name": "gpu-8",
                "capacity": {"cpu": "96", "memory": "768Gi", "nvidia.com/gpu": "8", "pods": "110"},
                "labels": {"joiner.sh/gpu-name": "H100", "joiner.sh/gpu-count": "8"},
                "offerings": [
                    {"zone": "zone-a", "capacityType": "on-demand", "price": 98.0},
                    {"zone": "zone-b", "capacityType": "on-demand", "price": 90.0},
                ],
            },
            {
                "name": "cpu-4",
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
                "offerings": [
                    {"zone": "zone-a", "capacityType": "on-demand", "price": 0.2},
                    {"zone": "zone-b", "capacityType": "on-demand", "price": 0.1},
                ],
            },
        ]
    }
)


def pool(
    name: str = "gpu", *, limits: dict[str, str] | None = None, gang: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}}}
    }
    if limits:
        spec["limits"] = limits
    if gang is not None:
        spec["gang"] = gang
    return {"apiVersion": "joiner.sh/v1", "kind": "NodePool", "metadata": {"name": name, "uid": "u"}, "spec": spec}


def gpu_member(name: str, *, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    pod = member(name, **kw)
    pod["spec"]["containers"] = [
        {"name": "c", "image": "x", "resources": {"requests": {"cpu": "8", "nvidia.com/gpu": str(gpus)}}}
    ]
    return pod
