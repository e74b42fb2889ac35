"""Typed, read-only views of the objects the cache holds: one parse per watch event, then plain
attribute reads everywhere. Pure: no I/O, no clock.

* :class:`Condition` -- a status condition; :func:`find_condition` is the one way to read one.
* :class:`PodView`, :class:`NodeView`, :class:`NodeClaimView` -- made once per event from the
  apiserver's dict (``X.of(obj)``); ``.raw`` keeps that dict for the kube edge (patches with a
  ``test`` of the current value, Events, manifests).
* :class:`NodePoolView` -- a NodePool validated once per event: the API model, or why it is invalid.
* :class:`StateNode` -- a Node and its NodeClaim joined by providerID; either may be missing
  (a NodeClaim not registered yet, a Node joiner does not manage).

Views hold the raw mappings (labels, annotations, resources) behind read-only proxies rather than
copies, so making one costs a handful of dict lookups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final, NamedTuple, TypeVar

from api.v1.conditions import INITIALIZED, LAUNCHED, REGISTERED
from api.v1.labels import (
    ANNOTATION_DO_NOT_DISRUPT,
    ANNOTATION_EVICTION_PRIORITY,
    ANNOTATION_PLANNED_INSTANCE_TYPE,
    EVICTION_PRIORITIES,
    FINALIZER_TERMINATION,
    LABEL_CAPACITY_TYPE,
    LABEL_GANG,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
    TAINT_DISRUPTED,
    TAINT_DISRUPTED_EFFECT,
)
from controller.clock import parse_time
from controller.scheduling.taints import Taint, Toleration
from controller.state.nodepool_view import NodePoolView as NodePoolView  # re-exported: a view like the others

Raw = Mapping[str, Any]
Obj = dict[str, Any]
"""A Kubernetes object as JSON, as the apiserver sends it: what views are made from, and what writes send."""

ANNOTATION_MIRROR: Final = "kubernetes.io/config.mirror"
"""On a mirror pod of a static pod."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_TERMINAL_PHASES: Final = ("Succeeded", "Failed")
DAEMONSET: Final = "DaemonSet"


class ControllerRef(NamedTuple):
    """The object that made a pod and keeps its count (its ``controller: true`` ownerReference)."""

    kind: str
    namespace: str
    name: str
    uid: str


def controller_ref(namespace: str, meta: Mapping[str, Any]) -> ControllerRef | None:
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("uid"):
            return ControllerRef(str(ref.get("kind") or ""), namespace, str(ref.get("name") or ""), str(ref["uid"]))
    return None


def _map(value: Any) -> Mapping[str, Any]:
    return MappingProxyType(value) if isinstance(value, dict) else _EMPTY


def _strs(values: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in values or ())


def _opt(value: Any) -> str | None:
    return str(value) if value else None


def _namespace_name(meta: Raw) -> tuple[str, str]:
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def pod_key(obj: Raw) -> str:
    """``namespace/name`` of a pod dict (namespace ``default`` when unset): how joiner names pods.
    The same as `PodView.key`, for the kube edge where only the dict is at hand."""
    return "/".join(_namespace_name(obj.get("metadata") or {}))


# --- conditions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str = "Unknown"
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None

    @staticmethod
    def of(raw: Raw) -> Condition:
        gen = raw.get("observedGeneration")
        return Condition(
            type=str(raw.get("type") or ""),
            status=str(raw.get("status") or "Unknown"),
            reason=str(raw.get("reason") or ""),
            message=str(raw.get("message") or ""),
            last_transition_time=_opt(raw.get("lastTransitionTime")),
            observed_generation=gen if isinstance(gen, int) else None,
        )

    @property
    def is_true(self) -> bool:
        return self.status == "True"

    @property
    def transitioned(self) -> datetime | None:
        return parse_time(self.last_transition_time)


def raw_conditions(obj: Raw) -> tuple[Raw, ...]:
    return tuple((obj.get("status") or {}).get("conditions") or ())


def find_condition(raw: Iterable[Raw], ctype: str) -> Condition | None:
    """The condition of type `ctype` among JSON conditions: the one place conditions are read."""
    for cond in raw:
        if cond.get("type") == ctype:
            return Condition.of(cond)
    return None


def condition_of(obj: Raw, ctype: str) -> Condition | None:
    """One status condition of an object as the apiserver sends it (for callers without a view)."""
    return find_condition(raw_conditions(obj), ctype)


