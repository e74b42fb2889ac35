"""A ProvisioningRequest (``autoscaling.x-k8s.io/v1``) as joiner reads it. Pure: no I/O.

Kueue's ProvisioningRequest admission check (and any other client) asks for capacity with pod
templates times counts and a provisioning class. The request's spec is immutable; its status carries
the conditions the asker reads (``Accepted``, ``Provisioned``, ``Failed``, ``BookingExpired``,
``CapacityRevoked``). The names, condition types and reasons here are cluster-autoscaler's, so a
client written for it (Kueue) works unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from api.v1.types import parse_duration
from controller.clock import parse_time
from controller.state.views import Condition, raw_conditions

Obj = Mapping[str, Any]

GROUP: Final = "autoscaling.x-k8s.io"
CRD_NAME: Final = "provisioningrequests.autoscaling.x-k8s.io"

# the classes joiner serves; requests of any other class are left alone
CLASS_CHECK_CAPACITY: Final = "check-capacity.autoscaling.x-k8s.io"
CLASS_BEST_EFFORT_ATOMIC: Final = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
# joiner's own, stronger promise: all or nothing with rollback, in one zone unless told otherwise,
# with the gang options of docs/gangs.md read from spec.parameters. (The CRD only takes class names
# that are DNS subdomains, so it cannot be written "joiner.sh/atomic".)
CLASS_JOINER_ATOMIC: Final = "atomic.joiner.sh"
SERVED_CLASSES: Final = frozenset({CLASS_CHECK_CAPACITY, CLASS_BEST_EFFORT_ATOMIC, CLASS_JOINER_ATOMIC})
ATOMIC_CLASSES: Final = frozenset({CLASS_BEST_EFFORT_ATOMIC, CLASS_JOINER_ATOMIC})

# condition types (the API's)
ACCEPTED: Final = "Accepted"
PROVISIONED: Final = "Provisioned"
FAILED: Final = "Failed"
BOOKING_EXPIRED: Final = "BookingExpired"
CAPACITY_REVOKED: Final = "CapacityRevoked"

# reasons and messages, as cluster-autoscaler writes them where it has one
REASON_ACCEPTED: Final = "Accepted"
REASON_CAPACITY_FOUND: Final = "CapacityIsFound"
MSG_CAPACITY_FOUND: Final = "GangInputs is found in the cluster"
REASON_CAPACITY_PROVISIONED: Final = "CapacityIsProvisioned"
REASON_CAPACITY_NOT_FOUND: Final = "CapacityIsNotFound"
REASON_BOOKING_EXPIRED: Final = "CapacityReservationTimeExpired"
MSG_BOOKING_EXPIRED: Final = "GangInputs reservation time is expired"
REASON_EXPIRED: Final = "Expired"
REASON_NEVER_FITS: Final = "CapacityCannotFit"  # joiner's: no NodePool can ever hold the request
REASON_INVALID: Final = "InvalidRequest"  # joiner's: a pod template joiner cannot read

# parameters (spec.parameters, strings)
PARAM_VALID_UNTIL: Final = "ValidUntilSeconds"  # retry for this long after creation, then Failed
PARAM_NO_RETRY: Final = "noRetry"  # "true": Failed at the first miss instead of Provisioned=False
PARAM_SAME_ZONE: Final = "sameZone"  # atomic classes: "true" | "false" (joiner's class: default true)
PARAM_TIMEOUT: Final = "timeout"  # atomic classes: the deadline of one attempt, a duration ("15m")

# what Kueue puts on the pods that consume a request
ANNOTATION_CONSUME: Final = "autoscaling.x-k8s.io/consume-provisioning-request"
ANNOTATION_CLASS: Final = "autoscaling.x-k8s.io/provisioning-class-name"


@dataclass(frozen=True, slots=True)
class PodSet:
    template: str  # a PodTemplate in the request's namespace
    count: int


@dataclass(frozen=True, slots=True)
class Options:
    """What the parameters ask for; ``problems`` are values joiner could not read (and ignored)."""

    valid_until_seconds: float | None = None
    no_retry: bool = False
    same_zone: bool | None = None
    timeout_seconds: float | None = None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProvisioningRequest:
    namespace: str
    name: str
    uid: str
    class_name: str
    parameters: Mapping[str, str]
    pod_sets: tuple[PodSet, ...]
    conditions: tuple[Condition, ...]
    created: datetime | None
    deleting: bool
    annotations: Mapping[str, str]
    raw: Obj

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def served(self) -> bool:
        return self.class_name in SERVED_CLASSES

    @property
    def atomic(self) -> bool:
        return self.class_name in ATOMIC_CLASSES

    @property
    def count(self) -> int:
        return sum(s.count for s in self.pod_sets)

    def condition(self, ctype: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == ctype), None)

    def is_true(self, ctype: str) -> bool:
        cond = self.condition(ctype)
        return cond is not None and cond.is_true

    @property
    def provisioned_at(self) -> datetime | None:
        cond = self.condition(PROVISIONED)
        return cond.transitioned if cond is not None and cond.is_true else None

    @staticmethod
    def of(obj: Obj) -> ProvisioningRequest:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        sets: list[PodSet] = []
        for raw in spec.get("podSets") or ():
            ref = (raw or {}).get("podTemplateRef") or {}
            try:
                count = int(raw.get("count") or 0)
            except (TypeError, ValueError):
                count = 0
            sets.append(PodSet(template=str(ref.get("name") or ""), count=count))
        params = {str(k): str(v) for k, v in (spec.get("parameters") or {}).items()}
        return ProvisioningRequest(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            class_name=str(spec.get("provisioningClassName") or ""),
            parameters=params,
            pod_sets=tuple(sets),
            conditions=tuple(Condition.of(c) for c in raw_conditions(obj)),
            created=parse_time(meta.get("creationTimestamp")),
            deleting=bool(meta.get("deletionTimestamp")),
            annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
            raw=obj,
        )


def _bool(value: str) -> bool | None:
    v = value.strip().lower()
    return True if v == "true" else False if v == "false" else None


def options(req: ProvisioningRequest) -> Options:
    """The request's parameters, read. A value joiner cannot read is named in ``problems``."""
    p = req.parameters
    problems: list[str] = []
    valid: float | None = None
    if PARAM_VALID_UNTIL in p:
        try:
            valid = float(p[PARAM_VALID_UNTIL])
            if valid <= 0:
                raise ValueError
        except ValueError:
            valid = None
            problems.append(f"parameter {PARAM_VALID_UNTIL}={p[PARAM_VALID_UNTIL]!r} is not a positive number")
    no_retry = False
    if PARAM_NO_RETRY in p:
        parsed = _bool(p[PARAM_NO_RETRY])
        if parsed is None:
            problems.append(f"parameter {PARAM_NO_RETRY}={p[PARAM_NO_RETRY]!r} must be true or false")
        no_retry = bool(parsed)
    same_zone: bool | None = True if req.class_name == CLASS_JOINER_ATOMIC else None
    if PARAM_SAME_ZONE in p:
        parsed = _bool(p[PARAM_SAME_ZONE])
        if parsed is None:
            problems.append(f"parameter {PARAM_SAME_ZONE}={p[PARAM_SAME_ZONE]!r} must be true or false")
        else:
            same_zone = parsed
    timeout: float | None = None
    if PARAM_TIMEOUT in p:
        try:
            parsed_t = parse_duration(p[PARAM_TIMEOUT])
            timeout = parsed_t.total_seconds() if parsed_t is not None else None
        except ValueError:
            problems.append(f"parameter {PARAM_TIMEOUT}={p[PARAM_TIMEOUT]!r} is not a duration such as 15m")
    return Options(
        valid_until_seconds=valid,
        no_retry=no_retry,
        same_zone=same_zone,
        timeout_seconds=timeout,
        problems=tuple(problems),
    )


