"""A gang's next step as a pure function of what is observed: its member pods (with the durable
record in their annotations), its NodeClaims, and the time. No I/O, no clock.

    waiting for members -> plan -> provisioning (pods pinned, NodeClaims coming up)
        -> every NodeClaim Initialized -> admit (gates removed together) -> admitted
        -> some NodeClaims refused for capacity -> re-plan those alone (pods stay gated, the
           machines that launched are kept; no room for them -> roll back)
        -> any NodeClaim failed / deadline passed -> roll back (delete them all, pods stay gated)
           -> back off -> plan again

The reconciler applies the step and asks again. Every step is safe to repeat, and every state a
crash can leave (a record written to some members only, NodeClaims created or not, gates removed
from some members only) maps to a step that finishes the gang or rolls it back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

from api.v1.labels import LABEL_GANG
from controller.clock import format_seconds
from controller.gang import claims as cl
from controller.gang.markers import POLICY_RESTART_GANG, TAINT_GANG
from controller.gang.record import PROVISIONING, ROLLED_BACK, Record, record_of
from controller.state.views import NodeClaimView, NodeView, PodView

GangState = Literal["Pending", "Provisioning", "Admitted"]

REASON_INTERRUPTED: Final = "Interrupted"
REASON_DEADLINE: Final = "DeadlineExceeded"
REASON_CLAIM_DELETED: Final = "NodeClaimDeleted"
REASON_NO_CAPACITY: Final = "InsufficientCapacity"
RECHECK_SECONDS: Final = 5.0


@dataclass(frozen=True, slots=True)
class Knobs:
    """Operator settings the decision needs."""

    member_wait_seconds: float = 60.0
    backoff_base_seconds: float = 30.0
    backoff_max_seconds: float = 600.0
    max_replans: int = 8  # capacity re-plans within one attempt before it is rolled back whole
    gang_timeout_seconds: float = 900.0  # an attempt's deadline when neither the pods nor the NodePools set one
    unavailable_ttl_seconds: float = 180.0  # how long an offering that refused capacity is avoided


@dataclass(frozen=True, slots=True)
class GangView:
    """One consistent look at a gang.

    ``gated``: active members still carrying the gate. ``released``: active members whose gate
    joiner removed (their record says Admitted). ``pending``: the newest record among the gated
    members (the attempt in progress or the last rolled back); ``admitted``: the newest record
    among the released ones. ``seen``: NodeClaims of the pending attempt this process saw exist.
    """

    key: str
    gid: str
    size: int | None
    gated: tuple[PodView, ...]
    released: tuple[PodView, ...] = ()
    claims: Mapping[str, NodeClaimView] = field(default_factory=dict)
    pending: Record | None = None
    admitted: Record | None = None
    seen: frozenset[str] = frozenset()
    gone: Mapping[str, NodeClaimView] = field(default_factory=dict)  # last state of NodeClaims seen deleted
    strays: Mapping[str, NodeView] = field(default_factory=dict)  # Nodes with the gang's label but no NodeClaim of it
    first_created: datetime | None = None
    member_loss_policy: str = POLICY_RESTART_GANG
    problems: tuple[str, ...] = ()
    written_seq: int = 0  # the seq of the record this process last wrote, until the cache shows it

    @property
    def members(self) -> int:
        return len(self.gated) + len(self.released)

    def state(self) -> GangState | None:
        if self.pending is not None and self.pending.phase == PROVISIONING and self.gated:
            return "Provisioning"
        if self.gated:
            return "Pending"
        if self.released:
            return "Admitted"
        return None


# --- decisions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do; look again after ``seconds`` (None: when something changes)."""

    seconds: float | None
    why: str


@dataclass(frozen=True, slots=True)
class SizeUnknown:
    message: str


@dataclass(frozen=True, slots=True)
class WaitForMembers:
    present: int
    size: int
    waited: float  # seconds since the first member appeared
    warn: bool  # waited longer than the member wait: tell the user
    recheck: float | None


