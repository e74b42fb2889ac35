"""When a disruption pass can be skipped. Pure: ``now`` is passed in.

A pass over a cluster at rest finds what the pass before it found. What it decides depends only on
the cluster (watched objects, the offerings marked unavailable, the commands running) and on the
time, through a few thresholds: a node becomes consolidatable ``consolidateAfter`` after its pods
last changed, a node expires at its ``expireAfter``, a replacement's protection ends, a budget's
cron window opens or closes. So after a pass that started no command and left nothing waiting,
the next pass is only needed when the cluster changed, or when the earliest of those moments has
come. A full pass still runs every ``MAX_QUIET`` as a safety net, so a change this module does not
know about is picked up within minutes, not never.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Final

from croniter import croniter

from controller.disruption.budgets import Budget
from controller.disruption.model import Decision, Snapshot
from controller.state.views import Obj, condition_of

MAX_QUIET: Final = timedelta(minutes=5)


def next_window_edge(budget: Budget, now: datetime) -> datetime | None:
    """The next moment after ``now`` at which a scheduled budget's window opens or closes."""
    window = budget.window(now)
    if window is None:
        return None
    _, end = window
    if end > now:
        return end
    # the latest window is over: the next one opens at the cron's next firing after `now`
    assert budget.schedule is not None
    nxt: datetime = croniter(budget.schedule, now).get_next(datetime)
    return nxt


def quiet_until(snap: Snapshot, decision: Decision) -> datetime | None:
    """Until when passes may be skipped if nothing changes; None: the next pass must run."""
    if decision.commands or decision.waiting is not None or snap.active:
        return None
    now = snap.now
    moments: list[datetime] = [now + MAX_QUIET]
    for node in snap.nodes:
        policy = snap.pools.get(node.pool)
        if policy is not None and policy.consolidates and policy.consolidate_after is not None:
            if node.stable_since is None:
                return None  # not yet known when its pods last changed: look again next time
            moments.append(node.stable_since + policy.consolidate_after)
        if node.expires_at is not None:
            moments.append(node.expires_at)
        if node.protected_until is not None:
            moments.append(node.protected_until)
    for policy in snap.pools.values():
        for budget in policy.budgets:
            edge = next_window_edge(budget, now)
            if edge is not None:
                moments.append(edge)
    future = [m for m in moments if m > now]
    return min(future) if future else None


# --- what counts as a change -------------------------------------------------------------------


def _ready(node: Obj) -> str | None:
    cond = condition_of(node, "Ready")
    return None if cond is None else cond.status


def node_signature(node: Obj) -> tuple[Any, ...]:
    """What of a Node disruption reads: not its heartbeats, which change every few seconds at rest."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    return (
        meta.get("labels"),
        meta.get("annotations"),
        meta.get("deletionTimestamp"),
        spec.get("providerID"),
        spec.get("taints"),
        spec.get("unschedulable"),
        status.get("allocatable"),
        status.get("capacity"),
        _ready(node),
    )


def offerings_signature(offerings: Iterable[Any]) -> frozenset[Any]:
    return frozenset(offerings)
