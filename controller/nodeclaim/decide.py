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
from datetime import datetime
from typing import Any, Literal

from api.v1.conditions import INITIALIZED, LAUNCHED, READY, REGISTERED
from controller.clock import format_seconds as fmt_seconds
from controller.nodeclaim.nodes import initialization_blockers, registration_patch
from controller.settings import Settings
from controller.state.views import NodeClaimView, NodeView
from controller.state.writes import ConditionUpdate, matches

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
    patch: tuple[dict[str, Any], ...]


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


# the one step `decide()` asks the lifecycle controller to take next
NextStep = AddFinalizer | Launch | SyncNode | Register | Initialize | NotInitialized | TimedOut | Wait


def _elapsed(since: datetime | None, now: datetime) -> float:
    return 0.0 if since is None else max(0.0, (now - since).total_seconds())


def initialized_update(node: str) -> list[ConditionUpdate]:
    message = f"Node {node} is Ready with its startup taints gone and requested resources registered"
    return [
        ConditionUpdate(INITIALIZED, "True", "Initialized", message),
        ConditionUpdate(READY, "True", "Ready", message),
    ]


def not_initialized_update(reason: str, message: str) -> list[ConditionUpdate]:
    return [
        ConditionUpdate(INITIALIZED, "False", reason, message),
        ConditionUpdate(READY, "False", reason, message),
    ]


def decide(*, claim: NodeClaimView, node: NodeView | None, now: datetime, settings: Settings) -> NextStep:
    """The next lifecycle step for `claim`, whose Node (found by providerID) is `node`."""
    if claim.deleting:
        return Wait(None, "being deleted: the termination controller owns it now")
    if not claim.has_finalizer():
        return AddFinalizer()

    # --- launch ---------------------------------------------------------------------------------
    if not claim.launched or not claim.provider_id:
        elapsed = _elapsed(claim.created, now)
        limit = settings.launch_timeout_seconds
        if elapsed >= limit:
            last = claim.condition(LAUNCHED)
            why = f" (last error: {last.message})" if last and last.message else ""
            return TimedOut(
                "Launch",
                elapsed,
                limit,
                f"the instance was not launched within {fmt_seconds(limit)} of the NodeClaim's creation{why}",
            )
        return Launch(remaining=limit - elapsed)

    # --- registration ---------------------------------------------------------------------------
    registered = claim.registered
    if node is not None and not node.deleting:
        patch = registration_patch(claim, node, registered=registered and claim.node_name == node.name)
        if patch:
            return SyncNode(node.name, tuple(patch))
        if not registered or claim.node_name != node.name:
            return Register(node.name)
    elif not registered:
        elapsed = _elapsed(claim.transition_time(LAUNCHED), now)
        limit = settings.registration_timeout_seconds
        if elapsed >= limit:
            return TimedOut(
                "Registration",
                elapsed,
                limit,
                f"no Node with providerID {claim.provider_id} joined the cluster within {fmt_seconds(limit)} of launch",
            )
        return Wait(limit - elapsed, "waiting for the Node to register")
    else:
        return Wait(None, "registered, but the Node is gone or going (garbage collection decides)")

    # --- initialization -------------------------------------------------------------------------
    assert node is not None
    node_name = node.name
    if claim.initialized:
        if not claim.is_true(READY):
            return Initialize(node_name)
        return Wait(None, "initialized")
    blockers = initialization_blockers(claim, node)
    if not blockers:
        return Initialize(node_name)
    reason = blockers[0][0]
    message = "; ".join(m for _, m in blockers)
    elapsed = _elapsed(claim.transition_time(REGISTERED), now)
    limit = settings.initialization_timeout_seconds
    if elapsed >= limit:
        return TimedOut(
            "Initialization",
            elapsed,
            limit,
            f"Node {node_name} registered {fmt_seconds(elapsed)} ago but did not initialize within "
            f"{fmt_seconds(limit)}: {message}",
        )
    if not all(matches(claim, u) for u in not_initialized_update(reason, message)):
        return NotInitialized(reason, message)
    return Wait(limit - elapsed, "waiting for the Node to initialize")