@dataclass(frozen=True, slots=True)
class DeleteClaims:
    """Remove NodeClaims that belong to no live attempt (rolled back, abandoned, superseded)."""

    names: tuple[str, ...]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class DeleteNodes:
    """Nodes carrying the gang's label that no NodeClaim of the gang accounts for: they would attract
    its pods, so they go (the termination controller releases them)."""

    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PlanAttempt:
    """Solve the gated members in one call and, if they fit, start an attempt."""

    top_up: bool  # the gang runs already: add members to it (replace-member policy)


@dataclass(frozen=True, slots=True)
class Pin:
    """Write the attempt's record on these gated members and tighten them to the gang's nodes."""

    pods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Rollback:
    reason: str
    message: str
    failed: tuple[str, ...]  # the NodeClaims that failed or were too slow
    avoid: tuple[str, ...]  # offerings (type/zone/capacity-type) the next attempt avoids
    backoff: bool  # False: retry at once (the attempt was interrupted, nothing failed)
    # every failure was the cloud refusing a launch ("no capacity"): nothing ran, and the next attempt
    # avoids what failed, so the backoff level is not raised
    capacity_only: bool = False


@dataclass(frozen=True, slots=True)
class Replan:
    """Some NodeClaims of the attempt were refused for capacity (nothing ran on them) while the others
    launched: plan the members again with the others kept, buying only what was refused, avoiding the
    refused offerings. The pods stay gated. When the rest cannot be placed beside the kept machines
    (in the attempt's zone), ``rollback`` is applied instead."""

    kept: tuple[str, ...]  # the attempt's NodeClaims that did not fail
    rollback: Rollback


@dataclass(frozen=True, slots=True)
class Admit:
    """Every NodeClaim is Initialized: remove the gate from these members, all together."""

    pods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MarkAdmitted:
    """Set GangAdmitted=True on the admitted gang's NodeClaims (disruption leaves them alone)."""

    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MemberLost:
    """An admitted member's NodeClaim is gone or going: apply the member-loss policy."""

    lost: tuple[str, ...]
    policy: str
    message: str


@dataclass(frozen=True, slots=True)
class MarkFinished:
    """No member is active any more: GangAdmitted=False, the nodes are ordinary empty nodes now."""

    names: tuple[str, ...]


# the one step `decide()` asks the gang controller to take next
GangStep = (
    Wait
    | SizeUnknown
    | WaitForMembers
    | DeleteClaims
    | DeleteNodes
    | PlanAttempt
    | Pin
    | Rollback
    | Replan
    | Admit
    | MarkAdmitted
    | MemberLost
    | MarkFinished
)


# --- helpers ------------------------------------------------------------------------------------


def _name(pod: PodView) -> str:
    return pod.name


def is_pinned(pod: PodView, gid: str) -> bool:
    """The pod may only land on the gang's nodes and tolerates their taint."""
    if pod.node_selector.get(LABEL_GANG) != gid:
        return False
    return any(
        t.get("key") == TAINT_GANG and t.get("value") == gid and (t.get("operator") or "Equal") == "Equal"
        for t in pod.raw_tolerations
    )


def _attempt_of_pod(pod: PodView) -> str | None:
    rec = record_of(pod)
    return rec.id if rec is not None else None


def _strays(v: GangView) -> GangStep | None:
    """Stray Nodes of the gang are deleted, and waited for while the pods could still land there."""
    alive = tuple(sorted(n for n, node in v.strays.items() if not node.deleting))
    if alive:
        return DeleteNodes(alive)
    if any(cl.attracts(node, v.gid) for node in v.strays.values()):
        return Wait(RECHECK_SECONDS, "waiting for a Node of an earlier attempt to go away")
    return None


def first_created(pods: Sequence[PodView]) -> datetime | None:
    known = [s for p in pods if (s := p.created) is not None]
    return min(known) if known else None


