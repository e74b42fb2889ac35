"""What to do next for one ProvisioningRequest, as a pure function of what the cache shows and the
time. No I/O: the controller applies the step and the writes come back as watch events.

    check-capacity:  solve on existing and in-flight capacity -> Provisioned=True (booked) | False (retry later)
    atomic classes:  one all-or-nothing solve -> NodeClaims -> every one Initialized -> Provisioned=True (booked)
                     a NodeClaim lost (refused, timed out) or the attempt's deadline -> every NodeClaim of the
                     attempt deleted, Provisioned=False, retry after a backoff
    either:          never fits -> Failed=True at once; ValidUntilSeconds passed -> Failed=True (Expired);
                     booked until the request's pods are bound, the request goes, or the booking time passes
                     (then BookingExpired=True); a booked node gone before then -> CapacityRevoked=True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final

from api.v1.conditions import INITIALIZED
from controller.clock import format_seconds, format_time, parse_time
from controller.provreq.request import (
    ACCEPTED,
    BOOKING_EXPIRED,
    CAPACITY_REVOKED,
    FAILED,
    MSG_BOOKING_EXPIRED,
    MSG_CAPACITY_FOUND,
    PARAM_VALID_UNTIL,
    PROVISIONED,
    REASON_ACCEPTED,
    REASON_BOOKING_CONSUMED,
    REASON_BOOKING_EXPIRED,
    REASON_CAPACITY_FOUND,
    REASON_CAPACITY_NOT_FOUND,
    REASON_CAPACITY_PROVISIONED,
    REASON_CAPACITY_REVOKED,
    REASON_EXPIRED,
    REASON_INVALID,
    REASON_NEVER_FITS,
    ProvisioningRequest,
    options,
    spec_problems,
)
from controller.state.patches import ConditionUpdate
from controller.state.views import NodeClaimView, Obj

ANNOTATION_ATTEMPT: Final = "joiner.sh/provisioning-attempt"
"""On the request: joiner's record of its current attempt (JSON), so a restart resumes it."""

MSG_ACCEPTED: Final = "ProvisioningRequest is accepted by joiner"
REASON_PROVISIONING: Final = "Provisioning"  # joiner's: the attempt's machines are coming up


@dataclass(frozen=True, slots=True)
class Knobs:
    booking_seconds: float = 600.0  # cluster-autoscaler's default reservation time
    attempt_timeout_seconds: float = 900.0  # an atomic attempt's deadline (the gang timeout)
    backoff_base_seconds: float = 30.0
    backoff_max_seconds: float = 600.0
    retry_seconds: float = 30.0  # look again at a request that did not fit now
    template_wait_seconds: float = 60.0  # a pod template still missing after this is an error


@dataclass(frozen=True, slots=True)
class Attempt:
    """joiner's record of a request's current (or last) attempt, kept in an annotation on it."""

    number: int
    claims: tuple[str, ...] = ()
    started: datetime | None = None
    deadline: datetime | None = None
    level: int = 0  # backoff level: raised by every rollback that was not only a capacity refusal
    retry_at: datetime | None = None  # after a rollback: not before
    last_failure: str = ""

    def to_json(self) -> str:
        out: dict[str, Any] = {"attempt": self.number, "nodeclaims": list(self.claims), "level": self.level}
        if self.started is not None:
            out["started"] = format_time(self.started)
        if self.deadline is not None:
            out["deadline"] = format_time(self.deadline)
        if self.retry_at is not None:
            out["retryAt"] = format_time(self.retry_at)
        if self.last_failure:
            out["lastFailure"] = self.last_failure
        return json.dumps(out, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str | None) -> Attempt | None:
        if not text:
            return None
        try:
            raw = json.loads(text)
            return Attempt(
                number=int(raw["attempt"]),
                claims=tuple(str(c) for c in raw.get("nodeclaims") or ()),
                started=parse_time(raw.get("started")),
                deadline=parse_time(raw.get("deadline")),
                level=int(raw.get("level") or 0),
                retry_at=parse_time(raw.get("retryAt")),
                last_failure=str(raw.get("lastFailure") or ""),
            )
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True, slots=True)
class RequestView:
    request: ProvisioningRequest
    templates: Mapping[str, Obj]  # the pod templates found, by name
    claims: Mapping[str, NodeClaimView]  # NodeClaims labelled with the request's uid (cache and in flight)
    attempt: Attempt | None
    consumers_bound: int = 0  # pods annotated with the request that are bound to a node
    consumers_pending: int = 0  # ... and that are not bound yet
    booked_gone: tuple[str, ...] = ()  # nodes the published booking keeps that are no longer there


