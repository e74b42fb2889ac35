"""Kubernetes JSON (plain dicts, as the apiserver returns them) -> the solver's pods. Pure.

* :func:`pod_from_dict` -- a Pod (pending or bound) -> :class:`Pod`
* :func:`daemonset_from_dict` -- a DaemonSet -> the :class:`Pod` its pods would be
* :func:`pod_requests`, :func:`gang_of`, :func:`is_terminal` -- what a pod asks for, its gang, its end

Nodes, NodeClaims and NodePools (the machines the pods go to) are ``kubeconv_nodes.py``'s; the
field readers both use are here. Malformed input raises :class:`ConversionError` with the field
path in the message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from api.v1.types import MAX_QUANTITY
from controller.scheduling.frozen import FrozenLabels
from controller.scheduling.labels import (
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_GANG,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_OS,
    LABEL_REGION,
    LABEL_ZONE,
)
from controller.scheduling.model import (
    BIND_ALL_HOST_IP,
    HostPort,
    Pod,
    PodAffinityTerm,
    PreferredTerm,
    TopologySpread,
)
from controller.scheduling.quantity import QuantityError
from controller.scheduling.requirements import EVERYTHING, Requirement, RequirementError, Requirements, label_selector
from controller.scheduling.resources import EMPTY, Resources, sum_resources
from controller.scheduling.taints import Toleration

TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_MILLI: Final = MAX_QUANTITY * 1000
"""The largest amount a resource list may hold (what the API models accept), in milli-units."""

Obj = Mapping[str, Any]

METADATA_NAME: Final = "metadata.name"
"""Requirement key used for ``matchFields`` on ``metadata.name`` (the node's name)."""
_NEVER: Final = Requirements((Requirement("joiner.sh/never", False, frozenset(), False),))
"""A term no node satisfies (an empty nodeSelectorTerm matches nothing)."""

ALWAYS_LABELLED: Final = frozenset(
    {
        LABEL_HOSTNAME,
        LABEL_ZONE,
        LABEL_REGION,
        LABEL_CAPACITY_TYPE,
        LABEL_NODEPOOL,
        LABEL_INSTANCE_TYPE,
        LABEL_ARCH,
        LABEL_OS,
    }
)
"""Labels every node joiner buys carries (the region from its cloud, whatever its instance type)."""
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


class Unplannable(ConversionError):
    """A pending pod that kube-scheduler would place on no node joiner can buy now; the message says
    why (what it waits for, or what joiner does not plan for)."""


DRA_UNPLANNED: Final = (
    "it claims devices through Dynamic Resource Allocation (spec.resourceClaims), which joiner does not "
    "plan for: a new node's devices exist for kube-scheduler only once its DRA driver publishes them; "
    "ask for them as an extended resource (nvidia.com/gpu) to have joiner buy nodes for it"
)


def unplannable(spec: Mapping[str, Any]) -> str | None:
    """Why no node joiner buys would take this pending pod, whatever it is, or None."""
    if spec.get("resourceClaims"):
        return DRA_UNPLANNED
    return None


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
    # (a dict is one already: the item's place is named only for what is not)
    return [item if type(item) is dict else _obj(item, f"{where}[{i}]") for i, item in enumerate(_list(value, where))]


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
    per resource, where sidecars are init containers with ``restartPolicy: Always``; pod-level
    ``resources`` (cpu, memory, hugepages) take the place of the containers' for what they set.
    """
    containers = [
        _container_requests(c, f"{where}.containers[{i}]")
        for i, c in enumerate(_list(spec.get("containers"), f"{where}.containers"))
    ]
    total = containers[0] if len(containers) == 1 else sum_resources(containers)
    inits = spec.get("initContainers")
    if (inits is None or inits == []) and spec.get("overhead") is None and spec.get("resources") is None:
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
    merged.update(_pod_level_requests(spec, merged, where))
    return Resources(merged) + _resources(spec.get("overhead"), f"{where}.overhead")


def _pod_level(name: str) -> bool:
    """A resource pod-level ``resources`` may set (PodLevelResources: cpu, memory, hugepages)."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _pod_level_requests(spec: Obj, containers: Mapping[str, int], where: str) -> dict[str, int]:
    """Pod-level requests (beta and on since Kubernetes 1.34), as the apiserver defaults them: a
    resource with a pod-level limit but no pod-level request is requested as the containers request
    it, or, when none does, as its limit."""
    level = _obj(spec.get("resources"), f"{where}.resources")
    if not level:
        return {}
    requests = {
        n: a for n, a in _resources(level.get("requests"), f"{where}.resources.requests").items if _pod_level(n)
    }
    for name, amount in _resources(level.get("limits"), f"{where}.resources.limits").items:
        if _pod_level(name) and name not in requests and name not in containers:
            requests[name] = amount
    return requests


PROTOCOLS: Final = ("TCP", "UDP", "SCTP")


def host_ports(spec: Obj, where: str = "spec") -> tuple[HostPort, ...]:
    """The ports a pod takes on its node, as kube-scheduler's NodePorts filter reads them: the
    ``hostPort`` of its containers and of its sidecars (init containers with ``restartPolicy:
    Always``; other init containers have ended before the pod runs). In a ``hostNetwork`` pod a port
    without a ``hostPort`` takes its ``containerPort`` (the apiserver defaults a Pod so; done here for
    Pod documents and templates that did not pass it). Sorted, each once."""
    host_network = spec.get("hostNetwork") is True
    found: list[HostPort] = []
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        if not containers:
            continue
        for i, container in enumerate(_objects(containers, f"{where}.{field}")):
            ports = container.get("ports")
            if not ports or (field == "initContainers" and container.get("restartPolicy") != "Always"):
                continue
            for j, item in enumerate(_objects(ports, f"{where}.{field}[{i}].ports")):
                at = f"{where}.{field}[{i}].ports[{j}]"
                port = _int(item.get("hostPort"), f"{at}.hostPort", default=0, minimum=0, maximum=65535)
                if port == 0 and host_network:
                    port = _int(item.get("containerPort"), f"{at}.containerPort", default=0, minimum=0, maximum=65535)
                if port == 0:
                    continue
                protocol = item.get("protocol") or "TCP"
                if protocol not in PROTOCOLS:
                    raise ConversionError(f"{at}.protocol: must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
                ip = item.get("hostIP") or BIND_ALL_HOST_IP
                if not isinstance(ip, str):
                    raise ConversionError(f"{at}.hostIP: must be a string, got {_kind_of(ip)}")
                found.append(HostPort(port=port, protocol=protocol, ip=ip))
    if not found:
        return ()
    return tuple(sorted(set(found), key=lambda p: (p.port, p.protocol, p.ip)))


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
    key = _labels_only(value)
    if key is not None:
        hit = _SELECTORS.get(key)
        if hit is not None:
            return hit
    try:
        selector = label_selector(
            _str_map(value.get("matchLabels"), f"{where}.matchLabels"),
            _expressions(value.get("matchExpressions"), f"{where}.matchExpressions"),
        )
    except (RequirementError, KeyError) as err:
        raise ConversionError(f"{where}: {err}") from err
    if key is not None:
        if len(_SELECTORS) >= _MEMO_MAX:
            _SELECTORS.clear()
        _SELECTORS[key] = selector
    return selector


def _labels_only(selector: Mapping[str, Any]) -> tuple[tuple[str, str], ...] | None:
    """A selector of ``matchLabels`` alone, every key and value a string: its labels (the selector
    is the same for the same labels), else None (read it in full)."""
    expressions = selector.get("matchExpressions")
    if expressions is not None and not (type(expressions) is list and not expressions):
        return None
    labels = selector.get("matchLabels")
    if labels is None:
        return ()
    if type(labels) is not dict:
        return None
    items = tuple(labels.items())
    for k, v in items:
        if type(k) is not str or type(v) is not str:
            return None
    return items


_SELECTORS: dict[tuple[tuple[str, str], ...], Requirements] = {}
"""Selectors of labels alone read so far (labels -> requirements): pods of one workload repeat
theirs, see `_selector`."""


def _tolerations(value: Any) -> tuple[Toleration, ...]:
    """``spec.tolerations``; each distinct list of tolerations is read once (every pod the
    apiserver admits carries the same two defaults)."""
    items = _objects(value, "spec.tolerations")
    if not items:
        return ()
    # (with each value's type: True == 1, but they read as different strings)
    items_key = tuple((tuple(t.items()), tuple(map(type, t.values()))) for t in items)
    key: tuple[tuple[tuple[tuple[Any, Any], ...], tuple[type, ...]], ...] | None = items_key
    try:
        hit = _TOLERATIONS.get(items_key)
    except TypeError:  # a value that cannot be a key (a list, ...): read it as it is
        hit, key = None, None
    if hit is not None:
        return hit
    tolerations = tuple(Toleration.from_dict(t) for t in items)
    if key is not None:
        if len(_TOLERATIONS) >= _MEMO_MAX:
            _TOLERATIONS.clear()
        _TOLERATIONS[key] = tolerations
    return tolerations


_TOLERATIONS: dict[tuple[tuple[tuple[tuple[Any, Any], ...], tuple[type, ...]], ...], tuple[Toleration, ...]] = {}
"""Toleration lists read so far (raw items -> tolerations), see `_tolerations`."""
_MEMO_MAX: Final = 4096


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
    base = Requirements.from_labels(node_selector) if node_selector else EVERYTHING
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
    tolerations = _tolerations(spec.get("tolerations"))
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
    # kube-scheduler puts a pod with a DoNotSchedule spread or a required pod affinity only on nodes
    # that carry its topology keys (PodTopologySpread: "missing required label"; InterPodAffinity):
    # a key a new node may lack becomes a requirement that it exists
    keyed = sorted(({s.topology_key for s in spread} | {t.topology_key for t in aff}) - ALWAYS_LABELLED)
    if keyed:
        exists = [Requirement.new(k, "Exists") for k in keyed]
        required_terms = [t.with_(*exists) for t in required_terms] if required_terms else [Requirements(exists)]
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
        host_ports=host_ports(spec),
    )


def is_terminal(obj: Obj) -> bool:
    """Succeeded/Failed pods hold no resources."""
    status = obj.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return phase in ("Succeeded", "Failed")


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
        host_ports=pod.host_ports,
    )
