"""The NodeClaim lifecycle as a pure function: given a NodeClaim, its Node (if any) and the time,
what is the next step? No I/O, no clock: the reconciler applies the step and asks again.

    finalizer -> Launched -> (Node joins) Registered -> Initialized (+ Ready) -> open

Open: the Node loses its `joiner.sh/unregistered` taint, and kube-scheduler may place pods there. A
Node bought for pending pods opens reserved to them when reservations are on (``reserved``): the same
patch puts the `joiner.sh/planned=<NodeClaim>` taint on, which only those pods tolerate (the
provisioner's nominator gives them the toleration), and it goes once none of them is pending and the
room left over would fit no pending pod planned elsewhere (and, up to 30 s, none planned elsewhere is
pending at all: `LifecycleController`'s RESERVE_HOLD_SECONDS), or when the Node does not initialize
while reserved. Without reservations (or for a NodeClaim a DaemonSet keeps from being reserved), a
Node bought for pending pods opens only once the pods planned on it and on the other planned Nodes
not open yet are nominated (their `status.nominatedNodeName`, which the provisioner's nominator
writes as soon as a Node exists), and then in waves (`controller.nodeclaim.opening`): a Node whose
free room would fit a pod still waiting for another planned Node opens after that Node. Or
`OPEN_AFTER_SECONDS` after it registered at the latest: kube-scheduler then keeps the planned pods'
room, where it would otherwise give the Node to whichever pending pod it tries first. While the
nominations still come (the count not nominated reached a new low within `OPEN_PROGRESS_SECONDS`) a
Node stays closed past that, up to `OPEN_MAX_SECONDS`: a burst of thousands of pods needs as many
status writes at the apiserver's pace. Other NodeClaims open at registration.

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
from api.v1.labels import TAINT_PLANNED, TAINT_UNREGISTERED
from controller.clock import format_seconds as fmt_seconds
from controller.nodeclaim.nodes import initialization_blockers, registration_patch, reservation_end_patch
from controller.settings import Settings
from controller.state.patches import ConditionUpdate, matches
from controller.state.views import NodeClaimView, NodeView

Step = Literal["Launch", "Registration", "Initialization"]

# the longest a Node stays closed after it registered while the planned pods are not all nominated,
# or pods waiting for other Nodes would fit its free room (kube-scheduler clears a nomination
# whenever it tries the pod and cannot place it, so a few may be missing at any moment: waiting for
# all of them must not stall the burst; and a burst of thousands needs as many status writes, at the
# apiserver's pace)
OPEN_AFTER_SECONDS = 15.0
# ... unless the nominations are still coming: the fewest planned pods not nominated yet fell to a
# new low within OPEN_PROGRESS_SECONDS (measured: 3,000 pods on a loaded 2-core cluster took 19 s of
# nominations at 140 a second; opened at 15 s, pods not nominated yet took planned room, 4-289 were
# solved again and bought for). Kept closed this way at most OPEN_MAX_SECONDS after registration.
OPEN_PROGRESS_SECONDS = 3.0
OPEN_MAX_SECONDS = 60.0
# while a Node waits to open: how often to look again (nominations are pod events, not ours)
OPEN_RECHECK_SECONDS = 0.2
# while a Node is reserved to its planned pods: how often to look again besides the pods' own events
RESERVED_RECHECK_SECONDS = 2.0
# a reserved Node not Initialized this long after it registered loses its reservation: whatever keeps
# it from initializing (a device plugin or CNI agent whose DaemonSet does not tolerate the reservation
# and was not seen to run there) would otherwise wait for pods that cannot bind before it
RESERVE_UNINITIALIZED_SECONDS = 30.0


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


@dataclass
class NominationProgress:
    """When the planned pods not nominated yet last fell to a new low. While the nominator writes a
    plan's nominations the count falls steadily; kube-scheduler clearing a few and the nominator
    writing them back makes it wobble without a new low. A plan with pods not planned before
    (``plan``: :attr:`PlannedPods.version`) starts over. Pure: the time is passed in."""

    plan: int = -1
    low: int = 0
    at: float = 0.0

    def seconds_since(self, *, plan: int, count: int, now: float) -> float:
        if plan != self.plan or count < self.low:
            self.plan, self.low, self.at = plan, count, now
        return now - self.at


def decide(
    *,
    claim: NodeClaimView,
    node: NodeView | None,
    now: datetime,
    settings: Settings,
    unnominated: int = 0,
    blocked_by: int = 0,
    since_progress: float | None = None,
    reserved: int | None = None,
) -> NextStep:
    """The next lifecycle step for `claim`, whose Node (found by providerID) is `node`;
    ``unnominated``: pending pods planned on it (or another closed planned Node) that are not
    nominated yet; ``blocked_by``: pods waiting for other planned Nodes that its free room would
    fit, so it opens after theirs (`controller.nodeclaim.opening`); ``since_progress``: seconds
    since the count not nominated last fell to a new low; ``reserved``: with reservations on, the
    pending pods planned on it (it opens with the `joiner.sh/planned` taint while there are any,
    and the taint goes once there are none); None: reservations off (a leftover taint goes)."""
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
    registered_at = claim.transition_time(REGISTERED)
    age = (now - registered_at).total_seconds() if registered_at is not None else None
    nominating = since_progress is not None and since_progress < OPEN_PROGRESS_SECONDS
    closed = (unnominated > 0 or blocked_by > 0) and (
        not claim.registered
        or (age is not None and (age < OPEN_AFTER_SECONDS or (nominating and age < OPEN_MAX_SECONDS)))
    )
    if node is not None and not node.deleting:
        patch = registration_patch(
            claim,
            node,
            registered=registered and claim.node_name == node.name,
            keep_closed=closed,
            reserve=bool(reserved),
        )
        if patch:
            return SyncNode(node.name, tuple(patch))
        if not registered or claim.node_name != node.name:
            return Register(node.name)
        if node.has_taint(TAINT_PLANNED) and (
            not reserved or (not claim.initialized and age is not None and age >= RESERVE_UNINITIALIZED_SECONDS)
        ):
            # every pod planned there is bound (or no longer planned there): the room is anyone's; or
            # the Node does not initialize while reserved, and its pods cannot bind before it does
            return SyncNode(node.name, tuple(reservation_end_patch(node)))
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
    step = _initialization(claim=claim, node=node, now=now, settings=settings)
    if closed and isinstance(step, Wait) and node.has_taint(TAINT_UNREGISTERED):
        # nominations are pod events, not this NodeClaim's: look again soon
        if unnominated > 0:
            return Wait(OPEN_RECHECK_SECONDS, f"{step.why}; {unnominated} planned pods not nominated to it yet")
        return Wait(
            OPEN_RECHECK_SECONDS,
            f"{step.why}; opens after {blocked_by} planned pods of other NodeClaims that its free room would fit",
        )
    if reserved and isinstance(step, Wait) and node.has_taint(TAINT_PLANNED):
        # the pods binding are pod events: the lifecycle hears of them, and looks again now and then
        seconds = RESERVED_RECHECK_SECONDS if step.seconds is None else min(step.seconds, RESERVED_RECHECK_SECONDS)
        return Wait(seconds, f"{step.why}; reserved to {reserved} planned pods not bound yet")
    return step


def _initialization(*, claim: NodeClaimView, node: NodeView, now: datetime, settings: Settings) -> NextStep:
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