def completed_at(pods: Sequence[PodView], size: int) -> datetime | None:
    """When the gang became complete: the creation time of its ``size``-th member."""
    stamps = sorted(s for p in pods if (s := p.created) is not None)
    if not stamps:
        return None
    return stamps[min(size, len(stamps)) - 1]


# --- the decision -------------------------------------------------------------------------------


def interrupted_admission(v: GangView) -> tuple[str, ...]:
    """The members still gated of an admission that stopped half-way (the controller or its leader
    died between the per-pod gate removals): some members of the attempt run, every node of the
    attempt was Initialized before the first gate went, so the rest must follow now."""
    pend, adm = v.pending, v.admitted
    if pend is None or adm is None or not v.released or pend.phase != PROVISIONING or pend.id != adm.id:
        return ()
    return tuple(_name(p) for p in v.gated if (record_of(p) or pend).id == adm.id)


def decide(v: GangView, *, now: datetime, knobs: Knobs) -> GangStep:
    pend = v.pending
    adm = v.admitted
    # 0. An admission a crash or a leader change interrupted comes before anything else about the
    #    gang (deleting leftovers, a lost node, a new attempt): the members released already run.
    rest = interrupted_admission(v)
    if rest:
        return Admit(rest)
    live = {n: c for n, c in v.claims.items() if not c.deleting}
    keep: set[str] = set()
    if pend is not None and pend.phase == PROVISIONING:
        keep.update(pend.nodeclaims)
    if adm is not None:
        keep.update(adm.nodeclaims)

    # 1. NodeClaims that serve no attempt: leftovers of a rollback, of a gang whose pods went away,
    #    or of a crash. Never admitted, so no running pod needs them.
    stale = tuple(sorted(n for n, c in live.items() if n not in keep and not cl.ever_admitted(c)))
    if stale:
        if pend is not None and pend.phase == ROLLED_BACK and any(cl.attempt_of(live[n]) == pend.id for n in stale):
            return DeleteClaims(stale, "GangRolledBack", f"gang {v.key}: attempt {pend.attempt} was rolled back")
        if v.members == 0:
            return DeleteClaims(stale, "GangDeleted", f"gang {v.key} has no pending or running member any more")
        return DeleteClaims(stale, "GangAbandoned", f"gang {v.key}: the NodeClaim belongs to no live attempt")

    if v.members == 0:
        running = tuple(sorted(n for n, c in live.items() if cl.admitted(c)))
        if running:
            return MarkFinished(running)
        return Wait(None, "the gang has no active member")

    # 2. The gang runs (some or all members admitted).
    if adm is not None and v.released:
        lost = tuple(n for n in adm.nodeclaims if n not in live)
        if lost:
            what = ", ".join(
                f"{cl.describe(v.claims[n])}: {cl.termination_reason(v.claims[n])}" if n in v.claims else f"{n}: gone"
                for n in lost
            )
            return MemberLost(lost, v.member_loss_policy, f"gang {v.key} lost {len(lost)} node(s): {what}")
        unmarked = tuple(n for n in adm.nodeclaims if n in live and not cl.admitted(live[n]))
        if unmarked:
            return MarkAdmitted(unmarked)
        if not v.gated:
            return Wait(None, "admitted: every member was released")

    if not v.gated:
        return Wait(None, "no member carries the scheduling gate")
    if v.size is None:
        return SizeUnknown(
            f"gang {v.key}: its size is unknown, so joiner cannot tell when all members exist; "
            "set the annotation joiner.sh/gang-size on the pods (or minMember on the PodGroup)"
            + (f" ({'; '.join(v.problems)})" if v.problems else "")
        )

    # 3. An attempt is in progress.
    if pend is not None and pend.phase == PROVISIONING:
        return _provisioning(v, pend, live, now=now, knobs=knobs)

    # 4. No attempt in progress: wait for every member, then for the backoff, then plan.
    if v.members < v.size:
        return _wait_for_members(v, now=now, knobs=knobs, deadline=None)
    if pend is not None and pend.phase == ROLLED_BACK and pend.retry_at is not None and now < pend.retry_at:
        return Wait((pend.retry_at - now).total_seconds(), f"backing off after rollback {pend.rollbacks}")
    if not v.released:
        # nodes of an earlier gang with this id would attract the pods (they carry its label): remove them
        superseded = tuple(sorted(live))
        if superseded:
            return DeleteClaims(superseded, "GangSuperseded", f"gang {v.key} starts a new attempt on fresh nodes")
    in_use = set(adm.nodeclaims) if adm is not None else set()
    terminating = [n for n, c in v.claims.items() if c.deleting and n not in in_use]
    if terminating:
        return Wait(RECHECK_SECONDS, f"waiting for {len(terminating)} NodeClaim(s) of an earlier attempt to go away")
    stray = _strays(v)
    if stray is not None:
        return stray
    return PlanAttempt(top_up=bool(v.released))