class HasConditions:
    """`condition()` and `is_true()` for views. Conditions stay JSON until asked for: most events
    are read for one or two of them, and parsing all of every pod's would be most of a view's cost."""

    __slots__ = ()
    raw_conditions: tuple[Raw, ...]

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return tuple(Condition.of(c) for c in self.raw_conditions)

    def condition(self, ctype: str) -> Condition | None:
        return find_condition(self.raw_conditions, ctype)

    def is_true(self, ctype: str) -> bool:
        cond = find_condition(self.raw_conditions, ctype)
        return cond is not None and cond.is_true

    def transition_time(self, ctype: str) -> datetime | None:
        cond = find_condition(self.raw_conditions, ctype)
        return cond.transitioned if cond is not None else None


# --- taints ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaintRef:
    """A taint as it is written on a Node or NodeClaim (``value`` may be empty)."""

    key: str
    effect: str
    value: str = ""

    @staticmethod
    def of(raw: Raw) -> TaintRef:
        return TaintRef(
            key=str(raw.get("key") or ""), effect=str(raw.get("effect") or ""), value=str(raw.get("value") or "")
        )

    @property
    def ident(self) -> tuple[str, str]:
        return (self.key, self.effect)

    def as_dict(self) -> dict[str, str]:
        """The JSON shape, without the empty fields."""
        return {k: v for k, v in (("key", self.key), ("value", self.value), ("effect", self.effect)) if v}


def _taints(values: Any) -> tuple[TaintRef, ...]:
    return tuple(TaintRef.of(t) for t in values or () if isinstance(t, Mapping))


# --- pods ------------------------------------------------------------------------------------


DEFAULT_SCHEDULER: Final = "default-scheduler"


@dataclass(frozen=True, slots=True)
class PodView(HasConditions):
    raw: Obj
    key: str
    namespace: str
    name: str
    uid: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    node_name: str | None
    phase: str | None
    scheduling_gates: tuple[str, ...]
    owner_kinds: tuple[str, ...]
    priority_class_name: str | None
    raw_tolerations: tuple[Raw, ...]  # parsed only when asked (`tolerates`): most readers never need them
    node_selector: Mapping[str, str]
    nominated_node_name: str | None
    creation_timestamp: str | None
    deletion_timestamp: str | None
    raw_conditions: tuple[Raw, ...]
    scheduler_name: str = DEFAULT_SCHEDULER
    controller: ControllerRef | None = None

    @staticmethod
    def of(obj: Obj) -> PodView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        namespace, name = _namespace_name(meta)
        return PodView(
            raw=obj,
            key=f"{namespace}/{name}",
            namespace=namespace,
            name=name,
            uid=_opt(meta.get("uid")),
            labels=_map(meta.get("labels")),
            annotations=_map(meta.get("annotations")),
            node_name=_opt(spec.get("nodeName")),
            phase=_opt(status.get("phase")),
            scheduling_gates=tuple(str(g.get("name") or "") for g in spec.get("schedulingGates") or ()),
            owner_kinds=tuple(str(ref.get("kind") or "") for ref in meta.get("ownerReferences") or ()),
            priority_class_name=_opt(spec.get("priorityClassName")),
            raw_tolerations=tuple(spec.get("tolerations") or ()),
            node_selector=_map(spec.get("nodeSelector")),
            nominated_node_name=_opt(status.get("nominatedNodeName")),
            creation_timestamp=_opt(meta.get("creationTimestamp")),
            deletion_timestamp=_opt(meta.get("deletionTimestamp")),
            raw_conditions=raw_conditions(obj),
            scheduler_name=str(spec.get("schedulerName") or DEFAULT_SCHEDULER),
            controller=controller_ref(namespace, meta),
        )

    @property
    def created(self) -> datetime | None:
        return parse_time(self.creation_timestamp)

    @property
    def is_daemon(self) -> bool:
        return DAEMONSET in self.owner_kinds

    @property
    def is_mirror(self) -> bool:
        return ANNOTATION_MIRROR in self.annotations

    @property
    def is_terminal(self) -> bool:
        """Succeeded or Failed: it holds no resources any more."""
        return self.phase in _TERMINAL_PHASES

    @property
    def deleting(self) -> bool:
        return self.deletion_timestamp is not None

    @property
    def waiting_for_node(self) -> bool:
        """Not bound, not being deleted, not finished: still to be placed."""
        return not self.node_name and not self.deleting and not self.is_terminal

    @property
    def do_not_disrupt(self) -> bool:
        return self.annotations.get(ANNOTATION_DO_NOT_DISRUPT) == "true"

    @property
    def eviction_priority(self) -> str | None:
        """``low``, ``medium`` or ``high`` from ``joiner.sh/eviction-priority`` (unset: ``medium``);
        None when the annotation holds anything else."""
        raw = self.annotations.get(ANNOTATION_EVICTION_PRIORITY)
        if raw is None:
            return "medium"
        value = raw.strip().lower()
        return value if value in EVICTION_PRIORITIES else None

    @property
    def is_unschedulable(self) -> bool:
        """kube-scheduler tried and could not place it: PodScheduled=False/Unschedulable, not bound yet."""
        if self.node_name or self.deleting or self.is_terminal:
            return False
        scheduled = self.condition("PodScheduled")
        return scheduled is not None and scheduled.status == "False" and scheduled.reason == "Unschedulable"

    @property
    def awaits_scheduler(self) -> bool:
        """kube-scheduler has not tried it yet: not bound, not gated, no PodScheduled condition."""
        if self.node_name or self.scheduling_gates or self.deleting:
            return False
        return not self.is_terminal and self.condition("PodScheduled") is None

    def tolerates(self, *, key: str, effect: str, value: str = "") -> bool:
        """Whether one of its tolerations matches the taint (the scheduler's matching rules)."""
        taint = Taint(key=key, effect=effect, value=value)
        return any(Toleration.from_dict(t).tolerates(taint) for t in self.raw_tolerations if isinstance(t, Mapping))

    @property
    def is_drainable(self) -> bool:
        """Whether draining its node evicts it: not a DaemonSet or mirror pod, not finished, and not
        tolerating the ``joiner.sh/disrupted:NoSchedule`` taint (it would be scheduled right back)."""
        if self.is_daemon or self.is_mirror or self.is_terminal:
            return False
        return not self.tolerates(key=TAINT_DISRUPTED, effect=TAINT_DISRUPTED_EFFECT)

    @property
    def bound_at(self) -> datetime | None:
        """When it was bound to its node (PodScheduled=True), or None."""
        cond = self.condition("PodScheduled")
        return cond.transitioned if cond is not None and cond.is_true else None


