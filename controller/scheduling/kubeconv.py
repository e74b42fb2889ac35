"""Kubernetes JSON (plain dicts, as the apiserver returns them) -> solver inputs. Pure.

* :func:`pod_from_dict` -- a Pod (pending or bound) -> :class:`Pod`
* :func:`node_from_dict` -- a Node (+ the pods bound to it) -> :class:`ExistingNode`
* :func:`existing_nodes_from_dicts` -- Nodes + all Pods -> existing nodes with their pods
* :func:`nodeclaim_from_dict` -- an in-flight joiner.sh/v1 NodeClaim -> :class:`ExistingNode`
* :func:`daemonset_from_dict` -- a DaemonSet -> the :class:`Pod` its pods would be
* :func:`nodepool_from_dict` -- a joiner.sh/v1 NodePool + instance types -> :class:`NodePoolTemplate`
  (validated by the API model, then read from it by :func:`nodepool_template`)
* :func:`pool_usage` -- capacity of a pool's nodes, for limits

Malformed input raises :class:`ConversionError` with the field path in the message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from api.v1.common import Taint as ApiTaint
from api.v1.nodepool import NodePool
from api.v1.validation import InvalidObjectError, validate
from controller.scheduling.frozen import FrozenLabels
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.labels import (
    EPHEMERAL_TAINT_KEYS,
    KARPENTER_LABEL_ALIASES,
    LABEL_GANG,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
)
from controller.scheduling.model import (
    ExistingNode,
    NodePoolTemplate,
    Pod,
    PodAffinityTerm,
    PreferredTerm,
    TopologySpread,
)
from controller.scheduling.quantity import QuantityError
from controller.scheduling.requirements import Requirement, RequirementError, Requirements, label_selector
from controller.scheduling.resources import EMPTY, PODS, Resources, sum_resources
from controller.scheduling.taints import Taint, Toleration

Obj = Mapping[str, Any]

METADATA_NAME: Final = "metadata.name"
"""Requirement key used for ``matchFields`` on ``metadata.name`` (the node's name)."""
_NEVER: Final = Requirements((Requirement("joiner.sh/never", False, frozenset(), False),))
"""A term no node satisfies (an empty nodeSelectorTerm matches nothing)."""

GANG_LABELS: Final = (LABEL_GANG, "scheduling.x-k8s.io/pod-group")
GANG_ANNOTATIONS: Final = ("scheduling.k8s.io/group-name", "volcano.sh/group-name")

DAEMONSET_TOLERATIONS: Final = (
    Toleration(key="node.kubernetes.io/not-ready", operator="Exists", effect="NoExecute"),
    Toleration(key="node.kubernetes.io/unreachable", operator="Exists", effect="NoExecute"),
    Toleration(key="node.kubernetes.io/disk-pressure", operator="Exists", effect="NoSchedule"),
    Toleration(key="node.kubernetes.io/memory-pressure", operator="Exists", effect="NoSchedule"),
    Toleration(key="node.kubernetes.io/pid-pressure", operator="Exists", effect="NoSchedule"),
    Toleration(key="node.kubernetes.io/unschedulable", operator="Exists", effect="NoSchedule"),
)
"""Tolerations the DaemonSet controller adds to every daemon pod."""


class ConversionError(ValueError):
    """An object could not be converted; the message names the object and the field."""


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ConversionError("metadata: must be an object")
    return meta


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConversionError(f"{where}: must be an object of string -> string")
    return {str(k): str(v) for k, v in value.items()}


def _resources(value: Any, where: str) -> Resources:
    if not value:
        return EMPTY
    if not isinstance(value, Mapping):
        raise ConversionError(f"{where}: must be an object of resource -> quantity")
    try:
        return Resources.parse({str(k): v for k, v in value.items()})
    except QuantityError as err:
        raise ConversionError(f"{where}: {err}") from err


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConversionError(f"{where}: must be a list")
    return value


# --- pods -------------------------------------------------------------------------------------


def _container_requests(container: Obj, where: str) -> Resources:
    """Requests, with limits standing in for missing requests (as apiserver defaulting does)."""
    res = container.get("resources") or {}
    requests = _resources(res.get("requests"), f"{where}.resources.requests")
    limits = _resources(res.get("limits"), f"{where}.resources.limits")
    missing = {name: amount for name, amount in limits.items if name not in requests}
    return requests + Resources(missing) if missing else requests


def pod_requests(spec: Obj, where: str = "spec") -> Resources:
    """Effective requests like kube-scheduler computes them.

    ``max(sum(containers) + sum(sidecars), max_i(init_i + sidecars started before i)) + overhead``,
    per resource, where sidecars are init containers with ``restartPolicy: Always``.
    """
    containers = [
        _container_requests(c, f"{where}.containers[{i}]") for i, c in enumerate(_list(spec.get("containers"), where))
    ]
    total = sum_resources(containers)
    sidecars = EMPTY
    peak: dict[str, int] = {}
    for i, init in enumerate(_list(spec.get("initContainers"), f"{where}.initContainers")):
        req = _container_requests(init, f"{where}.initContainers[{i}]")
        if init.get("restartPolicy") == "Always":
            sidecars = sidecars + req
            candidate = sidecars
        else:
            candidate = sidecars + req
        for name, amount in candidate.items:
            peak[name] = max(peak.get(name, 0), amount)
    running = total + sidecars
    merged = running.to_dict()
    for name, amount in peak.items():
        merged[name] = max(merged.get(name, 0), amount)
    return Resources(merged) + _resources(spec.get("overhead"), f"{where}.overhead")


def _node_selector_term(term: Obj, where: str) -> Requirements | None:
    """A nodeSelectorTerm; None when it is empty (which matches no node)."""
    exprs = _list(term.get("matchExpressions"), f"{where}.matchExpressions")
    fields = _list(term.get("matchFields"), f"{where}.matchFields")
    if not exprs and not fields:
        return None
    try:
        reqs = Requirements.from_expressions(exprs)
        for i, f in enumerate(fields):
            if f.get("key") != METADATA_NAME:
                raise ConversionError(f"{where}.matchFields[{i}].key: only metadata.name is supported")
            reqs = reqs.with_(Requirement.new(METADATA_NAME, str(f.get("operator")), f.get("values") or ()))
    except (RequirementError, KeyError) as err:
        raise ConversionError(f"{where}: {err}") from err
    return reqs


def _selector(value: Any, where: str) -> Requirements | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConversionError(f"{where}: must be a label selector")
    try:
        return label_selector(
            _str_map(value.get("matchLabels"), f"{where}.matchLabels"),
            _list(value.get("matchExpressions"), f"{where}.matchExpressions"),
        )
    except (RequirementError, KeyError) as err:
        raise ConversionError(f"{where}: {err}") from err


def _with_label_keys(
    selector: Requirements | None,
    labels: Mapping[str, str],
    match: Iterable[str],
    mismatch: Iterable[str] = (),
) -> Requirements | None:
    if selector is None:
        return None
    extra = [Requirement.in_(k, labels[k]) for k in match if k in labels]
    extra += [Requirement.new(k, "NotIn", [labels[k]]) for k in mismatch if k in labels]
    return selector.with_(*extra) if extra else selector


def _affinity_terms(
    terms: list[Any], *, namespace: str, labels: Mapping[str, str], where: str
) -> tuple[PodAffinityTerm, ...]:
    out = []
    for i, term in enumerate(terms):
        at = f"{where}[{i}]"
        key = term.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ConversionError(f"{at}.topologyKey: required")
        selector = _with_label_keys(
            _selector(term.get("labelSelector"), f"{at}.labelSelector"),
            labels,
            _list(term.get("matchLabelKeys"), f"{at}.matchLabelKeys"),
            _list(term.get("mismatchLabelKeys"), f"{at}.mismatchLabelKeys"),
        )
        if selector is None:
            continue  # a nil selector matches no pod: the term constrains nothing
        namespaces = frozenset(str(n) for n in _list(term.get("namespaces"), f"{at}.namespaces"))
        ns_selector = term.get("namespaceSelector")
        # A namespaceSelector needs namespace labels the solver does not have: an empty one means
        # every namespace; a non-empty one is treated as every namespace too (conservative).
        all_ns = ns_selector is not None
        out.append(
            PodAffinityTerm(
                topology_key=key,
                selector=selector,
                namespaces=namespaces or frozenset({namespace}),
                all_namespaces=all_ns,
            )
        )
    return tuple(out)


def gang_of(obj: Obj) -> str | None:
    """The gang a pod belongs to, as ``namespace/name``, from the markers users already write."""
    meta = _meta(obj)
    namespace = str(meta.get("namespace") or "default")
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    for key in GANG_LABELS:
        if labels.get(key):
            return f"{namespace}/{labels[key]}"
    for key in GANG_ANNOTATIONS:
        if annotations.get(key):
            return f"{namespace}/{annotations[key]}"
    return None


def _owner(meta: Mapping[str, Any]) -> str | None:
    refs = _list(meta.get("ownerReferences"), "metadata.ownerReferences")
    chosen = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if chosen is None:
        return None
    return str(chosen.get("uid") or f"{chosen.get('kind')}/{chosen.get('name')}")


def pod_from_dict(obj: Obj, *, gang: str | None = None, detect_gang: bool = True) -> Pod:
    """Convert a Pod. ``gang`` overrides detection; ``detect_gang`` reads the gang markers."""
    meta = _meta(obj)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ConversionError("Pod: metadata.name is required")
    try:
        return _pod(obj, meta, name, gang=gang if gang is not None else (gang_of(obj) if detect_gang else None))
    except ConversionError as err:
        raise ConversionError(f"Pod {meta.get('namespace') or 'default'}/{name}: {err}") from err


def _pod(obj: Obj, meta: Mapping[str, Any], name: str, *, gang: str | None) -> Pod:
    namespace = str(meta.get("namespace") or "default")
    labels = _str_map(meta.get("labels"), "metadata.labels")
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ConversionError("spec: must be an object")
    requests = pod_requests(spec)
    node_selector = _str_map(spec.get("nodeSelector"), "spec.nodeSelector")
    base = Requirements.from_labels(node_selector)
    affinity = spec.get("affinity") or {}
    node_aff = affinity.get("nodeAffinity") or {}
    required_terms: list[Requirements] = []
    req_sel = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req_sel is not None:
        terms = _list(req_sel.get("nodeSelectorTerms"), "spec.affinity.nodeAffinity.required.nodeSelectorTerms")
        for i, term in enumerate(terms):
            reqs = _node_selector_term(term, f"spec.affinity.nodeAffinity.required.nodeSelectorTerms[{i}]")
            if reqs is not None:
                required_terms.append(base.intersect(reqs))
        if not required_terms:
            required_terms = [_NEVER]
    elif node_selector:
        required_terms = [base]
    preferred = []
    for i, pref in enumerate(
        _list(
            node_aff.get("preferredDuringSchedulingIgnoredDuringExecution"),
            "spec.affinity.nodeAffinity.preferred",
        )
    ):
        reqs = _node_selector_term(pref.get("preference") or {}, f"spec.affinity.nodeAffinity.preferred[{i}]")
        if reqs is not None:
            preferred.append(PreferredTerm(weight=int(pref.get("weight", 1)), requirements=reqs))
    tolerations = tuple(
        Toleration.from_dict(t) for t in _list(spec.get("tolerations"), "spec.tolerations") if isinstance(t, Mapping)
    )
    spread = []
    for i, tsc in enumerate(_list(spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints")):
        where = f"spec.topologySpreadConstraints[{i}]"
        if tsc.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
            continue
        key = tsc.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ConversionError(f"{where}.topologyKey: required")
        selector = _with_label_keys(
            _selector(tsc.get("labelSelector"), f"{where}.labelSelector"),
            labels,
            _list(tsc.get("matchLabelKeys"), f"{where}.matchLabelKeys"),
        )
        min_domains = tsc.get("minDomains")
        spread.append(
            TopologySpread(
                topology_key=key,
                max_skew=int(tsc.get("maxSkew", 1)),
                selector=selector,
                min_domains=int(min_domains) if min_domains is not None else None,
                honor_node_affinity=tsc.get("nodeAffinityPolicy", "Honor") == "Honor",
                honor_node_taints=tsc.get("nodeTaintsPolicy", "Ignore") == "Honor",
            )
        )
    pod_aff = affinity.get("podAffinity") or {}
    pod_anti = affinity.get("podAntiAffinity") or {}
    aff = _affinity_terms(
        _list(pod_aff.get("requiredDuringSchedulingIgnoredDuringExecution"), "podAffinity.required"),
        namespace=namespace,
        labels=labels,
        where="spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    )
    anti = _affinity_terms(
        _list(pod_anti.get("requiredDuringSchedulingIgnoredDuringExecution"), "podAntiAffinity.required"),
        namespace=namespace,
        labels=labels,
        where="spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    )
    return Pod(
        name=name,
        namespace=namespace,
        requests=requests,
        labels=FrozenLabels(labels),
        node_requirements=tuple(required_terms),
        preferred=tuple(preferred),
        tolerations=tolerations,
        spread=tuple(spread),
        affinity=aff,
        anti_affinity=anti,
        owner=_owner(meta),
        gang=gang,
        uid=str(meta.get("uid") or ""),
    )


def is_terminal(obj: Obj) -> bool:
    """Succeeded/Failed pods hold no resources."""
    phase = (obj.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed")


# --- nodes ------------------------------------------------------------------------------------


def _taints(value: Any, where: str) -> tuple[Taint, ...]:
    out = []
    for i, t in enumerate(_list(value, where)):
        if not isinstance(t, Mapping) or "effect" not in t:
            raise ConversionError(f"{where}[{i}]: a taint needs key and effect")
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
        status = obj.get("status") or {}
        spec = obj.get("spec") or {}
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
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = _str_map(meta.get("labels"), "metadata.labels")
    for expr in _list(spec.get("requirements"), "spec.requirements"):
        values = expr.get("values") or []
        if expr.get("operator") == "In" and len(values) == 1:
            labels.setdefault(str(expr["key"]), str(values[0]))
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


def daemonset_from_dict(obj: Obj) -> Pod:
    """The pod a DaemonSet would run on each matching node."""
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    template = ((obj.get("spec") or {}).get("template")) or {}
    tmeta = dict(template.get("metadata") or {})
    tmeta["name"] = name or "daemonset"
    tmeta.setdefault("namespace", meta.get("namespace") or "default")
    tmeta.pop("ownerReferences", None)
    try:
        pod = _pod({"metadata": tmeta, "spec": template.get("spec") or {}}, tmeta, tmeta["name"], gang=None)
    except ConversionError as err:
        raise ConversionError(f"DaemonSet {name}: spec.template.{err}") from err
    return Pod(
        name=pod.name,
        namespace=pod.namespace,
        requests=pod.requests,
        labels=pod.labels,
        node_requirements=pod.node_requirements,
        tolerations=pod.tolerations + DAEMONSET_TOLERATIONS,
        owner=f"DaemonSet/{name}",
    )


# --- node pools -------------------------------------------------------------------------------


def _model_taints(taints: Iterable[ApiTaint]) -> tuple[Taint, ...]:
    return tuple(Taint(key=t.key, effect=t.effect, value=t.value or "") for t in taints)


def nodepool_template(
    pool: NodePool, instance_types: Sequence[InstanceType], *, usage: Resources = EMPTY
) -> NodePoolTemplate:
    """A validated NodePool -> the solver's :class:`NodePoolTemplate`.

    Karpenter label keys (``karpenter.sh/capacity-type``) are mapped to joiner's.
    """
    tspec = pool.spec.template.spec
    try:
        requirements = Requirements(
            Requirement.new(
                KARPENTER_LABEL_ALIASES.get(req.key, req.key), req.operator, req.values, min_values=req.min_values
            )
            for req in tspec.requirements
        )
        limits = Resources.parse(pool.spec.limits)
    except (RequirementError, QuantityError) as err:
        raise ConversionError(f"NodePool {pool.name}: {err}") from err
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
