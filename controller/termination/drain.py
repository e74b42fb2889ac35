"""Which pods a terminating Node must lose, and in what order. Pure: no I/O, no clock.

Not drained (they do not block termination and are not evicted): DaemonSet pods (their controller
runs them per Node), mirror pods of static pods, pods that finished (Succeeded/Failed), and pods
that tolerate the ``joiner.sh/disrupted:NoSchedule`` taint (they would be scheduled right back).

The others are evicted through the Eviction API, so PodDisruptionBudgets hold, in stages: the
non-critical pods by their ``joiner.sh/eviction-priority`` annotation (``low`` first, ``medium`` --
also unannotated pods and pods whose annotation is not one of the three -- once no ``low`` pod is left,
``high`` once no ``medium`` pod is left; a pod still terminating counts as left), then the critical
ones (``system-cluster-critical``, ``system-node-critical``) once the others are gone. Pods
annotated ``joiner.sh/do-not-disrupt: "true"`` are not evicted: they block the drain
until the NodeClaim's ``terminationGracePeriod`` runs out. When that grace period has passed since
the NodeClaim's deletion, every pod left is deleted outright, PDB or not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from api.v1.labels import EVICTION_PRIORITIES
from api.v1.types import parse_duration
from controller.state.views import NodeClaimView, PodView

CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})


def is_drainable(pod: PodView) -> bool:
    return pod.is_drainable


def is_critical(pod: PodView) -> bool:
    return pod.priority_class_name in CRITICAL_PRIORITY_CLASSES


def grace_deadline(claim: NodeClaimView) -> datetime | None:
    """deletionTimestamp + spec.terminationGracePeriod; None when unset (wait for PDBs forever)."""
    deleted = claim.deleted_at
    raw = claim.termination_grace_period
    if deleted is None or not raw:
        return None
    try:
        period = parse_duration(raw)
    except ValueError:
        return None
    return None if period is None else deleted + period


@dataclass(frozen=True, slots=True)
class DrainPlan:
    evict: tuple[PodView, ...] = ()  # evict now through the Eviction API
    delete: tuple[PodView, ...] = ()  # delete now: the grace period is over
    waiting: tuple[PodView, ...] = ()  # still there, nothing to do for them yet

    @property
    def done(self) -> bool:
        return not (self.evict or self.delete or self.waiting)

    @property
    def remaining(self) -> int:
        return len(self.evict) + len(self.delete) + len(self.waiting)


def eviction_rank(pod: PodView) -> int:
    """0 for ``low``, 1 for ``medium`` (unset or not understood), 2 for ``high``."""
    return EVICTION_PRIORITIES.index(pod.eviction_priority or "medium")


def plan_drain(*, pods: Iterable[PodView], now: datetime, deadline: datetime | None) -> DrainPlan:
    drainable = [p for p in pods if is_drainable(p)]
    if deadline is not None and now >= deadline:
        return DrainPlan(delete=tuple(drainable))
    waiting = [p for p in drainable if p.deleting or p.do_not_disrupt]
    active = [p for p in drainable if not (p.deleting or p.do_not_disrupt)]
    normal = [p for p in active if not is_critical(p)]
    critical = [p for p in active if is_critical(p)]
    if normal:
        # the lowest stage that still has a pod evicting or to evict; do-not-disrupt pods wait for
        # the grace period and hold back no stage
        stage = min(eviction_rank(p) for p in [*normal, *(w for w in waiting if w.deleting and not is_critical(w))])
        now_out = [p for p in normal if eviction_rank(p) == stage]
        later = [p for p in normal if eviction_rank(p) != stage]
        return DrainPlan(evict=tuple(now_out), waiting=tuple(waiting + later + critical))
    if any(not is_critical(p) for p in waiting):
        return DrainPlan(waiting=tuple(waiting + critical))
    return DrainPlan(evict=tuple(critical), waiting=tuple(waiting))


def seconds_until(deadline: datetime | None, now: datetime) -> float | None:
    return None if deadline is None else max(0.0, (deadline - now).total_seconds())