def spec_problems(req: ProvisioningRequest) -> list[str]:
    """What makes the request impossible to serve as written (the CRD refuses most of it already)."""
    problems: list[str] = []
    if not req.pod_sets:
        problems.append("spec.podSets is empty")
    for i, s in enumerate(req.pod_sets):
        if not s.template:
            problems.append(f"spec.podSets[{i}].podTemplateRef.name is empty")
        if s.count < 1:
            problems.append(f"spec.podSets[{i}].count must be at least 1")
    return problems


def placeholder_pods(
    req: ProvisioningRequest, templates: Mapping[str, Obj], *, extra_labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The pods the request stands for, one per count of each pod set, as Pod objects made from the
    PodTemplates (``template.metadata`` and ``template.spec``). Named ``<request>-<set>-<i>`` in the
    request's namespace; never written, only solved."""
    out: list[dict[str, Any]] = []
    for i, s in enumerate(req.pod_sets):
        template = (templates[s.template].get("template") or {}) if s.template in templates else {}
        meta = template.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), **(extra_labels or {})}
        for n in range(s.count):
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{req.name}-{i}-{n}",
                        "namespace": req.namespace,
                        "uid": f"{req.uid}-{i}-{n}",
                        "labels": labels,
                        "annotations": dict(meta.get("annotations") or {}),
                    },
                    "spec": dict(template.get("spec") or {}),
                    "status": {"phase": "Pending"},
                }
            )
    return out


def consumes(pod_annotations: Mapping[str, str], pod_namespace: str, req: ProvisioningRequest) -> bool:
    """Whether a pod is one of those the request was made for (Kueue annotates them)."""
    return pod_namespace == req.namespace and pod_annotations.get(ANNOTATION_CONSUME) == req.name
