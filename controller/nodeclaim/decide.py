"""The NodeClaim lifecycle as a pure function: given a NodeClaim, its Node (if any) and the time,
what is the next step? No I/O, no clock: the reconciler applies the step and asks again.

    finalizer -> Launched -> (Node joins) Registered -> Initialized (+ Ready)

Timeouts end a step that takes too long:
* launch: from the NodeClaim's creationTimestamp until Launched=True;
* registration: from Launched's lastTransitionTime until a Node with the providerID joins;
* initialization: from Registered's lastTransitionTime until Initialized=True.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from api.v1.conditions import INITIALIZED, LAUNCHED, READY, REGISTERED
from api.v1.types import format_duration
from controller.clock import parse_time
from controller.nodeclaim import conditions as c
from controller.nodeclaim.nodes import has_finalizer, initialization_blockers, registration_patch
from controller.settings import Settings

Obj = dict[str, Any]
Step = Literal["Launch", "Registration", "Initialization"]


@dataclass(frozen=True, slots=True)
class AddFinalizer:
    pass


@dataclass(frozen=True, slots=True)
class Launch:
    remaining: float  # seconds left before the launch timeout


@dataclass(frozen=True, slots=True)
class SyncNode:
    """Registration's changes to the Node: labels, finalizer, owner, no unregistered taint."""

    node: str
    patch: tuple[Obj, ...]


@dataclass(frozen=True, slots=True)
class Register:
    node: str


@dataclass(frozen=True, slots=True)
class Initialize:
    node: str


@dataclass(frozen=True, slots=True)
class NotInitialized:
    """Record why the Node is not initialized yet (Initialized=False with the reason), then wait."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class TimedOut:
    step: Step
    elapsed: float
    limit: float
    message: str

    @property
    def reason(self) -> str:
        return f"{self.step}TimedOut"


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do now; look again after `seconds` (None: only when something changes)."""

    seconds: float | None
    why: str


Decision = AddFinalizer | Launch | SyncNode | Register | Initialize | NotInitialized | TimedOut | Wait


def _elapsed(since: datetime | None, now: datetime) -> float:
    return 0.0 if since is None else max(0.0, (now - since).total_seconds())


def fmt_seconds(seconds: float) -> str:
    """A duration as users write it: ``15m``, ``1h30m``, ``45s``."""
    return format_duration(timedelta(seconds=max(0, round(seconds))))


def initialized_update(node: str) -> list[c.ConditionUpdate]:
    message = f"Node {node} is Ready with its startup taints gone and requested resources registered"
    return [
        c.ConditionUpdate(INITIALIZED, "True", "Initialized", message),
        c.ConditionUpdate(READY, "True", "Ready", message),
    ]


def not_initialized_update(reason: str, message: str) -> list[c.ConditionUpdate]:
    return [
        c.ConditionUpdate(INITIALIZED, "False", reason, message),
        c.ConditionUpdate(READY, "False", reason, message),
    ]


def decide(*, claim: Obj, node: Obj | None, now: datetime, settings: Settings) -> Decision:
    """The next lifecycle step for `claim`, whose Node (found by providerID) is `node`."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    if meta.get("deletionTimestamp"):
        return Wait(None, "being deleted: the termination controller owns it now")
    if not has_finalizer(claim):
        return AddFinalizer()

    # --- launch ---------------------------------------------------------------------------------
    if not c.is_true(claim, LAUNCHED) or not status.get("providerID"):
        elapsed = _elapsed(parse_time(meta.get("creationTimestamp")), now)
        limit = settings.launch_timeout_seconds
        if elapsed >= limit:
            last = c.find(claim, LAUNCHED)
            why = f" (last error: {last.get('message')})" if last and last.get("message") else ""
            return TimedOut(
                "Launch",
                elapsed,
                limit,
                f"the instance was not launched within {fmt_seconds(limit)} of the NodeClaim's creation{why}",
            )
        return Launch(remaining=limit - elapsed)

    # --- registration ---------------------------------------------------------------------------
    registered = c.is_true(claim, REGISTERED)
    if node is not None and not (node.get("metadata") or {}).get("deletionTimestamp"):
        node_name = str(node["metadata"]["name"])
        patch = registration_patch(claim, node)
        if patch:
            return SyncNode(node_name, tuple(patch))
        if not registered or status.get("nodeName") != node_name:
            return Register(node_name)
    elif not registered:
        elapsed = _elapsed(c.transition_time(claim, LAUNCHED), now)
        limit = settings.registration_timeout_seconds
        if elapsed >= limit:
            return TimedOut(
                "Registration",
                elapsed,
                limit,
                f"no Node with providerID {status.get('providerID')} joined the cluster within "
                f"{fmt_seconds(limit)} of launch",
            )
        return Wait(limit - elapsed, "waiting for the Node to register")
    else:
        return Wait(None, "registered, but the Node is gone or going (garbage collection decides)")

    # --- initialization -------------------------------------------------------------------------
    assert node is not None
    node_name = str(node["metadata"]["name"])
    if c.is_true(claim, INITIALIZED):
        if not c.is_true(claim, READY):
            return Initialize(node_name)
        return Wait(None, "initialized")
    blockers = initialization_blockers(claim, node)
    if not blockers:
        return Initialize(node_name)
    reason = blockers[0][0]
    message = "; ".join(m for _, m in blockers)
    elapsed = _elapsed(c.transition_time(claim, REGISTERED), now)
    limit = settings.initialization_timeout_seconds
    if elapsed >= limit:
        return TimedOut(
            "Initialization",
            elapsed,
            limit,
            f"Node {node_name} registered {fmt_seconds(elapsed)} ago but did not initialize within "
            f"{fmt_seconds(limit)}: {message}",
        )
    if not all(c.matches(claim, u) for u in not_initialized_update(reason, message)):
        return NotInitialized(reason, message)
    return Wait(limit - elapsed, "waiting for the Node to initialize")