# --- nodes -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeView(HasConditions):
    raw: Obj
    name: str
    uid: str | None
    provider_id: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    taints: tuple[TaintRef, ...]
    unschedulable: bool
    allocatable: Mapping[str, Any]
    capacity: Mapping[str, Any]
    finalizers: tuple[str, ...]
    owner_uids: tuple[str, ...]
    deletion_timestamp: str | None
    resource_version: str
    raw_conditions: tuple[Raw, ...]

    @staticmethod
    def of(obj: Obj) -> NodeView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return NodeView(
            raw=obj,
            name=str(meta.get("name") or ""),
            uid=_opt(meta.get("uid")),
            provider_id=_opt(spec.get("providerID")),
            labels=_map(meta.get("labels")),
            annotations=_map(meta.get("annotations")),
            taints=_taints(spec.get("taints")),
            unschedulable=bool(spec.get("unschedulable", False)),
            allocatable=_map(status.get("allocatable")),
            capacity=_map(status.get("capacity")),
            finalizers=_strs(meta.get("finalizers")),
            owner_uids=tuple(str(ref.get("uid")) for ref in meta.get("ownerReferences") or () if ref.get("uid")),
            deletion_timestamp=_opt(meta.get("deletionTimestamp")),
            resource_version=str(meta.get("resourceVersion") or ""),
            raw_conditions=raw_conditions(obj),
        )

    @property
    def ready(self) -> bool:
        return self.is_true("Ready")

    @property
    def deleting(self) -> bool:
        return self.deletion_timestamp is not None

    def has_taint(self, key: str, effect: str | None = None) -> bool:
        return any(t.key == key and (effect is None or t.effect == effect) for t in self.taints)

    def has_finalizer(self, finalizer: str = FINALIZER_TERMINATION) -> bool:
        return finalizer in self.finalizers