# --- steps ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Leave:
    """Not joiner's request, or nothing left to do for it."""

    release: bool = False  # forget its booking


@dataclass(frozen=True, slots=True)
class Conditions:
    """Only conditions to write (and maybe an Event), then look again after ``requeue`` seconds."""

    updates: tuple[ConditionUpdate, ...]
    requeue: float | None = None
    event: tuple[str, str, bool] | None = None  # reason, message, warning
    hold_attempt: bool = False  # an atomic attempt's machines are coming up: keep their room booked


@dataclass(frozen=True, slots=True)
class Check:
    """check-capacity: solve the request's pods on existing and in-flight capacity."""

    accept: tuple[ConditionUpdate, ...] = ()


@dataclass(frozen=True, slots=True)
class PlanAttempt:
    """Atomic: plan every pod of the request in one all-or-nothing solve and buy it (attempt ``number``)."""

    number: int
    level: int
    same_zone: bool | None
    timeout_seconds: float
    accept: tuple[ConditionUpdate, ...] = ()
    last_failure: str = ""


@dataclass(frozen=True, slots=True)
class Rollback:
    """Delete every NodeClaim of the attempt; the request says so and is tried again after ``retry_in``."""

    claims: tuple[str, ...]
    reason: str
    message: str
    attempt: Attempt  # the record to write (retry_at, level)
    retry_in: float


@dataclass(frozen=True, slots=True)
class MarkProvisioned:
    claims: tuple[str, ...]
    seconds: float | None  # from the request's creation


@dataclass(frozen=True, slots=True)
class Book:
    """Provisioned and booked: keep the capacity for the request's pods until ``until``."""

    until: datetime
    remaining: float


@dataclass(frozen=True, slots=True)
class ExpireBooking:
    pass


@dataclass(frozen=True, slots=True)
class Consumed:
    """Every pod of the request is bound: ``BookingExpired=True`` (``CapacityBookingConsumed``), so the
    booking ends for good -- a pod that finishes or is drained later does not bring it back."""

    bound: int


@dataclass(frozen=True, slots=True)
class Revoke:
    """``CapacityRevoked=True``: capacity booked for the request went away before its pods bound."""

    message: str
    lost: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Fail:
    """``Failed=True``, and every NodeClaim the request still has deleted."""

    reason: str
    message: str
    claims: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Cleanup:
    """The request failed or went: delete its NodeClaims that are not Initialized (an Initialized
    node of a request that went stays, an ordinary node consolidation may take)."""

    claims: tuple[str, ...]


Step = (
    Leave
    | Conditions
    | Check
    | PlanAttempt
    | Rollback
    | MarkProvisioned
    | Book
    | ExpireBooking
    | Consumed
    | Revoke
    | Fail
    | Cleanup
)


# --- the decision ---------------------------------------------------------------------------------


def backoff_seconds(level: int, *, base: float, maximum: float) -> float:
    return float(min(maximum, base * 2.0 ** max(0, level)))


def _accept(req: ProvisioningRequest) -> tuple[ConditionUpdate, ...]:
    if req.is_true(ACCEPTED):
        return ()
    return (ConditionUpdate(ACCEPTED, "True", REASON_ACCEPTED, MSG_ACCEPTED),)


def claim_lost(claim: NodeClaimView | None) -> bool:
    return claim is None or claim.deleting


def booking_until(req: ProvisioningRequest, knobs: Knobs) -> datetime | None:
    at = req.provisioned_at
    return None if at is None else at + timedelta(seconds=knobs.booking_seconds)


def booked(v: RequestView, *, now: datetime, knobs: Knobs) -> bool:
    """Whether the request's capacity is held for its pods now."""
    req = v.request
    if not req.served or req.deleting or req.is_true(FAILED) or req.is_true(BOOKING_EXPIRED):
        return False
    if req.is_true(CAPACITY_REVOKED):
        return False
    until = booking_until(req, knobs)
    if until is None or now >= until:
        return False
    return v.consumers_bound < req.count


