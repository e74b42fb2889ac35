"""``joiner plan``: run the solver offline on a scenario file and print what it would buy.

    joiner plan -f scenario.yaml [-f more.yaml] [--catalog catalog.json] [-o table|json|yaml]

A scenario is multi-document YAML (or JSON) holding, in any order:

* ``Pod`` -- pending unless ``spec.nodeName`` is set (then it runs on that Node);
* ``Deployment``, ``StatefulSet``, ``ReplicaSet``, ``Job`` -- expanded into their pending pods;
* ``NodePool`` and ``KWOKNodeClass`` (``joiner.sh/v1``, validated like the apiserver would);
* ``NodeClaim`` (``joiner.sh/v1``) -- in-flight capacity not registered as a Node yet;
* ``Node``, ``DaemonSet``, and ``ConfigMap`` (a KWOKNodeClass's ``spec.catalog``);
* ``List`` -- any of the above under ``items`` (what ``kubectl get -o yaml`` prints).

Exit status: 0 when a plan was printed (even with unschedulable pods), 1 for bad input (one line
that names the document, the object and the field), 2 for usage errors. Bad input is never
planned around: a negative request, a pod named twice, a key twice in a mapping, a field the kind
does not have, a document nested deeper than 100 levels or workloads that expand to more than
1,000,000 pods are errors. A NodePool's budget and ``limits.nodes`` apply as in the controller.
A NodePool whose NodeClass is not in the scenario is planned with the built-in catalog and a
warning on stderr (the controller would not launch from it until the NodeClass exists). A gang
with fewer pending or running members than its ``joiner.sh/gang-size`` is reported
unschedulable, as the controller waits for the rest before buying anything. See docs/errors.md.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import yaml

from controller.cloudprovider.catalog import load_catalog, parse_catalog_text
from controller.gang.markers import ANNOTATION_GANG_SAME_ZONE, gang_options
from controller.helptext import for_terminal
from controller.scheduling import (
    CatalogError,
    ExistingNode,
    Gang,
    InstanceType,
    NodePoolTemplate,
    Plan,
    Pod,
    solve,
)
from controller.scheduling.bounds import apply_bounds
from controller.scheduling.kubeconv import (
    ConversionError,
    daemonset_from_dict,
    gang_of,
    is_terminal,
    node_from_dict,
    nodeclaim_from_dict,
    pod_from_dict,
)
from controller.serialization import (
    DuplicateKeyError,
    SafeLoader,
    dump_yaml,
    dumps_json_pretty,
    key_line,
    load_all_yaml,
)
from controller.strict import path_parts, path_text, unknown_field

Obj = dict[str, Any]
WORKLOAD_KINDS: Final = ("Deployment", "StatefulSet", "ReplicaSet", "Job")
KNOWN_KINDS: Final = (
    "Pod",
    *WORKLOAD_KINDS,
    "NodePool",
    "KWOKNodeClass",
    "NodeClaim",
    "Node",
    "DaemonSet",
    "ConfigMap",
    "List",
)
CATALOG_KEY: Final = "catalog.json"
MAX_DEPTH: Final = 100
"""Deepest nesting a document may have (Kubernetes objects need about 15 levels)."""
MAX_NODES: Final = 20_000_000
"""Most values a document may hold once YAML aliases are expanded (a guard against alias bombs)."""
MAX_PODS: Final = 1_000_000
"""Most pods the pods and workloads of a scenario may expand to."""


class ScenarioError(ValueError):
    """Bad input; the message names the document and the field."""


@dataclass
class Scenario:
    pods: list[dict[str, Any]] = field(default_factory=list)
    pod_where: dict[str, str] = field(default_factory=dict)  # namespace/name -> the document it came from
    warnings: list[str] = field(default_factory=list)
    nodepools: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    nodeclasses: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodeclaims: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    daemonsets: list[dict[str, Any]] = field(default_factory=list)
    configmaps: dict[str, dict[str, Any]] = field(default_factory=dict)


# --- reading -------------------------------------------------------------------------------------


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def _where(source: str, index: int, obj: Mapping[str, Any] | None = None) -> str:
    what = f"{source}: document {index}"
    if obj is not None:
        kind = obj.get("kind") if isinstance(obj.get("kind"), str) and obj.get("kind") else "object"
        name = _name(obj)
        what += f" ({kind} {name!r})" if name else f" ({kind})"
    return what


def _shape_problem(doc: Any) -> str | None:
    """Why a parsed document cannot be read safely (too deep, self-referencing, alias bomb), or None.

    Iterative, and each container is measured once, so neither deep nesting nor shared (aliased)
    sub-trees make it slow or recurse.
    """
    height: dict[int, int] = {}
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(doc, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, dict | list):
            continue
        key = id(node)
        children = list(node.values()) if isinstance(node, dict) else node
        if done:
            on_path.discard(key)
            subs = [c for c in children if isinstance(c, dict | list)]
            height[key] = 1 + max((height[id(c)] for c in subs), default=0)
            size[key] = 1 + len(children) + sum(size[id(c)] for c in subs)
            if height[key] > MAX_DEPTH:
                return f"nested more than {MAX_DEPTH} levels deep"
            if size[key] > MAX_NODES:
                return f"holds more than {MAX_NODES:,} values once its YAML aliases are expanded"
            continue
        if key in height:
            continue
        if key in on_path:
            return "refers to itself (a YAML alias inside its own anchor)"
        if len(on_path) >= MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep"
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, dict | list))
    return None


_CHEAP_DEPTH: Final = 5_000
"""Below this bound on the nesting a text can have, it is parsed without a first pass."""


def _check_nesting(text: str, source: str) -> None:
    """Refuse text nested more than ``MAX_DEPTH`` deep before building it: libyaml's composer
    recurses in C and overflows the stack (a crash, not an exception) somewhere past 20,000 levels.

    Every level of nesting needs a ``[`` or ``{``, or one more character of its line (indentation,
    ``- ``, ``? ``), so short lines and few brackets bound the depth without parsing; only text
    that might be deep gets a pass over its events (libyaml's parser itself is iterative).
    """
    longest = max(map(len, text.splitlines()), default=0)
    if text.count("[") + text.count("{") + longest <= _CHEAP_DEPTH:
        return
    depth = 0
    try:
        for event in yaml.parse(text, Loader=SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark is not None else 0
                    raise ScenarioError(f"{source}: line {line}: nested more than {MAX_DEPTH} levels deep")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as err:
        # newer libyaml refuses deep flow collections itself, while scanning ahead of the events
        if "maximum nesting depth" not in str(err):
            raise
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else 0
        raise ScenarioError(f"{source}: line {line}: nested more than {MAX_DEPTH} levels deep") from err


Located = dict[str, tuple[str, int, list[str | int]]]
"""where -> (the text, the document's number in it, the path of a ``List`` item): to name lines."""


def _unknown(where: str, obj: Mapping[str, Any], text: str, index: int, prefix: list[str | int]) -> None:
    """Refuse a field the object's Kubernetes kind does not have, as kubectl's strict decoding does."""
    path = unknown_field(obj)
    if path is not None:
        line = key_line(text, index, [*prefix, *path])
        at = f"line {line}: " if line else ""
        raise ScenarioError(f'{where}: {at}unknown field "{path_text(path)}" (kubectl refuses it too)')


def read_documents(
    texts: Iterable[tuple[str, str]], *, located: Located | None = None
) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, object) for every document, ``List`` items flattened. Strict, as ``kubectl apply``:
    a key twice in a mapping, or a field a Kubernetes kind does not have, is an error naming the
    line. ``located``, if given, receives where each object is (for the lines of later errors)."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    for source, text in texts:
        try:
            _check_nesting(text, source)
            shapes: list[tuple[int, int] | None] = []
            docs = load_all_yaml(text, shapes=shapes, strict=True)
        except DuplicateKeyError as err:
            raise ScenarioError(f"{source}: document {err.document}: {err} (kubectl refuses it too)") from err
        except yaml.YAMLError as err:
            raise ScenarioError(f"{source}: not valid YAML: {' '.join(str(err).split())}") from err
        except RecursionError as err:
            raise ScenarioError(f"{source}: not readable: nested more than {MAX_DEPTH} levels deep") from err
        for index, (doc, shape) in enumerate(zip(docs, shapes, strict=True), start=1):
            if doc is None:
                continue
            # the loader measured the document as it built it: only one it did not build, or
            # one past a limit, is walked again (for the problem and its message)
            if shape is None or shape[0] > MAX_DEPTH or shape[1] > MAX_NODES:
                problem = _shape_problem(doc)
                if problem is not None:
                    raise ScenarioError(f"{_where(source, index)}: {problem}")
            if not isinstance(doc, Mapping):
                raise ScenarioError(f"{_where(source, index)}: must be an object with apiVersion and kind")
            if doc.get("kind") == "List":
                items = doc.get("items") or []
                if not isinstance(items, list):
                    raise ScenarioError(f"{_where(source, index, doc)}: items: must be a list")
                for j, item in enumerate(items):
                    if not isinstance(item, Mapping):
                        raise ScenarioError(f"{_where(source, index, doc)}: items[{j}]: must be an object")
                    where = f"{_where(source, index, item)} items[{j}]"
                    _unknown(where, item, text, index, ["items", j])
                    if located is not None:
                        located[where] = (text, index, ["items", j])
                    out.append((where, item))
            else:
                where = _where(source, index, doc)
                _unknown(where, doc, text, index, [])
                if located is not None:
                    located[where] = (text, index, [])
                out.append((where, doc))
    return out


def _object_field(obj: Mapping[str, Any], key: str, where: str, path: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where}: {path}: must be an object, got {type(value).__name__}")
    return value


def _workload_pods(obj: Mapping[str, Any], where: str, *, room: int) -> list[dict[str, Any]]:
    spec = _object_field(obj, "spec", where, "spec")
    kind = str(obj.get("kind"))
    field_name = "parallelism" if kind == "Job" else "replicas"
    count = spec.get(field_name, 1)
    if count is None:
        count = 1
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ScenarioError(f"{where}: spec.{field_name}: must be a count (a whole number, 0 or more), got {count!r}")
    if count > room:
        raise ScenarioError(
            f"{where}: spec.{field_name}: {count:,} pods would take the scenario past {MAX_PODS:,} pods"
            " (the most joiner plan reads)"
        )
    template = spec.get("template")
    if not isinstance(template, Mapping):
        raise ScenarioError(f"{where}: spec.template: required (an object)")
    _object_field(template, "spec", where, "spec.template.spec")
    meta = _object_field(obj, "metadata", where, "metadata")
    name = _name(obj)
    tmeta = dict(_object_field(template, "metadata", where, "spec.template.metadata"))
    owner = {"apiVersion": obj.get("apiVersion", "apps/v1"), "kind": kind, "name": name, "uid": f"{kind}/{name}"}
    pods = []
    for i in range(count):
        pmeta = {**tmeta, "name": f"{name}-{i}", "namespace": meta.get("namespace") or "default"}
        pmeta["ownerReferences"] = [{**owner, "controller": True}]
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": pmeta, "spec": template.get("spec")})
    return pods


def _validated(obj: Mapping[str, Any], where: str, located: Located | None = None) -> dict[str, Any]:
    """A joiner.sh/v1 object validated by the API models, dumped back to JSON form; an unknown
    field's line is named when ``located`` knows the document."""
    from api.v1 import InvalidObjectError, parse_object

    try:
        model = parse_object(obj)
    except InvalidObjectError as err:
        lines = "; ".join(str(e) for e in err.errors)
        unknown = [e for e in err.errors if e.message == "unknown field"]
        found = (located or {}).get(where)
        line = 0
        if unknown and found is not None:
            text, index, prefix = found
            line = key_line(text, index, [*prefix, *path_parts(unknown[0].path)])
        at = f"line {line}: " if line else ""
        raise ScenarioError(f"{where}: {at}invalid: {lines}") from err
    dumped: dict[str, Any] = model.model_dump(by_alias=True, mode="json")
    return dumped


def _pod_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{_name(obj)}"


def _add_pods(sc: Scenario, pods: Sequence[dict[str, Any]], where: str) -> None:
    for pod in pods:
        key = _pod_key(pod)
        first = sc.pod_where.get(key)
        if first is not None:
            raise ScenarioError(f"{where}: metadata.name: pod {key} is also in {first}; pod names must be unique")
        sc.pod_where[key] = where
        sc.pods.append(pod)


def load_scenario(documents: Sequence[tuple[str, Mapping[str, Any]]], *, located: Located | None = None) -> Scenario:
    sc = Scenario()
    pool_where: dict[str, str] = {}
    for where, obj in documents:
        kind = obj.get("kind")
        if not isinstance(kind, str) or kind not in KNOWN_KINDS:
            raise ScenarioError(f"{where}: kind: unknown kind {kind!r} (expected one of {', '.join(KNOWN_KINDS)})")
        meta = obj.get("metadata")
        if meta is not None and not isinstance(meta, Mapping):
            raise ScenarioError(f"{where}: metadata: must be an object, got {type(meta).__name__}")
        name = (meta or {}).get("name")
        if name is not None and not isinstance(name, str):
            raise ScenarioError(f"{where}: metadata.name: must be a string, got {name!r}")
        namespace = (meta or {}).get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise ScenarioError(f"{where}: metadata.namespace: must be a string, got {namespace!r}")
        if kind in ("Pod", "Node", "DaemonSet", "ConfigMap", *WORKLOAD_KINDS) and not _name(obj):
            raise ScenarioError(f"{where}: metadata.name: required")
        if kind in ("Pod", "Node", "DaemonSet", "ConfigMap", *WORKLOAD_KINDS):
            for part in ("spec", "status", "data"):
                _object_field(obj, part, where, part)
        if kind == "Pod":
            if len(sc.pods) >= MAX_PODS:
                raise ScenarioError(
                    f"{where}: the scenario has more than {MAX_PODS:,} pods (the most joiner plan reads)"
                )
            _add_pods(sc, [dict(obj)], where)
        elif kind in WORKLOAD_KINDS:
            _add_pods(sc, _workload_pods(obj, where, room=MAX_PODS - len(sc.pods)), where)
        elif kind == "NodePool":
            pool = _validated(obj, where, located)
            if _name(pool) in pool_where:
                raise ScenarioError(
                    f"{where}: metadata.name: NodePool {_name(pool)!r} is also in {pool_where[_name(pool)]}"
                )
            pool_where[_name(pool)] = where
            sc.nodepools.append((where, pool))
        elif kind == "KWOKNodeClass":
            sc.nodeclasses[_name(obj)] = _validated(obj, where, located)
        elif kind == "NodeClaim":
            sc.nodeclaims.append(_validated(obj, where, located))
        elif kind == "Node":
            sc.nodes.append(dict(obj))
        elif kind == "DaemonSet":
            sc.daemonsets.append(dict(obj))
        elif kind == "ConfigMap":
            meta = obj.get("metadata") or {}
            sc.configmaps[f"{meta.get('namespace') or 'default'}/{_name(obj)}"] = dict(obj)
    return sc


# --- solving ---------------------------------------------------------------------------------


def _catalog_for(
    pool: Mapping[str, Any], sc: Scenario, default: tuple[InstanceType, ...], where: str
) -> tuple[InstanceType, ...]:
    ref = (((pool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    nodeclass = sc.nodeclasses.get(str(ref.get("name"))) if ref.get("kind") == "KWOKNodeClass" else None
    catalog_ref = ((nodeclass or {}).get("spec") or {}).get("catalog")
    if not catalog_ref:
        return default
    cm = sc.configmaps.get(str(catalog_ref))
    if cm is None:
        raise ScenarioError(
            f"{where}: KWOKNodeClass {ref.get('name')!r} spec.catalog refers to ConfigMap {catalog_ref}, "
            "which is not in the scenario"
        )
    text = (cm.get("data") or {}).get(CATALOG_KEY)
    if not isinstance(text, str):
        raise ScenarioError(f"ConfigMap {catalog_ref}: data.{CATALOG_KEY}: required")
    try:
        return parse_catalog_text(text, source=f"ConfigMap {catalog_ref}")
    except CatalogError as err:
        raise ScenarioError(str(err)) from err


@dataclass(frozen=True)
class Inputs:
    pods: tuple[Pod, ...]
    pools: tuple[NodePoolTemplate, ...]
    existing: tuple[ExistingNode, ...]
    daemons: tuple[Pod, ...]
    gangs: tuple[Gang, ...]
    # every gang's unfinished members, bound or not, in scenario order (for its size)
    members: Mapping[str, tuple[Obj, ...]] = field(default_factory=dict)


def _pod(obj: Obj, sc: Scenario, *, detect_gang: bool = True) -> Pod:
    try:
        return pod_from_dict(obj, detect_gang=detect_gang)
    except ConversionError as err:
        raise ScenarioError(f"{sc.pod_where.get(_pod_key(obj), 'scenario')}: {err}") from err


def _converted(where: str, convert: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return convert(*args, **kwargs)
    except ConversionError as err:
        raise ScenarioError(f"{where}: {err}") from err


def _missing_nodeclasses(sc: Scenario) -> list[str]:
    """Warnings for NodePools whose NodeClass is not in the scenario (planned with the built-in catalog)."""
    out = []
    for where, np_obj in sc.nodepools:
        ref = np_obj["spec"]["template"]["spec"]["nodeClassRef"]
        if ref.get("kind") != "KWOKNodeClass" or (sc.nodeclasses and ref.get("name") not in sc.nodeclasses):
            out.append(
                f"{where}: spec.template.spec.nodeClassRef: {ref.get('kind')} {ref.get('name')!r} is not in the "
                "scenario; planned with the built-in catalog (the controller launches nothing from this pool "
                "until the NodeClass exists)"
            )
    return out


def _short_gangs(sc: Scenario, members: Mapping[str, Sequence[Obj]]) -> dict[str, str]:
    """Gang -> why it waits: fewer members exist than its ``joiner.sh/gang-size`` (the controller waits too)."""
    if not members:
        return {}
    from controller.state.views import PodView  # (only a scenario with gangs needs the views)

    out = {}
    for gid, pods in members.items():
        options = gang_options([PodView.of(p) for p in pods])
        if options.problems:
            raise ScenarioError(f"{sc.pod_where.get(_pod_key(pods[0]), 'scenario')}: gang {gid}: {options.problems[0]}")
        if options.size is not None and len(pods) < options.size:
            out[gid] = (
                f"gang {gid} has {len(pods)} of {options.size} members: joiner waits for every member "
                "before it buys nodes for any"
            )
    return out


def build_inputs(sc: Scenario, catalog: tuple[InstanceType, ...]) -> Inputs:
    pending: list[Pod] = []
    bound: dict[str, list[Pod]] = {}
    # each gang's unbound pods (finished ones too), for its same-zone annotation, and its
    # unfinished pods (bound ones too), for its size
    members: dict[str, list[Obj]] = {}
    unfinished: dict[str, list[Obj]] = {}
    for obj in sc.pods:
        node_name = (obj.get("spec") or {}).get("nodeName")
        terminal = is_terminal(obj)
        if terminal or node_name:
            gid = _converted(sc.pod_where.get(_pod_key(obj), "scenario"), gang_of, obj)
            if terminal:
                if gid is not None and not node_name:
                    members.setdefault(gid, []).append(obj)
                continue
            if gid is not None:
                unfinished.setdefault(gid, []).append(obj)
            bound.setdefault(str(node_name), []).append(_pod(obj, sc, detect_gang=False))
        else:
            pod = _pod(obj, sc)
            pending.append(pod)
            if pod.gang is not None:
                members.setdefault(pod.gang, []).append(obj)
                unfinished.setdefault(pod.gang, []).append(obj)
    existing = [_converted(f"Node {_name(n)!r}", node_from_dict, n, pods=bound.pop(_name(n), [])) for n in sc.nodes]
    if bound:
        missing = ", ".join(sorted(bound))
        raise ScenarioError(f"pods are bound (spec.nodeName) to nodes not in the scenario: {missing}")
    default_types = catalog
    for claim in sc.nodeclaims:
        in_flight = _converted(f"NodeClaim {_name(claim)!r}", nodeclaim_from_dict, claim, instance_types=default_types)
        if in_flight is not None and not any(e.name == in_flight.name for e in existing):
            existing.append(in_flight)
    # the NodePools as the controller makes them (state/inputs.py): validated once into their view,
    # usage counted from the scenario's machines
    from controller.state.inputs import pool_template  # (the views, as _short_gangs reads them)
    from controller.state.views import NodePoolView

    pools = [
        _converted(
            where, pool_template, NodePoolView.of(dict(np_obj)), _catalog_for(np_obj, sc, catalog, where), existing
        )
        for where, np_obj in sc.nodepools
    ]
    daemons = [_converted(f"DaemonSet {_name(d)!r}", daemonset_from_dict, d) for d in sc.daemonsets]
    # as the controller does: a gang's nodes share one zone unless the gang's annotation or
    # every NodePool's spec.gang.sameZone says otherwise
    pools_spread = bool(sc.nodepools) and all(
        ((np_obj.get("spec") or {}).get("gang") or {}).get("sameZone") is False for _, np_obj in sc.nodepools
    )
    gangs = tuple(
        Gang(g, same_zone=_same_zone(members.get(g, []), default=not pools_spread))
        for g in sorted({p.gang for p in pending if p.gang is not None})
    )
    return Inputs(
        tuple(pending),
        tuple(pools),
        tuple(existing),
        tuple(daemons),
        gangs,
        {gid: tuple(objs) for gid, objs in unfinished.items()},
    )


def _same_zone(pods: list[Obj], *, default: bool) -> bool:
    for obj in sorted(pods, key=_name):
        raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_GANG_SAME_ZONE)
        if raw is not None and str(raw).strip().lower() in ("true", "false"):
            return str(raw).strip().lower() == "true"
    return default


def _bounded(plan: Plan, sc: Scenario, pools: Sequence[NodePoolTemplate]) -> Plan:
    """The plan cut to each pool's $/hour budget and ``limits.nodes``, as the provisioner cuts it,
    counting the scenario's NodeClaims as what the pools hold."""
    if not plan.new_nodes:
        return plan
    from controller.state.spend import pool_bounds  # (only a plan that buys needs the views)
    from controller.state.views import NodeClaimView

    types = {it.name: it for pool in pools for it in pool.instance_types}
    claims = [NodeClaimView.of(claim) for claim in sc.nodeclaims]
    bounds = pool_bounds({_name(obj): obj for _, obj in sc.nodepools}, claims, types)
    return apply_bounds(plan, bounds).plan


def plan_scenario(
    texts: Iterable[tuple[str, str]], *, catalog: tuple[InstanceType, ...], warnings: list[str] | None = None
) -> Plan:
    """The plan for a scenario; ``warnings`` (if given) receives what the user should know."""
    located: Located = {}
    sc = load_scenario(read_documents(texts, located=located), located=located)
    inputs = build_inputs(sc, catalog)
    if warnings is not None:
        warnings.extend(_missing_nodeclasses(sc))
    waiting = _short_gangs(sc, inputs.members)
    pods = tuple(p for p in inputs.pods if p.gang not in waiting)
    plan = solve(
        pods=pods,
        node_pools=inputs.pools,
        existing_nodes=inputs.existing,
        daemon_pods=inputs.daemons,
        gangs=tuple(g for g in inputs.gangs if g.id not in waiting),
    )
    plan = _bounded(plan, sc, inputs.pools)
    if not waiting:
        return plan
    held = {f"{p.namespace}/{p.name}": waiting[p.gang] for p in inputs.pods if p.gang in waiting}
    return replace(plan, unschedulable={**plan.unschedulable, **held})


# --- output ----------------------------------------------------------------------------------


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The JSON form: ``nodeClaims``, ``existingNodes``, ``unschedulable``, ``totalPrice``."""
    # nodes share their candidate tuples (up to one per catalog instance type): named once each,
    # and each node gets its own list of the names
    names: dict[int, tuple[tuple[Any, ...], list[str]]] = {}

    def type_names(candidates: tuple[Any, ...]) -> list[str]:
        got = names.get(id(candidates))
        if got is None or got[0] is not candidates:
            got = names[id(candidates)] = (candidates, [c.instance_type for c in candidates])
        return list(got[1])

    return {
        "nodeClaims": [
            {
                "name": n.name,
                "nodePool": n.node_pool,
                "instanceType": n.choice.instance_type,
                "instanceTypes": type_names(n.candidates),
                "zone": n.choice.zone,
                "capacityType": n.choice.capacity_type,
                "price": round(n.choice.price, 6),
                "pods": list(n.pods),
                "gang": n.gang,
                "requests": n.requests.to_quantities(),
                "requirements": n.requirements.to_expressions(),
            }
            for n in plan.new_nodes
        ],
        "existingNodes": [{"node": name, "pods": list(pods)} for name, pods in plan.existing_placements.items()],
        "unschedulable": [{"pod": pod, "reason": reason} for pod, reason in plan.unschedulable.items()],
        "totalPrice": round(plan.total_price, 6),
    }


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def plan_to_table(plan: Plan) -> str:
    out: list[str] = []
    if plan.new_nodes:
        rows = [["NODECLAIM", "NODEPOOL", "INSTANCE-TYPE", "ZONE", "CAPACITY", "$/H", "PODS", "GANG", "FALLBACKS"]]
        for n in plan.new_nodes:
            rows.append(
                [
                    n.name,
                    n.node_pool,
                    n.choice.instance_type,
                    n.choice.zone,
                    n.choice.capacity_type,
                    f"{n.choice.price:.4f}",
                    str(len(n.pods)),
                    n.gang or "-",
                    str(len(n.candidates) - 1),
                ]
            )
        out.append(_table(rows))
    else:
        out.append("No new nodes.")
    if plan.existing_placements:
        rows = [["EXISTING-NODE", "PODS", "NEW-PODS"]]
        for name, pods in plan.existing_placements.items():
            shown = ", ".join(pods[:3]) + (f", ... ({len(pods)})" if len(pods) > 3 else "")
            rows.append([name, str(len(pods)), shown])
        out.append(_table(rows))
    if plan.unschedulable:
        rows = [["UNSCHEDULABLE-POD", "REASON"]]
        rows.extend([pod, reason] for pod, reason in plan.unschedulable.items())
        out.append(_table(rows))
    placed = sum(len(n.pods) for n in plan.new_nodes)
    out.append(
        f"Total: {len(plan.new_nodes)} new nodes for {placed} pods, "
        f"{sum(len(p) for p in plan.existing_placements.values())} pods on existing nodes, "
        f"{len(plan.unschedulable)} unschedulable, ${plan.total_price:.4f}/h"
    )
    return "\n\n".join(out)


# --- command ---------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``joiner plan``."""
    p = subparsers.add_parser(
        "plan",
        help="show what joiner would buy for a scenario (the solver, offline)",
        description=for_terminal(__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-f", "--filename", action="append", required=True, metavar="FILE", help="scenario YAML/JSON; '-' for stdin"
    )
    p.add_argument("--catalog", metavar="FILE", help="instance catalog JSON (default: the built-in KWOK catalog)")
    p.add_argument(
        "-o", "--output", choices=["table", "json", "yaml"], default="table", help="output format (default: table)"
    )
    p.set_defaults(handler=run)


def _read(name: str) -> tuple[str, str]:
    source = "<stdin>" if name == "-" else name
    try:
        if name == "-":
            buffer = getattr(sys.stdin, "buffer", None)
            return (source, buffer.read().decode("utf-8") if buffer is not None else sys.stdin.read())
        return (source, Path(name).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ScenarioError(
            f"{source}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start})"
        ) from err


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())


@dataclass(frozen=True)
class Outcome:
    """What ``joiner plan`` prints and returns: the exit status, stdout and stderr."""

    code: int
    out: str
    err: str
    plan: Plan | None = None


def execute(
    texts: Sequence[tuple[str, str]],
    *,
    catalog: tuple[InstanceType, ...] | None = None,
    catalog_text: str | None = None,
    output: str = "table",
) -> Outcome:
    """``joiner plan`` in process: scenario texts (and a catalog, given or as JSON text) in, what it
    prints out. Bad input gives ``code`` 1 and one ``error:`` line, never an exception."""
    warnings: list[str] = []
    try:
        if catalog is None:
            catalog = parse_catalog_text(catalog_text, source="catalog") if catalog_text is not None else load_catalog()
        plan = plan_scenario(texts, catalog=catalog, warnings=warnings)
    except (ScenarioError, CatalogError, OSError) as error:
        return Outcome(1, "", f"error: {_one_line(error)}\n")
    told = "".join(f"warning: {_one_line(Exception(w))}\n" for w in warnings)
    if output == "json":
        out = dumps_json_pretty(plan_to_dict(plan)) + "\n"
    elif output == "yaml":
        out = dump_yaml(plan_to_dict(plan), sort_keys=False)
    else:
        out = plan_to_table(plan) + "\n"
    return Outcome(0, out, told, plan)


def run(args: argparse.Namespace) -> int:
    try:
        catalog = load_catalog(args.catalog)
        texts = [_read(name) for name in args.filename]
    except (ScenarioError, CatalogError, OSError) as err:
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return 1
    # a short-lived process that builds many objects and frees them by reference count: the cyclic
    # collector would only re-scan them (about a tenth of the whole command's time)
    collecting = gc.isenabled()
    gc.disable()
    try:
        outcome = execute(texts, catalog=catalog, output=args.output)
    finally:
        if collecting:
            gc.enable()
    sys.stderr.write(outcome.err)
    sys.stdout.write(outcome.out)
    return outcome.code
