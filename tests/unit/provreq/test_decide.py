"""What joiner does next for a ProvisioningRequest, as a pure function: every transition, on a fixed clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.clock import format_time
from controller.provreq.decide import (
    Attempt,
    Book,
    Check,
    Cleanup,
    Conditions,
    Consumed,
    ExpireBooking,
    Fail,
    Knobs,
    Leave,
    MarkProvisioned,
    PlanAttempt,
    RequestView,
    Revoke,
    Rollback,
    attempt_of,
    booked,
    decide,
    miss,
)
from controller.provreq.request import (
    CLASS_BEST_EFFORT_ATOMIC,
    CLASS_CHECK_CAPACITY,
    CLASS_JOINER_ATOMIC,
    ProvisioningRequest,
    options,
    placeholder_pods,
)
from controller.state.views import NodeClaimView

Obj = dict[str, Any]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
KNOBS = Knobs(booking_seconds=600, attempt_timeout_seconds=900, backoff_base_seconds=30, backoff_max_seconds=600)
TEMPLATE: Obj = {
    "metadata": {"name": "ppt", "namespace": "ns"},
    "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}},
}


def request(
    *,
    klass: str = CLASS_BEST_EFFORT_ATOMIC,
    count: int = 2,
    conditions: list[Obj] | None = None,
    params: dict[str, str] | None = None,
    attempt: Attempt | None = None,
    deleting: bool = False,
) -> ProvisioningRequest:
    meta: Obj = {"name": "job", "namespace": "ns", "uid": "u1", "creationTimestamp": format_time(T0)}
    if attempt is not None:
        meta["annotations"] = {"joiner.sh/provisioning-attempt": attempt.to_json()}
    if deleting:
        meta["deletionTimestamp"] = format_time(T0)
    return ProvisioningRequest.of(
        {
            "metadata": meta,
            "spec": {
                "provisioningClassName": klass,
                "podSets": [{"podTemplateRef": {"name": "ppt"}, "count": count}],
                "parameters": params or {},
            },
            "status": {"conditions": conditions or []},
        }
    )


def cond(ctype: str, status: str = "True", *, at: datetime = T0) -> Obj:
    return {"type": ctype, "status": status, "reason": "R", "message": "", "lastTransitionTime": format_time(at)}


def claim(name: str, *, initialized: bool = False, deleting: bool = False, reason: str = "") -> NodeClaimView:
    meta: Obj = {"name": name, "annotations": {}}
    if deleting:
        meta["deletionTimestamp"] = format_time(T0)
    if reason:
        meta["annotations"]["joiner.sh/termination-reason"] = reason
    status = "True" if initialized else "Unknown"
    return NodeClaimView.of(
        {"metadata": meta, "spec": {}, "status": {"conditions": [{"type": "Initialized", "status": status}]}}
    )


def view(
    req: ProvisioningRequest, *, claims: Sequence[NodeClaimView] = (), templates: bool = True, **kw: Any
) -> RequestView:
    return RequestView(
        request=req,
        templates={"ppt": TEMPLATE} if templates else {},
        claims={c.name: c for c in claims},
        attempt=attempt_of(req.annotations),
        **kw,
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_request_of_another_class_is_left_alone() -> None:
    assert decide(view(request(klass="queued-provisioning.gke.io")), now=at(1), knobs=KNOBS) == Leave()


def test_a_new_atomic_request_is_accepted_and_planned() -> None:
    step = decide(view(request()), now=at(1), knobs=KNOBS)
    assert isinstance(step, PlanAttempt)
    assert step.number == 1
    assert [u.type for u in step.accept] == ["Accepted"]
    assert step.same_zone is None, "cluster-autoscaler's class: the NodePools decide"
    joiner = decide(view(request(klass=CLASS_JOINER_ATOMIC)), now=at(1), knobs=KNOBS)
    assert isinstance(joiner, PlanAttempt)
    assert joiner.same_zone is True, "joiner's class keeps to one zone unless told otherwise"


def test_check_capacity_checks() -> None:
    assert isinstance(decide(view(request(klass=CLASS_CHECK_CAPACITY)), now=at(1), knobs=KNOBS), Check)


def test_a_missing_pod_template_is_waited_for_then_fails_the_request() -> None:
    step = decide(view(request(), templates=False), now=at(5), knobs=KNOBS)
    assert isinstance(step, Conditions)
    assert step.requeue == pytest.approx(55)
    late = decide(view(request(), templates=False), now=at(61), knobs=KNOBS)
    assert isinstance(late, Fail)
    assert "PodTemplate ppt not found in namespace ns" in late.message


def test_an_attempt_waits_for_every_nodeclaim_then_is_provisioned() -> None:
    rec = Attempt(number=1, claims=("a", "b"), started=T0, deadline=at(900))
    waiting = decide(
        view(request(attempt=rec), claims=[claim("a", initialized=True), claim("b")]), now=at(10), knobs=KNOBS
    )
    assert isinstance(waiting, Conditions)
    assert waiting.requeue == pytest.approx(890)
    assert waiting.hold_attempt, "the coming machines' room stays booked (again after a restart)"
    [provisioning] = [u for u in waiting.updates if u.type == "Provisioned"]
    assert provisioning.status == "False"
    assert "1 of 2 NodeClaims not Initialized yet (b)" in provisioning.message
    done = decide(
        view(request(attempt=rec), claims=[claim("a", initialized=True), claim("b", initialized=True)]),
        now=at(20),
        knobs=KNOBS,
    )
    assert done == MarkProvisioned(claims=("a", "b"), seconds=20.0)


def test_a_nodeclaim_refused_for_capacity_rolls_the_attempt_back_and_retries_at_once() -> None:
    rec = Attempt(number=1, claims=("a", "b"), started=T0, deadline=at(900))
    step = decide(
        view(request(attempt=rec), claims=[claim("a"), claim("b", deleting=True, reason="InsufficientCapacity")]),
        now=at(10),
        knobs=KNOBS,
    )
    assert isinstance(step, Rollback)
    assert step.claims == ("a",), "the other NodeClaim is deleted too: all or nothing"
    assert step.retry_in == 0, "a capacity refusal is retried at once, avoiding the offering"
    assert step.attempt.level == 0
    assert "InsufficientCapacity" in step.message


def test_a_deadline_rolls_back_with_a_growing_backoff() -> None:
    rec = Attempt(number=2, claims=("a",), started=T0, deadline=at(900), level=1)
    step = decide(view(request(attempt=rec), claims=[claim("a")]), now=at(901), knobs=KNOBS)
    assert isinstance(step, Rollback)
    assert step.attempt.level == 2
    assert step.retry_in == 60, "30 s doubled at the second slow attempt"
    retry = Attempt(number=2, level=2, retry_at=at(961))
    early = decide(view(request(attempt=retry)), now=at(930), knobs=KNOBS)
    assert isinstance(early, Conditions)
    assert early.requeue == pytest.approx(31)
    again = decide(view(request(attempt=retry)), now=at(962), knobs=KNOBS)
    assert isinstance(again, PlanAttempt)
    assert again.number == 3


def test_booking_holds_until_the_pods_bind_or_the_time_passes() -> None:
    provisioned = request(conditions=[cond("Provisioned", at=at(100))])
    step = decide(view(provisioned, consumers_bound=1), now=at(200), knobs=KNOBS)
    assert step == Book(until=at(700), remaining=500.0)
    assert booked(view(provisioned, consumers_bound=1), now=at(200), knobs=KNOBS)
    assert decide(view(provisioned, consumers_bound=2), now=at(200), knobs=KNOBS) == Consumed(bound=2)
    revoked = request(conditions=[cond("Provisioned", at=at(100)), cond("CapacityRevoked", at=at(150))])
    assert decide(view(revoked, consumers_bound=1), now=at(200), knobs=KNOBS) == Leave(release=True)
    assert not booked(view(revoked), now=at(200), knobs=KNOBS)
    assert decide(view(provisioned), now=at(700), knobs=KNOBS) == ExpireBooking()
    expired = request(conditions=[cond("Provisioned", at=at(100)), cond("BookingExpired", at=at(700))])
    assert decide(view(expired), now=at(800), knobs=KNOBS) == Leave(release=True)
    assert not booked(view(expired), now=at(800), knobs=KNOBS)


def test_valid_until_seconds_fails_a_request_not_provisioned_in_time() -> None:
    rec = Attempt(number=1, claims=("a",), started=T0, deadline=at(900))
    req = request(params={"ValidUntilSeconds": "600"}, attempt=rec)
    step = decide(view(req, claims=[claim("a")]), now=at(601), knobs=KNOBS)
    assert isinstance(step, Fail)
    assert step.reason == "Expired"
    assert step.claims == ("a",), "nothing left behind"


def test_a_failed_or_deleted_request_leaves_nothing_coming_up() -> None:
    failed = request(conditions=[cond("Failed")])
    assert decide(view(failed, claims=[claim("a")]), now=at(1), knobs=KNOBS) == Cleanup(claims=("a",))
    gone = request(deleting=True)
    step = decide(view(gone, claims=[claim("a"), claim("b", initialized=True)]), now=at(1), knobs=KNOBS)
    assert step == Cleanup(claims=("a",)), "an Initialized node stays, for consolidation to take"


def test_bad_parameters_fail_the_request_with_the_parameter_named() -> None:
    step = decide(view(request(params={"noRetry": "maybe", "timeout": "soon"})), now=at(1), knobs=KNOBS)
    assert isinstance(step, Fail)
    assert "noRetry='maybe' must be true or false" in step.message
    assert "timeout='soon' is not a duration" in step.message


def test_a_miss_is_retried_unless_it_can_never_fit_or_no_retry_is_asked() -> None:
    retry = miss(request(), why="no room", permanent=False, knobs=KNOBS)
    assert [(u.type, u.status, u.reason) for u in retry.updates][-1] == ("Provisioned", "False", "CapacityIsNotFound")
    assert retry.requeue == 30
    never = miss(request(), why="16 GPUs", permanent=True, knobs=KNOBS)
    assert [(u.type, u.reason) for u in never.updates][-1] == ("Failed", "CapacityCannotFit")
    assert never.requeue is None
    once = miss(request(params={"noRetry": "true"}), why="no room", permanent=False, knobs=KNOBS)
    assert [(u.type, u.reason) for u in once.updates][-1] == ("Failed", "CapacityIsNotFound")


def test_options_and_placeholders() -> None:
    opts = options(request(klass=CLASS_JOINER_ATOMIC, params={"sameZone": "false", "timeout": "20m"}))
    assert opts.same_zone is False
    assert opts.timeout_seconds == 1200
    pods = placeholder_pods(request(count=3), {"ppt": TEMPLATE})
    assert [p["metadata"]["name"] for p in pods] == ["job-0-0", "job-0-1", "job-0-2"]
    assert all(p["metadata"]["namespace"] == "ns" for p in pods)
    assert pods[0]["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}


def test_the_attempt_record_round_trips() -> None:
    rec = Attempt(number=3, claims=("a", "b"), started=T0, deadline=at(900), level=2, retry_at=at(60), last_failure="x")
    assert Attempt.from_json(rec.to_json()) == rec
    assert Attempt.from_json("{not json") is None


def test_a_booked_machine_lost_before_the_pods_bind_revokes_the_capacity() -> None:
    record = Attempt(number=1, claims=("a", "b"), started=at(0), deadline=at(900))
    provisioned = request(conditions=[cond("Provisioned", at=at(100))], attempt=record)
    whole = [claim("a", initialized=True), claim("b", initialized=True)]
    assert isinstance(decide(view(provisioned, claims=whole, consumers_bound=1), now=at(200), knobs=KNOBS), Book)
    for claims in ([claim("a", initialized=True)], [whole[0], claim("b", initialized=True, deleting=True)]):
        step = decide(view(provisioned, claims=claims, consumers_bound=1), now=at(200), knobs=KNOBS)
        assert isinstance(step, Revoke)
        assert step.lost == ("b",)
        assert "b was deleted (1 of 2 pods bound)" in step.message
    # a node of room found on the cluster (check-capacity, or an atomic request answered CapacityIsFound)
    found = request(klass=CLASS_CHECK_CAPACITY, conditions=[cond("Provisioned", at=at(100))])
    step = decide(view(found, booked_gone=("n1",)), now=at(200), knobs=KNOBS)
    assert isinstance(step, Revoke)
    assert step.lost == ("n1",)
    # every pod bound: the booking is consumed, whatever happens to the nodes after
    assert decide(view(found, booked_gone=("n1",), consumers_bound=2), now=at(200), knobs=KNOBS) == Consumed(bound=2)
