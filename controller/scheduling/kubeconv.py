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
from api.v1.types import MAX_QUANTITY
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
from controller.scheduling.quantity import QuantityError, parse_quantity
from controller.scheduling.requirements import Requirement, RequirementError, Requirements, label_selector
from controller.scheduling.resources import EMPTY, PODS, Resources, sum_resources
from controller.scheduling.taints import Taint, Toleration

TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_MILLI: Final = MAX_QUANTITY * 1000
"""The largest amount a resource list may hold (what the API models accept), in milli-units."""

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
    if type(meta) is not dict and not isinstance(meta, Mapping):  # (a dict without the ABC check)
        raise ConversionError("metadata: must be an object")
    return meta


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` as an object (``None`` reads as empty); anything else is an error naming ``where``."""
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):
        raise ConversionError(f"{where}: must be an object, got {_kind_of(value)}")
    return value


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _int(value: Any, where: str, *, default: int, minimum: int, maximum: int | None = None) -> int:
    """An integer field (``None`` reads as ``default``), within ``[minimum, maximum]``."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConversionError(f"{where}: must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
        raise ConversionError(f"{where}: must be {bound}, got {value}")
    return value


def _values(value: Any, where: str) -> list[str]:
    """A requirement's ``values``: a list of strings (numbers are read as their text)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConversionError(f"{where}: must be a list of strings, got {_kind_of(value)} {value!r}")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise ConversionError(f"{where}[{i}]: must be a string, got {_kind_of(item)}")
        out.append(str(item))
    return out


def _expressions(value: Any, where: str) -> list[dict[str, Any]]:
    """``matchExpressions``: checked for shape (key, operator, a list of values) and normalised."""
    out = []
    for i, expr in enumerate(_list(value, where)):
        at = f"{where}[{i}]"
        expr = _obj(expr, at)
        key = expr.get("key")
        if not isinstance(key, str) or not key:
            raise ConversionError(f"{at}.key: required (a label key)")
        operator = expr.get("operator")
        if not isinstance(operator, str):
            raise ConversionError(f"{at}.operator: required (In, NotIn, Exists, DoesNotExist, Gt or Lt)")
        normalised: dict[str, Any] = {
            "key": key,
            "operator": operator,
            "values": _values(expr.get("values"), f"{at}.values"),
        }
        if expr.get("minValues") is not None:
            normalised["minValues"] = _int(expr.get("minValues"), f"{at}.minValues", default=1, minimum=1)
        out.append(normalised)
    return out


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):
        raise ConversionError(f"{where}: must be an object of string -> string, got {_kind_of(value)}")
    out: dict[str, str] = {}
    for k, v in value.items():
        if type(v) is not str:
            if isinstance(v, list | tuple | Mapping):
                raise ConversionError(f"{where}.{k}: must be a string, got {_kind_of(v)}")
            v = str(v)
        out[k if type(k) is str else str(k)] = v
    return out


def _resources(value: Any, where: str) -> Resources:
    """A resource list; a negative quantity is an error (Kubernetes rejects it too)."""
    if value is None:
        return EMPTY
    if type(value) is not dict and not isinstance(value, Mapping):
        raise ConversionError(f"{where}: must be an object of resource -> quantity, got {_kind_of(value)}")
    if not value:
        return EMPTY
    # pods of one deployment repeat the same few resource lists: each distinct one is read once
    # (with each value's type: True == 1, but True is not a quantity)
    items = tuple((k, v, type(v)) for k, v in value.items())
    key: tuple[tuple[Any, Any, type], ...] | None = items
    try:
        hit = _RESOURCE_LISTS.get(items)
    except TypeError:  # a value that is not a quantity (a list, ...): the error comes below
        hit, key = None, None
    if hit is not None:
        return hit
    try:
        parsed = Resources.parse({str(k): v for k, v in value.items()})
    except QuantityError as err:
        raise ConversionError(f"{where}: {err}") from err
    for name, amount in parsed.items:
        if amount < 0:
            raise ConversionError(f"{where}.{name}: must not be negative, got {value.get(name)!r}")
        if amount > MAX_MILLI:
            raise ConversionError(f"{where}.{name}: must be at most 2^63-1, got {value.get(name)!r}")
    if key is not None:
        if len(_RESOURCE_LISTS) >= _RESOURCE_LISTS_MAX:
            _RESOURCE_LISTS.clear()
        _RESOURCE_LISTS[key] = parsed
    return parsed


_RESOURCE_LISTS: dict[tuple[tuple[Any, Any, type], ...], Resources] = {}
"""Resource lists read so far (raw items -> parsed), see `_resources`."""
_RESOURCE_LISTS_MAX: Final = 4096


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConversionError(f"{where}: must be a list, got {_kind_of(value)}")
    return value


def _objects(value: Any, where: str) -> list[Mapping[str, Any]]:
    """A list of objects (``None`` reads as empty)."""
    return [_obj(item, f"{where}[{i}]") for i, item in enumerate(_list(value, where))]


# --- pods -------------------------------------------------------------------------------------


def _container_requests(container: Obj, where: str) -> Resources:
    """Requests, with limits standing in for missing requests (as apiserver defaulting does)."""
    container = _obj(container, where)
    res = _obj(container.get("resources"), f"{where}.resources")
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
        _container_requests(c, f"{where}.containers[{i}]")
        for i, c in enumerate(_list(spec.get("containers"), f"{where}.containers"))
    ]
    total = sum_resources(containers)
    inits = spec.get("initContainers")
    if (inits is None or inits == []) and spec.get("overhead") is None:
        return total  # the usual pod: its containers' sum is all there is
    sidecars = EMPTY
    peak: dict[str, int] = {}
    for i, init in enumerate(_objects(spec.get("initContainers"), f"{where}.initContainers")):
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


def _node_selector_term(term: Any, where: str) -> Requirements | None:
    """A nodeSelectorTerm; None when it is empty (which matches no node)."""
    term = _obj(term, where)
    exprs = _expressions(term.get("matchExpressions"), f"{where}.matchExpressions")
    fields = _expressions(term.get("matchFields"), f"{where}.matchFields")
    if not exprs and not fields:
        return None
    try:
        reqs = Requirements.from_expressions(exprs)
        for i, f in enumerate(fields):
            if f.get("key") != METADATA_NAME:
                raise ConversionError(f"{where}.matchFields[{i}].key: only metadata.name is supported")
            reqs = reqs.with_(Requirement.new(METADATA_NAME, str(f.get("operator")), f["values"]))
    except (RequirementError, KeyError) as err:
        raise ConversionError(f"{where}: {err}") from err
    return reqs


def _selector(value: Any, where: str) -> Requirements | None:
    if value is None:
        return None
    if type(value) is not dict and not isinstance(value, Mapping):
        raise ConversionError(f"{where}: must be a label selector (an object), got {_kind_of(value)}")
    try:
        return label_selector(
            _str_map(value.get("matchLabels"), f"{where}.matchLabels"),
            _expressions(value.get("matchExpressions"), f"{where}.matchExpressions"),
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
    extra = [Requirement.in_(k, labels[k]) for k in match if isinstance(k, str) and k in labels]
    extra += [Requirement.new(k, "NotIn", [labels[k]]) for k in mismatch if isinstance(k, str) and k in labels]
    return selector.with_(*extra) if extra else selector


def _affinity_terms(
    terms: list[Any], *, namespace: str, labels: Mapping[str, str], where: str
) -> tuple[PodAffinityTerm, ...]:
    out = []
    for i, term in enumerate(terms):
        at = f"{where}[{i}]"
        term = _obj(term, at)
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
    labels = _str_map(meta.get("labels"), "metadata.labels")
    annotations = _str_map(meta.get("annotations"), "metadata.annotations")
    for key in GANG_LABELS:
        if labels.get(key):
            return f"{namespace}/{labels[key]}"
    for key in GANG_ANNOTATIONS:
        if annotations.get(key):
            return f"{namespace}/{annotations[key]}"
    return None


def _owner(meta: Mapping[str, Any]) -> str | None:
    refs = _objects(meta.get("ownerReferences"), "metadata.ownerReferences")
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
    spec = _obj(obj.get("spec"), "spec")
    requests = pod_requests(spec)
    node_selector = _str_map(spec.get("nodeSelector"), "spec.nodeSelector")
    base = Requirements.from_labels(node_selector)
    affinity = _obj(spec.get("affinity"), "spec.affinity")
    node_aff = _obj(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required_terms: list[Requirements] = []
    req_sel = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req_sel is not None:
        req_sel = _obj(req_sel, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
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
    preferred_where = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for i, pref in enumerate(
        _objects(node_aff.get("preferredDuringSchedulingIgnoredDuringExecution"), preferred_where)
    ):
        weight = _int(pref.get("weight"), f"{preferred_where}[{i}].weight", default=1, minimum=1, maximum=100)
        reqs = _node_selector_term(pref.get("preference"), f"{preferred_where}[{i}].preference")
        if reqs is not None:
            preferred.append(PreferredTerm(weight=weight, requirements=reqs))
    tolerations = tuple(Toleration.from_dict(t) for t in _objects(spec.get("tolerations"), "spec.tolerations"))
    spread = []
    for i, tsc in enumerate(_objects(spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints")):
        where = f"spec.topologySpreadConstraints[{i}]"
        # kube-apiserver rejects these; a pod that got past it (or a scenario) must not be planned
        max_skew = _int(tsc.get("maxSkew"), f"{where}.maxSkew", default=1, minimum=1)
        min_domains = tsc.get("minDomains")
        if min_domains is not None:
            min_domains = _int(min_domains, f"{where}.minDomains", default=1, minimum=1)
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
        spread.append(
            TopologySpread(
                topology_key=key,
                max_skew=max_skew,
                selector=selector,
                min_domains=min_domains,
                honor_node_affinity=tsc.get("nodeAffinityPolicy", "Honor") == "Honor",
                honor_node_taints=tsc.get("nodeTaintsPolicy", "Ignore") == "Honor",
            )
        )
    pod_aff = _obj(affinity.get("podAffinity"), "spec.affinity.podAffinity")
    pod_anti = _obj(affinity.get("podAntiAffinity"), "spec.affinity.podAntiAffinity")
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
    status = obj.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return phase in ("Succeeded", "Failed")


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


def daemonset_from_dict(obj: Obj) -> Pod:
    """The pod a DaemonSet would run on each matching node."""
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    try:
        template = _obj(_obj(obj.get("spec"), "spec").get("template"), "spec.template")
        tmeta = dict(_obj(template.get("metadata"), "spec.template.metadata"))
    except ConversionError as err:
        raise ConversionError(f"DaemonSet {name}: {err}") from err
    tmeta["name"] = name or "daemonset"
    tmeta.setdefault("namespace", meta.get("namespace") or "default")
    tmeta.pop("ownerReferences", None)
    try:
        pod = _pod({"metadata": tmeta, "spec": template.get("spec")}, tmeta, tmeta["name"], gang=None)
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