def _wait_for_members(v: GangView, *, now: datetime, knobs: Knobs, deadline: datetime | None) -> WaitForMembers:
    assert v.size is not None
    since = v.first_created or now
    waited = max(0.0, (now - since).total_seconds())
    warn = waited >= knobs.member_wait_seconds
    recheck: float | None = None if warn else knobs.member_wait_seconds - waited
    if deadline is not None:
        left = max(0.0, (deadline - now).total_seconds())
        recheck = left if recheck is None else min(recheck, left)
    return WaitForMembers(present=v.members, size=v.size, waited=waited, warn=warn, recheck=recheck)


def failed_attempt(
    pend: Record,
    claims: Mapping[str, NodeClaimView],
    *,
    gone: Mapping[str, NodeClaimView],
    seen: AbstractSet[str],
    missing: int = 0,
    now: datetime,
    knobs: Knobs,
) -> Rollback | Replan | None:
    """How an attempt in progress failed, if it did: some of its NodeClaims failed (refused for
    capacity while the others launched: ``Replan``), were never created, or the deadline passed.

    It reads NodeClaims only, so it serves any attempt, whatever its members are (gated pods, or
    placeholders for pod templates): ``claims`` are the attempt's NodeClaims that exist, ``gone``
    the last state of those seen deleted, ``seen`` the names known to have existed (so a missing one
    was deleted, not never created), ``missing`` how many members have not appeared."""
    names = pend.nodeclaims
    live = {n: c for n, c in claims.items() if not c.deleting}
    failures: list[tuple[str, str, str]] = []  # (claim, reason, what happened)
    never_created: list[str] = []
    for name in names:
        claim = claims.get(name)
        if claim is None:
            last = gone.get(name)
            if last is not None:
                reason = cl.termination_reason(last)
                failures.append((name, reason, f"{cl.describe(last)} failed: {reason}"))
            elif name in seen:
                failures.append((name, REASON_CLAIM_DELETED, f"nodeclaim/{name} was deleted"))
            else:
                never_created.append(name)
        elif claim.deleting:
            reason = cl.termination_reason(claim)
            failures.append((name, reason, f"{cl.describe(claim)} failed: {reason}"))
    if failures:
        reason = failures[0][1]
        failed = tuple(f[0] for f in failures)
        known = {**gone, **claims}
        avoid = tuple(sorted({o for n in failed if n in known and (o := cl.offering_of(known[n])) is not None}))
        detail = "; ".join(f[2] for f in failures[:5]) + ("; ..." if len(failures) > 5 else "")
        capacity_only = all(f[1] == REASON_NO_CAPACITY for f in failures)
        rollback = Rollback(
            reason=reason,
            message=f"attempt {pend.attempt}: {len(failures)} of {len(names)} NodeClaims failed: {detail}",
            failed=failed,
            avoid=avoid,
            backoff=True,
            capacity_only=capacity_only,
        )
        kept = tuple(n for n in names if n not in failed)
        if (
            capacity_only
            and kept
            and not never_created
            and all(n in live for n in kept)
            and pend.replans < knobs.max_replans
            and (pend.deadline is None or now < pend.deadline)
        ):
            # the cloud refused some machines and launched the others: nothing ran on the refused
            # ones, so buy only those again instead of throwing the launched machines away
            return Replan(kept=kept, rollback=rollback)
        return rollback
    if never_created:
        return Rollback(
            reason=REASON_INTERRUPTED,
            message=f"attempt {pend.attempt}: {len(never_created)} of {len(names)} NodeClaims were never "
            "created (the controller stopped while creating them)",
            failed=tuple(never_created),
            avoid=(),
            backoff=False,
        )
    not_ready = [n for n in names if not live[n].initialized]
    if pend.deadline is not None and now >= pend.deadline:
        parts = [f"{cl.describe(live[n])} {cl.progress(live[n])}" for n in not_ready[:5]]
        if len(not_ready) > 5:
            parts.append("...")
        what = f"{len(not_ready)} of {len(names)} NodeClaims not Initialized" + (
            f": {'; '.join(parts)}" if parts else ""
        )
        if missing:
            what += f"; {missing} member pod(s) missing"
        took = format_seconds((pend.deadline - pend.started).total_seconds()) if pend.started else "its deadline"
        return Rollback(
            reason=REASON_DEADLINE,
            message=f"attempt {pend.attempt} did not finish within {took}: {what}",
            failed=tuple(not_ready),
            avoid=tuple(sorted({o for n in not_ready if (o := cl.offering_of(live[n])) is not None})),
            backoff=True,
        )
    return None


