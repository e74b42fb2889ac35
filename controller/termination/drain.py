"""Which pods a terminating Node must lose, and in what order. Pure: no I/O, no clock.

Not drained (they do not block termination and are not evicted): DaemonSet pods (their controller
runs them per Node), mirror pods of static pods, pods that finished (Succeeded/Failed), and pods
that tolerate the ``joiner.sh/disrupted:NoSchedule`` taint (they would be scheduled right back).

The others are evicted through the Eviction API, so PodDisruptionBudgets hold: non-critical pods
first, then the critical ones (``system-cluster-critical``, ``system-node-critical``) once the others
are gone. Pods annotated ``joiner.sh/do-not-disrupt: "true"`` are not evicted: they block the drain
until the NodeClaim's ``terminationGracePeriod`` runs out. When that grace period has passed since
the NodeClaim's deletion, every pod left is deleted outright, PDB or not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from api.v1.labels import ANNOTATION_DO_NOT_DISRUPT, TAINT_DISRUPTED, TAINT_DISRUPTED_EFFECT
from api.v1.types import parse_duration
from controller.clock import parse_time

Obj = dict[str, Any]
CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def tolerates(pod: Mapping[str, Any], *, key: str, effect: str, value: str | None = None) -> bool:
    """Whether one of the pod's tolerations matches the taint (the scheduler's matching rules)."""
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        if tol.get("effect") and tol.get("effect") != effect:
            continue
        op = tol.get("operator") or "Equal"
        if not tol.get("key"):
            if op == "Exists":
                return True
            continue
        if tol.get("key") != key:
            continue
        if op == "Exists" or (tol.get("value") or "") == (value or ""):
            return True
    return False


def _is_daemon(pod: Mapping[str, Any]) -> bool:
    return any(ref.get("kind") == "DaemonSet" for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


def is_drainable(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    if _is_daemon(pod) or MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return False
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    return not tolerates(pod, key=TAINT_DISRUPTED, effect=TAINT_DISRUPTED_EFFECT)


def is_critical(pod: Mapping[str, Any]) -> bool:
    return (pod.get("spec") or {}).get("priorityClassName") in CRITICAL_PRIORITY_CLASSES


def is_do_not_disrupt(pod: Mapping[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations.get(ANNOTATION_DO_NOT_DISRUPT) == "true"


def grace_deadline(claim: Mapping[str, Any]) -> datetime | None:
    """deletionTimestamp + spec.terminationGracePeriod; None when unset (wait for PDBs forever)."""
    deleted = parse_time((claim.get("metadata") or {}).get("deletionTimestamp"))
    raw = (claim.get("spec") or {}).get("terminationGracePeriod")
    if deleted is None or not raw:
        return None
    try:
        period = parse_duration(str(raw))
    except ValueError:
        return None
    return None if period is None else deleted + period


@dataclass(frozen=True, slots=True)
class DrainPlan:
    evict: tuple[Obj, ...] = ()  # evict now through the Eviction API
    delete: tuple[Obj, ...] = ()  # delete now: the grace period is over
    waiting: tuple[Obj, ...] = ()  # still there, nothing to do for them yet

    @property
    def done(self) -> bool:
        return not (self.evict or self.delete or self.waiting)

    @property
    def remaining(self) -> int:
        return len(self.evict) + len(self.delete) + len(self.waiting)


def plan_drain(*, pods: Iterable[Obj], now: datetime, deadline: datetime | None) -> DrainPlan:
    drainable = [p for p in pods if is_drainable(p)]
    if deadline is not None and now >= deadline:
        return DrainPlan(delete=tuple(drainable))
    waiting = [p for p in drainable if p["metadata"].get("deletionTimestamp") or is_do_not_disrupt(p)]
    active = [p for p in drainable if not (p["metadata"].get("deletionTimestamp") or is_do_not_disrupt(p))]
    normal = [p for p in active if not is_critical(p)]
    critical = [p for p in active if is_critical(p)]
    if normal or any(not is_critical(p) for p in waiting):
        return DrainPlan(evict=tuple(normal), waiting=tuple(waiting + critical))
    return DrainPlan(evict=tuple(critical), waiting=tuple(waiting))


def seconds_until(deadline: datetime | None, now: datetime) -> float | None:
    return None if deadline is None else max(0.0, (deadline - now).total_seconds())
