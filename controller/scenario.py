"""A ``joiner plan`` scenario: multi-document YAML (or JSON) read strictly into a :class:`Scenario`.

:func:`read_documents` reads the texts (one line that names the document and the field for bad
input: a key twice, a field the kind does not have, a document nested too deep); :func:`load_scenario`
sorts the objects by kind, validates joiner's kinds like the apiserver would and expands workloads
into their pods. What the scenario may hold, and what the plan of it is, is ``plan.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from controller.serialization import (
    DuplicateKeyError,
    SafeLoader,
    key_line,
    load_all_yaml,
)
from controller.strict import path_parts, path_text, unknown_field

Obj = dict[str, Any]
WORKLOAD_KINDS: Final = ("Deployment", "StatefulSet", "ReplicaSet", "Job")
VOLUME_KINDS: Final = ("PersistentVolumeClaim", "PersistentVolume", "StorageClass")
KNOWN_KINDS: Final = (
    "Pod",
    *WORKLOAD_KINDS,
    "NodePool",
    "KWOKNodeClass",
    "NodeClaim",
    "Node",
    "DaemonSet",
    "ConfigMap",
    *VOLUME_KINDS,
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
    # claims by namespace/name, volumes and StorageClasses by name (where pods' volumes let them run)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    volumes: dict[str, dict[str, Any]] = field(default_factory=dict)
    storage_classes: dict[str, dict[str, Any]] = field(default_factory=dict)


# --- reading -------------------------------------------------------------------------------------


def _name(obj: Mapping[str, Any]) -> str:
    # (here and below, a dict is known by its type before the Mapping ABC's slower check)
    meta = obj.get("metadata")
    return str(meta.get("name") or "") if type(meta) is dict or isinstance(meta, Mapping) else ""


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
    that might be deep gets a pass over its events (libyaml's parser itself is iterative). An empty
    ``{}`` or ``[]`` holds nothing, so it adds one level at most wherever it is: what ``kubectl get
    -o yaml`` prints (a ``securityContext: {}`` in every pod) needs no pass however many pods it has.
    """
    openers = 0
    for opener, empty in (("[", "[]"), ("{", "{}")):
        found = text.count(opener)
        openers += found - text.count(empty) if found else 0
    # lines no longer than the bound leaves room for: found with a few searches when every run
    # between line feeds is short enough (the lines cut at every break are parts of those runs),
    # else measured as before
    room = _CHEAP_DEPTH - 1 - openers
    if _runs_at_most(text, room) or openers + 1 + max(map(len, text.splitlines()), default=0) <= _CHEAP_DEPTH:
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


def _runs_at_most(text: str, limit: int) -> bool:
    """Whether every run of ``text`` between line feeds (and its ends) is at most ``limit`` long:
    one search per ``limit`` characters or so, for the last line feed within reach."""
    end = len(text)
    at = 0  # where the current run starts
    while end - at > limit:
        feed = text.rfind("\n", at, at + limit + 1)
        if feed < 0:
            return False
        at = feed + 1
    return True


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
            if type(doc) is not dict and not isinstance(doc, Mapping):
                raise ScenarioError(f"{_where(source, index)}: must be an object with apiVersion and kind")
            if doc.get("kind") == "List":
                items = doc.get("items") or []
                if not isinstance(items, list):
                    raise ScenarioError(f"{_where(source, index, doc)}: items: must be a list")
                for j, item in enumerate(items):
                    if type(item) is not dict and not isinstance(item, Mapping):
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
    if type(value) is not dict and not isinstance(value, Mapping):
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
        if meta is not None and type(meta) is not dict and not isinstance(meta, Mapping):
            raise ScenarioError(f"{where}: metadata: must be an object, got {type(meta).__name__}")
        name = (meta or {}).get("name")
        if name is not None and not isinstance(name, str):
            raise ScenarioError(f"{where}: metadata.name: must be a string, got {name!r}")
        namespace = (meta or {}).get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise ScenarioError(f"{where}: metadata.namespace: must be a string, got {namespace!r}")
        if kind in ("Pod", "Node", "DaemonSet", "ConfigMap", *WORKLOAD_KINDS, *VOLUME_KINDS) and not _name(obj):
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
        elif kind == "PersistentVolumeClaim":
            meta = obj.get("metadata") or {}
            sc.claims[f"{meta.get('namespace') or 'default'}/{_name(obj)}"] = dict(obj)
        elif kind == "PersistentVolume":
            sc.volumes[_name(obj)] = dict(obj)
        elif kind == "StorageClass":
            sc.storage_classes[_name(obj)] = dict(obj)
    return sc
