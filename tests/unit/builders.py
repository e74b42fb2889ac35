"""Builders of the objects unit tests feed joiner, as the apiserver would send them (JSON dicts),
in the spirit of Karpenter's ``pkg/test``: a pod, a Node, a NodeClaim, a NodePool and a gang's
members, each with the fields a test names and sensible defaults for the rest; ``*_view`` wraps
one in the view the cache would make. The solver's own types (``Pod``, ``InstanceType``,
``NodePoolTemplate``) are built by ``tests/unit/scheduling/builders.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from api.v1.labels import LABEL_GANG
from controller.state.views import NodeClaimView, NodePoolView, NodeView, PodView

Obj = dict[str, Any]
NODECLASS_REF: Obj = {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}


def pod(
    name: str = "p",
    *,
    namespace: str = "default",
    node: str | None = None,
    phase: str = "Running",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    gates: Sequence[str] = (),
    owner: tuple[str, str] | None = None,
    cpu: str | None = None,
    requests: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    metadata: Mapping[str, Any] | None = None,
    spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
) -> Obj:
    """A pod: bound to ``node`` when given, owned by ``owner`` (kind, name) as its controller,
    gated by ``gates``, one container asking for ``cpu`` and the other ``requests``, marked
    ``PodScheduled=False/Unschedulable`` (as kube-scheduler does) when ``unschedulable``.
    ``metadata``, ``spec`` and ``status`` are merged over what the other arguments make."""
    meta: Obj = {"name": name, "namespace": namespace}
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        kind, owner_name = owner
        meta["ownerReferences"] = [{"kind": kind, "name": owner_name, "uid": owner_name, "controller": True}]
    body: Obj = {}
    if node is not None:
        body["nodeName"] = node
    if gates:
        body["schedulingGates"] = [{"name": g} for g in gates]
    asks = {**({"cpu": cpu} if cpu is not None else {}), **(requests or {})}
    if asks:
        body["containers"] = [{"name": "c", "image": "x", "resources": {"requests": asks}}]
    state: Obj = {"phase": phase}
    if unschedulable:
        state["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**meta, **(metadata or {})},
        "spec": {**body, **(spec or {})},
        "status": {**state, **(status or {})},
    }


def pod_view(name: str = "p", **kw: Any) -> PodView:
    return PodView.of(pod(name, **kw))


def gang(
    gid: str, size: int, *, namespace: str = "default", cpu: str = "1", gated: bool = True, **kw: Any
) -> list[Obj]:
    """A gang's members ``<gid>-0`` ... by the joiner.sh/gang label, pending, each with the gate."""
    labels = {LABEL_GANG: gid, **kw.pop("labels", {})}
    annotations = {"joiner.sh/gang-size": str(size), **kw.pop("annotations", {})}
    return [
        pod(
            f"{gid}-{i}",
            namespace=namespace,
            phase="Pending",
            labels=labels,
            annotations=annotations,
            gates=[LABEL_GANG] if gated else [],
            cpu=cpu,
            **kw,
        )
        for i in range(size)
    ]


def node(
    name: str = "n1",
    *,
    provider_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
    ready: bool = True,
    ready_since: str | None = None,
    taints: Sequence[Obj] = (),
    metadata: Mapping[str, Any] | None = None,
) -> Obj:
    """A Node with its allocatable (4 CPUs, 16Gi, 110 pods unless told) and Ready condition (whose
    lastTransitionTime is ``ready_since`` when given); ``metadata`` is merged over the name and labels."""
    room = dict(allocatable or {"cpu": "4", "memory": "16Gi", "pods": "110"})
    spec: Obj = {"taints": list(taints)} if taints else {}
    if provider_id is not None:
        spec["providerID"] = provider_id
    ready_condition: Obj = {"type": "Ready", "status": "True" if ready else "False"}
    if ready_since is not None:
        ready_condition["lastTransitionTime"] = ready_since
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {}), **(metadata or {})},
        "spec": spec,
        "status": {"capacity": room, "allocatable": room, "conditions": [ready_condition]},
    }


def node_view(name: str = "n1", **kw: Any) -> NodeView:
    return NodeView.of(node(name, **kw))


def nodepool(
    name: str = "default", *, nodeclass: str = "default", template: Mapping[str, Any] | None = None, **spec: Any
) -> Obj:
    """A joiner.sh/v1 NodePool on the KWOKNodeClass ``nodeclass``; ``template`` fields are added to
    its template's spec and ``spec`` fields to its spec, as given."""
    ref = {**NODECLASS_REF, "name": nodeclass}
    body: Obj = {"template": {"spec": {"nodeClassRef": ref, **(template or {})}}, **spec}
    return {"apiVersion": "joiner.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": body}


def nodepool_view(name: str = "default", **spec: Any) -> NodePoolView:
    return NodePoolView.of(nodepool(name, **spec))


def nodeclaim(
    name: str = "c1",
    *,
    pool: str = "default",
    labels: Mapping[str, str] | None = None,
    requests: Mapping[str, str] | None = None,
    provider_id: str | None = None,
    conditions: Sequence[Obj] = (),
) -> Obj:
    """A joiner.sh/v1 NodeClaim of ``pool``; with ``provider_id`` it has launched."""
    status: Obj = {"conditions": list(conditions)}
    if provider_id is not None:
        status["providerID"] = provider_id
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"joiner.sh/nodepool": pool, **(labels or {})}},
        "spec": {
            "nodeClassRef": dict(NODECLASS_REF),
            "requirements": [],
            "resources": {"requests": dict(requests or {})},
        },
        "status": status,
    }


def nodeclaim_view(name: str = "c1", **kw: Any) -> NodeClaimView:
    return NodeClaimView.of(nodeclaim(name, **kw))