def decide(v: RequestView, *, now: datetime, knobs: Knobs) -> Step:
    req = v.request
    if not req.served:
        return Leave()
    in_flight = tuple(sorted(n for n, c in v.claims.items() if not c.deleting))
    if req.deleting:
        return gone(v)
    if req.is_true(FAILED):
        return Cleanup(claims=in_flight) if in_flight else Leave(release=True)
    if req.is_true(PROVISIONED):
        return _booking(v, now=now, knobs=knobs)

    problems = spec_problems(req) + list(options(req).problems)
    if problems:
        return Fail(reason=REASON_INVALID, message="; ".join(problems), claims=in_flight)
    opts = options(req)
    created = req.created or now
    if opts.valid_until_seconds is not None and now >= created + timedelta(seconds=opts.valid_until_seconds):
        return Fail(
            reason=REASON_EXPIRED,
            message=f"ProvisioningRequest is expired: not provisioned within {PARAM_VALID_UNTIL}="
            f"{format_seconds(opts.valid_until_seconds)} of its creation"
            + (f" (last: {v.attempt.last_failure})" if v.attempt is not None and v.attempt.last_failure else ""),
            claims=in_flight,
        )
    missing = sorted({s.template for s in req.pod_sets if s.template not in v.templates})
    if missing:
        waited = (now - created).total_seconds()
        if waited >= knobs.template_wait_seconds:
            return Fail(
                reason=REASON_INVALID,
                message=f"PodTemplate {', '.join(missing)} not found in namespace {req.namespace}",
                claims=in_flight,
            )
        return Conditions(updates=_accept(req), requeue=max(1.0, knobs.template_wait_seconds - waited))

    if not req.atomic:
        return Check(accept=_accept(req))
    return _atomic(v, now=now, knobs=knobs, same_zone=opts.same_zone, timeout=opts.timeout_seconds)


def gone(v: RequestView) -> Step:
    """The request is being deleted (or is gone): release its booking, delete what is still coming up."""
    left = tuple(sorted(n for n, c in v.claims.items() if not c.deleting and not c.is_true(INITIALIZED)))
    return Cleanup(claims=left) if left else Leave(release=True)


def _atomic(v: RequestView, *, now: datetime, knobs: Knobs, same_zone: bool | None, timeout: float | None) -> Step:
    req, rec = v.request, v.attempt
    seconds = timeout or knobs.attempt_timeout_seconds
    if rec is None or not rec.claims:
        number = (rec.number if rec is not None else 0) + 1
        if rec is not None and rec.retry_at is not None and now < rec.retry_at:
            return Conditions(updates=_accept(req), requeue=(rec.retry_at - now).total_seconds())
        return PlanAttempt(
            number=number,
            level=rec.level if rec is not None else 0,
            same_zone=same_zone,
            timeout_seconds=seconds,
            accept=_accept(req),
            last_failure=rec.last_failure if rec is not None else "",
        )
    lost = [n for n in rec.claims if claim_lost(v.claims.get(n))]
    if lost:
        claims = [v.claims[n] for n in rec.claims if n in v.claims]
        reasons = sorted({c.annotations.get("joiner.sh/termination-reason", "") for c in claims if c.deleting} - {""})
        capacity_only = reasons == ["InsufficientCapacity"]
        why = ", ".join(reasons) if reasons else "deleted"
        message = (
            f"attempt {rec.number}: NodeClaim {', '.join(sorted(lost))} was lost ({why}); every NodeClaim of the "
            "attempt is deleted and the request is tried again"
        )
        return _rollback(v, message=message, capacity_only=capacity_only, knobs=knobs, now=now)
    waiting = [n for n in rec.claims if not v.claims[n].is_true(INITIALIZED)]
    if not waiting:
        return MarkProvisioned(
            claims=rec.claims, seconds=(now - req.created).total_seconds() if req.created is not None else None
        )
    if rec.deadline is not None and now >= rec.deadline:
        message = (
            f"attempt {rec.number}: {len(waiting)} of {len(rec.claims)} NodeClaims not Initialized by the "
            f"attempt's deadline ({', '.join(waiting[:5])}); every NodeClaim of the attempt is deleted and the "
            "request is tried again"
        )
        return _rollback(v, message=message, capacity_only=False, knobs=knobs, now=now)
    remaining = (rec.deadline - now).total_seconds() if rec.deadline is not None else seconds
    message = provisioning_message(rec, waiting=waiting, pods=req.count)
    return Conditions(updates=(*_accept(req), provisioning_update(message)), requeue=remaining, hold_attempt=True)


def _rollback(v: RequestView, *, message: str, capacity_only: bool, knobs: Knobs, now: datetime) -> Rollback:
    rec = v.attempt
    assert rec is not None
    level = rec.level if capacity_only else rec.level + 1
    # a capacity refusal is retried at once: the refused offerings are avoided for their TTL
    wait = (
        0.0
        if capacity_only
        else backoff_seconds(level - 1, base=knobs.backoff_base_seconds, maximum=knobs.backoff_max_seconds)
    )
    record = replace(rec, claims=(), level=level, retry_at=now + timedelta(seconds=wait), last_failure=message)
    return Rollback(
        claims=tuple(sorted(n for n in v.claims if not v.claims[n].deleting)),
        reason=REASON_CAPACITY_NOT_FOUND,
        message=message,
        attempt=record,
        retry_in=wait,
    )