def _provisioning(
    v: GangView, pend: Record, live: Mapping[str, NodeClaimView], *, now: datetime, knobs: Knobs
) -> GangStep:
    names = pend.nodeclaims
    running = set(v.admitted.nodeclaims) if v.admitted is not None else set()
    failed = failed_attempt(
        pend,
        v.claims,
        gone=v.gone,
        seen=v.seen | running,
        missing=max(0, (v.size or 0) - v.members),
        now=now,
        knobs=knobs,
    )
    if failed is not None:
        return failed
    not_ready = [n for n in names if not live[n].initialized]
    # the members this attempt was planned for carry its record and are pinned; a member that
    # replaces a deleted one takes its place; members beyond the planned count wait for a top-up
    mine = [p for p in v.gated if is_pinned(p, v.gid) and _attempt_of_pod(p) == pend.id]
    recorded = [p for p in v.gated if _attempt_of_pod(p) == pend.id and not is_pinned(p, v.gid)]
    others = sorted(
        (p for p in v.gated if _attempt_of_pod(p) != pend.id),
        key=lambda p: (p.creation_timestamp or "", _name(p)),
    )
    planned = pend.members or len(v.gated)
    room = max(0, planned - len(mine) - len(recorded))
    unpinned = tuple(_name(p) for p in [*recorded, *others[:room]])
    if unpinned:
        return Pin(unpinned)
    assert v.size is not None
    if v.members < v.size:
        return _wait_for_members(v, now=now, knobs=knobs, deadline=pend.deadline)
    left = (pend.deadline - now).total_seconds() if pend.deadline is not None else None
    if not_ready:
        return Wait(left, f"{len(not_ready)} of {len(names)} NodeClaims not Initialized yet")
    leftovers = [n for n in v.claims if n not in names and n not in running]
    if leftovers:
        # a node of an earlier attempt still carries the gang's label: the pods could land there
        return Wait(RECHECK_SECONDS, f"waiting for {len(leftovers)} NodeClaim(s) of an earlier attempt to go away")
    stray = _strays(v)
    if stray is not None:
        return stray
    return Admit(tuple(_name(p) for p in mine))
