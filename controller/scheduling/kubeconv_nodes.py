"""Kubernetes JSON and the validated API models -> the machines the solver places pods on. Pure.

* :func:`node_from_dict` -- a Node (+ the pods bound to it) -> :class:`ExistingNode`
* :func:`existing_nodes_from_dicts` -- Nodes + all Pods -> existing nodes with their pods
* :func:`nodeclaim_from_dict` -- an in-flight joiner.sh/v1 NodeClaim -> :class:`ExistingNode`
* :func:`nodepool_from_dict` -- a joiner.sh/v1 NodePool + instance types -> :class:`NodePoolTemplate`
  (validated by the API model, then read from it by :func:`nodepool_template`)
* :func:`pool_usage` -- capacity of a pool's nodes, for limits

The pods themselves are ``kubeconv.py``'s. Malformed input raises :class:`ConversionError` with
the field path in the message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from api.v1.common import Taint as ApiTaint
from api.v1.nodepool import NodePool
from api.v1.validation import InvalidObjectError, validate
from controller.scheduling.frozen import FrozenLabels
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.kubeconv import (
    TAINT_EFFECTS,
    ConversionError,
    Obj,
    _expressions,
    _list,
    _meta,
    _obj,
    _resources,
    _str_map,
    is_terminal,
    pod_from_dict,
)
from controller.scheduling.labels import (
    EPHEMERAL_TAINT_KEYS,
    KARPENTER_LABEL_ALIASES,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
)
from controller.scheduling.model import (
    ExistingNode,
    NodePoolTemplate,
    Pod,
)
from controller.scheduling.quantity import QuantityError, parse_quantity
from controller.scheduling.requirements import Requirement, RequirementError, Requirements
from controller.scheduling.resources import EMPTY, PODS, Resources, sum_resources
from controller.scheduling.taints import Taint

# --- nodes ------------------------------------------------------------------------------------


def _taints(value: Any, where: str) -> tuple[Taint, ...]:
    out = []
    for i, t in enumerate(_list(value, where)):
        if not isinstance(t, Mapping) or "effect" not in t:
            raise ConversionError(f"{where}[{i}]: a taint needs key and effect")
        if t["effect"] not in TAINT_EFFECTS:
            raise ConversionError(
                f"{where}[{i}].effect: must be one of {', '.join(TAINT_EFFECTS)}, got {t['effect']!r}"
            )
        out.append(Taint.from_dict(t))
    return tuple(out)


def node_from_dict(
    obj: Obj,
    *,
    pods: Sequence[Pod] = (),
    in_flight: bool = False,
    ignore_taint_keys: Iterable[str] = EPHEMERAL_TAINT_KEYS,
) -> ExistingNode:
    """Convert a Node. Taints whose key is in ``ignore_taint_keys`` (ephemeral start-up taints;
    add the NodePool's startup taints for nodes not yet initialized) are left out."""
    meta = _meta(obj)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ConversionError("Node: metadata.name is required")
    try:
        status = _obj(obj.get("status"), "status")
        spec = _obj(obj.get("spec"), "spec")
        capacity = _resources(status.get("capacity"), "status.capacity")
        allocatable = _resources(status.get("allocatable"), "status.allocatable") or capacity
        if PODS not in allocatable:
            allocatable = allocatable + Resources({PODS: 110_000})
        ignore = set(ignore_taint_keys)
        taints = tuple(t for t in _taints(spec.get("taints"), "spec.taints") if t.key not in ignore)
        return ExistingNode(
            name=name,
            allocatable=allocatable,
            labels=FrozenLabels(_str_map(meta.get("labels"), "metadata.labels")),
            taints=taints,
            pods=tuple(pods),
            unschedulable=bool(spec.get("unschedulable", False)),
            in_flight=in_flight,
            capacity=capacity or allocatable,
        )
    except ConversionError as err:
        raise ConversionError(f"Node {name}: {err}") from err


def existing_nodes_from_dicts(
    nodes: Iterable[Obj],
    pods: Iterable[Obj],
    *,
    ignore_taint_keys: Iterable[str] = EPHEMERAL_TAINT_KEYS,
) -> list[ExistingNode]:
    """Nodes with the (non-terminal) pods bound to them, found by ``spec.nodeName``."""
    by_node: dict[str, list[Pod]] = {}
    for p in pods:
        node_name = (p.get("spec") or {}).get("nodeName")
        if node_name and not is_terminal(p):
            by_node.setdefault(str(node_name), []).append(pod_from_dict(p, detect_gang=False))
    keys = tuple(ignore_taint_keys)
    out = []
    for n in nodes:
        name = str(_meta(n).get("name") or "")
        out.append(node_from_dict(n, pods=by_node.get(name, ()), ignore_taint_keys=keys))
    return out


def nodeclaim_from_dict(
    obj: Obj,
    *,
    instance_types: Sequence[InstanceType] = (),
    pods: Sequence[Pod] = (),
) -> ExistingNode | None:
    """An in-flight NodeClaim (launched, not yet a registered Node) as capacity.

    Allocatable comes from ``status.allocatable`` or from the instance type named by its
    ``node.kubernetes.io/instance-type`` label. Returns None when neither is known yet.
    Startup taints are left out (pods need not tolerate them).
    """
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    spec = _obj(obj.get("spec"), "spec")
    status = _obj(obj.get("status"), "status")
    labels = _str_map(meta.get("labels"), "metadata.labels")
    for expr in _expressions(spec.get("requirements"), "spec.requirements"):
        values = expr["values"]
        if expr["operator"] == "In" and len(values) == 1:
            labels.setdefault(expr["key"], values[0])
    allocatable = _resources(status.get("allocatable"), "status.allocatable")
    capacity = _resources(status.get("capacity"), "status.capacity")
    if not allocatable:
        it_name = labels.get(LABEL_INSTANCE_TYPE)
        it = next((t for t in instance_types if t.name == it_name), None)
        if it is None:
            return None
        allocatable = it.allocatable
        capacity = it.capacity
        labels = {**it.labels, **labels}
    startup = {t.key for t in _taints(spec.get("startupTaints"), "spec.startupTaints")}
    taints = tuple(
        t
        for t in _taints(spec.get("taints"), "spec.taints")
        if t.key not in startup and t.key not in EPHEMERAL_TAINT_KEYS
    )
    node_name = status.get("nodeName")
    return ExistingNode(
        name=str(node_name or name),
        allocatable=allocatable,
        labels=FrozenLabels(labels),
        taints=taints,
        pods=tuple(pods),
        in_flight=True,
        capacity=capacity or allocatable,
        node_pool=labels.get(LABEL_NODEPOOL),
    )


# --- node pools -------------------------------------------------------------------------------


def _model_taints(taints: Iterable[ApiTaint]) -> tuple[Taint, ...]:
    return tuple(Taint(key=t.key, effect=t.effect, value=t.value or "") for t in taints)


def nodepool_template(
    pool: NodePool, instance_types: Sequence[InstanceType], *, usage: Resources = EMPTY
) -> NodePoolTemplate:
    """A validated NodePool -> the solver's :class:`NodePoolTemplate`.

    Karpenter label keys (``karpenter.sh/capacity-type``) are mapped to joiner's. A limit of zero
    (``nvidia.com/gpu: "0"``) leaves no room at all: the instance types that have any of that
    resource are taken out of the pool (a resource list cannot hold a zero, so the solver's
    ``limits`` alone would read it as no limit).
    """
    tspec = pool.spec.template.spec
    try:
        requirements = Requirements(
            Requirement.new(
                KARPENTER_LABEL_ALIASES.get(req.key, req.key), req.operator, req.values, min_values=req.min_values
            )
            for req in tspec.requirements
        )
        # `nodes` counts machines, not a resource: the provisioner applies it to the plan (scheduling.bounds)
        resource_limits = {name: amount for name, amount in pool.spec.limits.items() if name != "nodes"}
        limits = Resources.parse(resource_limits)
        zero = [name for name, amount in resource_limits.items() if parse_quantity(amount) == 0]
    except (RequirementError, QuantityError) as err:
        raise ConversionError(f"NodePool {pool.name}: {err}") from err
    over_limit: list[InstanceType] = []
    if zero:
        kept = [it for it in instance_types if not any(it.capacity.get(name) > 0 for name in zero)]
        over_limit = [it for it in instance_types if any(it.capacity.get(name) > 0 for name in zero)]
        instance_types = kept
    return NodePoolTemplate(
        name=pool.name,
        instance_types=tuple(instance_types),
        weight=pool.spec.weight or 0,
        requirements=requirements,
        labels=FrozenLabels(pool.spec.template.metadata.labels),
        taints=_model_taints(tspec.taints),
        startup_taints=_model_taints(tspec.startup_taints),
        limits=limits,
        usage=usage,
        node_class=tspec.node_class_ref.name or None,
        zero_limits=tuple(sorted(zero)),
        over_limit=tuple(over_limit),
    )


def nodepool_from_dict(
    obj: Obj | NodePool, instance_types: Sequence[InstanceType], *, usage: Resources = EMPTY
) -> NodePoolTemplate:
    """Convert a joiner.sh/v1 NodePool (a manifest dict, or the validated model).

    A dict is validated by the API model (the rules the CRD enforces) and read from it; an invalid
    one raises :class:`ConversionError` naming the pool and every bad field.
    """
    if isinstance(obj, NodePool):
        return nodepool_template(obj, instance_types, usage=usage)
    name = _meta(obj).get("name")
    if not isinstance(name, str) or not name:
        raise ConversionError("NodePool: metadata.name is required")
    try:
        pool = validate(NodePool, obj)
    except InvalidObjectError as err:
        raise ConversionError(f"NodePool {name}: " + "; ".join(str(e) for e in err.errors)) from err
    return nodepool_template(pool, instance_types, usage=usage)


def pool_usage(pool: str, nodes: Iterable[ExistingNode]) -> Resources:
    """Total capacity of the nodes (registered and in flight) that belong to ``pool``."""
    return sum_resources(
        (n.capacity if n.capacity is not None else n.allocatable) for n in nodes if n.node_pool == pool
    )