# --- NodeClaims ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeClaimView(HasConditions):
    raw: Obj
    name: str
    uid: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    finalizers: tuple[str, ...]
    creation_timestamp: str | None
    deletion_timestamp: str | None
    resource_version: str
    generation: int | None
    # spec
    requirements: tuple[Raw, ...]
    requests: Mapping[str, Any]
    taints: tuple[TaintRef, ...]
    startup_taints: tuple[TaintRef, ...]
    node_class_ref: Mapping[str, Any]
    expire_after: str | None
    termination_grace_period: str | None
    # status
    provider_id: str | None
    node_name: str | None
    image_id: str | None
    allocatable: Mapping[str, Any]
    capacity: Mapping[str, Any]
    last_pod_event_time: str | None
    raw_conditions: tuple[Raw, ...]

    @staticmethod
    def of(obj: Obj) -> NodeClaimView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        gen = meta.get("generation")
        return NodeClaimView(
            raw=obj,
            name=str(meta.get("name") or ""),
            uid=_opt(meta.get("uid")),
            labels=_map(meta.get("labels")),
            annotations=_map(meta.get("annotations")),
            finalizers=_strs(meta.get("finalizers")),
            creation_timestamp=_opt(meta.get("creationTimestamp")),
            deletion_timestamp=_opt(meta.get("deletionTimestamp")),
            resource_version=str(meta.get("resourceVersion") or ""),
            generation=gen if isinstance(gen, int) else None,
            requirements=tuple(r for r in spec.get("requirements") or () if isinstance(r, Mapping)),
            requests=_map((spec.get("resources") or {}).get("requests")),
            taints=_taints(spec.get("taints")),
            startup_taints=_taints(spec.get("startupTaints")),
            node_class_ref=_map(spec.get("nodeClassRef")),
            expire_after=_opt(spec.get("expireAfter")),
            termination_grace_period=_opt(spec.get("terminationGracePeriod")),
            provider_id=_opt(status.get("providerID")),
            node_name=_opt(status.get("nodeName")),
            image_id=_opt(status.get("imageID")),
            allocatable=_map(status.get("allocatable")),
            capacity=_map(status.get("capacity")),
            last_pod_event_time=_opt(status.get("lastPodEventTime")),
            raw_conditions=raw_conditions(obj),
        )

    @property
    def nodepool(self) -> str:
        return str(self.labels.get(LABEL_NODEPOOL) or "")

    @property
    def gang(self) -> str | None:
        return _opt(self.labels.get(LABEL_GANG))

    @property
    def instance_type(self) -> str | None:
        """The instance type it launched on (label), or None before launch."""
        return _opt(self.labels.get(LABEL_INSTANCE_TYPE))

    @property
    def planned_instance_type(self) -> str | None:
        """The instance type the plan chose when it was created (annotation), or None."""
        return _opt(self.annotations.get(ANNOTATION_PLANNED_INSTANCE_TYPE))

    @property
    def zone(self) -> str | None:
        return _opt(self.labels.get(LABEL_ZONE))

    @property
    def capacity_type(self) -> str | None:
        return _opt(self.labels.get(LABEL_CAPACITY_TYPE))

    @property
    def node_class(self) -> str | None:
        return _opt(self.node_class_ref.get("name"))

    @property
    def created(self) -> datetime | None:
        return parse_time(self.creation_timestamp)

    @property
    def deleted_at(self) -> datetime | None:
        return parse_time(self.deletion_timestamp)

    @property
    def deleting(self) -> bool:
        return self.deletion_timestamp is not None

    @property
    def launched(self) -> bool:
        return self.is_true(LAUNCHED)

    @property
    def registered(self) -> bool:
        return self.is_true(REGISTERED)

    @property
    def initialized(self) -> bool:
        return self.is_true(INITIALIZED)

    def has_finalizer(self, finalizer: str = FINALIZER_TERMINATION) -> bool:
        return finalizer in self.finalizers


_V = TypeVar("_V", NodeClaimView, NodeView)


def newer(a: _V | None, b: _V | None) -> _V | None:
    """The more recent of two versions of one object (by resourceVersion, which etcd makes numeric)."""
    if a is None or b is None:
        return a if b is None else b
    ra, rb = a.resource_version, b.resource_version
    if ra.isdigit() and rb.isdigit():
        return a if int(ra) >= int(rb) else b
    return b


# --- Node + NodeClaim ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StateNode:
    """A machine as joiner knows it: its Node, its NodeClaim, or both (joined by providerID)."""

    node: NodeView | None = None
    claim: NodeClaimView | None = None

    def __post_init__(self) -> None:
        if self.node is None and self.claim is None:
            raise ValueError("a StateNode needs a Node or a NodeClaim")

    @property
    def name(self) -> str:
        """The Node's name; the NodeClaim's recorded nodeName or its own name before registration."""
        if self.node is not None:
            return self.node.name
        assert self.claim is not None
        return self.claim.node_name or self.claim.name

    @property
    def provider_id(self) -> str | None:
        if self.node is not None and self.node.provider_id:
            return self.node.provider_id
        return self.claim.provider_id if self.claim is not None else None

    @property
    def managed(self) -> bool:
        """Whether joiner owns it (it has a NodeClaim)."""
        return self.claim is not None

    @property
    def nodepool(self) -> str:
        if self.claim is not None and self.claim.nodepool:
            return self.claim.nodepool
        return str(self.node.labels.get(LABEL_NODEPOOL) or "") if self.node is not None else ""

    @property
    def labels(self) -> Mapping[str, str]:
        """The NodeClaim's labels overlaid by the Node's (the Node is the fresher record)."""
        if self.claim is None:
            assert self.node is not None
            return self.node.labels
        if self.node is None:
            return self.claim.labels
        return MappingProxyType({**self.claim.labels, **self.node.labels})

    @property
    def registered(self) -> bool:
        return self.node is not None and (self.claim is None or self.claim.registered)

    @property
    def initialized(self) -> bool:
        return self.node is not None and (self.claim is None or self.claim.initialized)

    @property
    def deleting(self) -> bool:
        return (self.node is not None and self.node.deleting) or (self.claim is not None and self.claim.deleting)