def _booking(v: RequestView, *, now: datetime, knobs: Knobs) -> Step:
    req = v.request
    if req.is_true(BOOKING_EXPIRED) or req.is_true(CAPACITY_REVOKED):
        return Leave(release=True)
    until = booking_until(req, knobs)
    if v.consumers_bound >= req.count:
        return Consumed(bound=v.consumers_bound)  # every pod it was made for is bound: nothing left to hold
    if until is None or now >= until:
        return ExpireBooking()
    rec = v.attempt
    own = [n for n in rec.claims if claim_lost(v.claims.get(n))] if req.atomic and rec is not None else []
    lost = tuple(sorted({*own, *v.booked_gone}))
    if lost:
        return Revoke(
            message=f"the capacity booked for this request is gone before its pods bound: {claim_names(list(lost))} "
            f"{'was' if len(lost) == 1 else 'were'} deleted ({v.consumers_bound} of {req.count} pods bound)",
            lost=lost,
        )
    return Book(until=until, remaining=(until - now).total_seconds())


def provisioned_update(*, atomic: bool, message: str) -> ConditionUpdate:
    if atomic:
        return ConditionUpdate(PROVISIONED, "True", REASON_CAPACITY_PROVISIONED, message)
    return ConditionUpdate(PROVISIONED, "True", REASON_CAPACITY_FOUND, message or MSG_CAPACITY_FOUND)


def provisioning_message(
    rec: Attempt, *, pods: int, buying: str | None = None, waiting: Sequence[str] | None = None
) -> str:
    """``Provisioned=False`` while an attempt's machines come up (Kueue copies the message to its check)."""
    if buying is not None:
        what = f"joiner is buying {buying} for the {pods} pods of this request"
    else:
        left = list(waiting or ())
        what = f"{len(left)} of {len(rec.claims)} NodeClaims not Initialized yet ({claim_names(left)})"
    return f"attempt {rec.number}: {what}; Provisioned when every node is Initialized"


def provisioning_update(message: str) -> ConditionUpdate:
    return ConditionUpdate(PROVISIONED, "False", REASON_PROVISIONING, message)


def not_found_update(message: str) -> ConditionUpdate:
    return ConditionUpdate(PROVISIONED, "False", REASON_CAPACITY_NOT_FOUND, message)


def failed_update(reason: str, message: str) -> ConditionUpdate:
    return ConditionUpdate(FAILED, "True", reason, message)


def expired_update() -> ConditionUpdate:
    return ConditionUpdate(BOOKING_EXPIRED, "True", REASON_BOOKING_EXPIRED, MSG_BOOKING_EXPIRED)


def consumed_update(bound: int) -> ConditionUpdate:
    return ConditionUpdate(
        BOOKING_EXPIRED,
        "True",
        REASON_BOOKING_CONSUMED,
        f"Capacity booking is consumed: the {bound} pods of this request were scheduled",
    )


def revoked_update(message: str) -> ConditionUpdate:
    return ConditionUpdate(CAPACITY_REVOKED, "True", REASON_CAPACITY_REVOKED, message)


def miss(req: ProvisioningRequest, *, why: str, permanent: bool, knobs: Knobs) -> Conditions:
    """The request does not fit: ``Failed=True`` when it never can (or ``noRetry``), else
    ``Provisioned=False`` and a look again later, as cluster-autoscaler does."""
    if permanent or options(req).no_retry:
        reason = REASON_NEVER_FITS if permanent else REASON_CAPACITY_NOT_FOUND
        return Conditions(
            updates=(*_accept(req), failed_update(reason, why)),
            event=("ProvisioningFailed", why, True),
        )
    return Conditions(
        updates=(*_accept(req), not_found_update(f"Capacity is not found, joiner will try again: {why}")),
        requeue=knobs.retry_seconds,
        event=("CapacityNotFound", why, True),
    )


def attempt_of(annotations: Mapping[str, str]) -> Attempt | None:
    return Attempt.from_json(annotations.get(ANNOTATION_ATTEMPT))


def claim_names(claims: Sequence[str]) -> str:
    return ", ".join(claims[:5]) + (f" and {len(claims) - 5} more" if len(claims) > 5 else "")
