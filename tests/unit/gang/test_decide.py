"""The gang's next step from what is observed: every state a crash can leave ends finished or rolled back."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from controller.gang.decide import (
    Admit,
    DeleteClaims,
    DeleteNodes,
    Knobs,
    MarkAdmitted,
    MarkFinished,
    MemberLost,
    Pin,
    PlanAttempt,
    Replan,
    Rollback,
    SizeUnknown,
    Wait,
    WaitForMembers,
    completed_at,
    decide,
)
from controller.gang.record import ROLLED_BACK, backoff_seconds
from controller.state.views import PodView
from tests.unit.gang.builders import T0, admitted, claim, member, node, provisioning, view

KNOBS = Knobs(member_wait_seconds=60, backoff_base_seconds=30, backoff_max_seconds=600)
CLAIMS = ("c0", "c1", "c2")


def pinned(*names: str, record: object | None = None) -> list[dict[str, object]]:
    rec = record if record is not None else provisioning(*CLAIMS)
    return [member(n, pinned=True, record=rec) for n in names]  # type: ignore[arg-type]


# --- before an attempt ----------------------------------------------------------------------------


def test_nothing_is_bought_until_every_member_exists() -> None:
    d = decide(view([member("a"), member("b")]), now=T0 + timedelta(seconds=10), knobs=KNOBS)
    assert isinstance(d, WaitForMembers)
    assert (d.present, d.size, d.warn) == (2, 3, False)
    assert d.recheck == 50


def test_users_are_told_who_is_missing_after_the_member_wait() -> None:
    d = decide(view([member("a"), member("b")]), now=T0 + timedelta(seconds=61), knobs=KNOBS)
    assert isinstance(d, WaitForMembers)
    assert d.warn
    assert d.recheck is None


def test_an_unknown_size_is_said_in_actionable_words() -> None:
    d = decide(view([member("a")], size=None), now=T0, knobs=KNOBS)
    assert isinstance(d, SizeUnknown)
    assert "joiner.sh/gang-size" in d.message
    assert "minMember" in d.message


def test_a_complete_gang_is_planned_in_one_go() -> None:
    d = decide(view([member("a"), member("b"), member("c")]), now=T0, knobs=KNOBS)
    assert d == PlanAttempt(top_up=False)


def test_more_members_than_the_size_is_fine() -> None:
    d = decide(view([member(n) for n in "abcd"]), now=T0, knobs=KNOBS)
    assert d == PlanAttempt(top_up=False)


def test_after_a_rollback_the_gang_backs_off_then_plans_again() -> None:
    rolled = provisioning(*CLAIMS).next(phase=ROLLED_BACK, rollbacks=1, retry_at=T0 + timedelta(seconds=30))
    gang = view(pinned("a", "b", "c", record=rolled), pending=rolled)
    d = decide(gang, now=T0 + timedelta(seconds=10), knobs=KNOBS)
    assert isinstance(d, Wait)
    assert d.seconds == 20
    assert decide(gang, now=T0 + timedelta(seconds=30), knobs=KNOBS) == PlanAttempt(top_up=False)


def test_leftovers_of_a_rolled_back_attempt_are_deleted_first() -> None:
    rolled = provisioning(*CLAIMS).next(phase=ROLLED_BACK, rollbacks=1, retry_at=T0)
    gang = view(pinned("a", "b", "c", record=rolled), pending=rolled, claims=[claim("c0"), claim("c1")])
    d = decide(gang, now=T0 + timedelta(seconds=60), knobs=KNOBS)
    assert isinstance(d, DeleteClaims)
    assert d.names == ("c0", "c1")
    assert d.reason == "GangRolledBack"


def test_nodes_of_an_earlier_gang_with_the_same_id_go_before_a_fresh_attempt() -> None:
    old = claim("old", initialized=True, admitted=False, attempt="z9")
    d = decide(view([member(n) for n in "abc"], claims=[old]), now=T0, knobs=KNOBS)
    assert isinstance(d, DeleteClaims)
    assert d.reason == "GangSuperseded"
    assert d.names == ("old",)
    going = claim("old", deleting=True, admitted=False, attempt="z9")
    d = decide(view([member(n) for n in "abc"], claims=[going]), now=T0, knobs=KNOBS)
    assert isinstance(d, Wait), "the new attempt waits until the old nodes are gone"


def test_claims_of_a_gang_whose_pods_are_gone_are_deleted() -> None:
    d = decide(view([], claims=[claim("c0"), claim("c1")], pending=None), now=T0, knobs=KNOBS)
    assert isinstance(d, DeleteClaims)
    assert d.reason == "GangDeleted"


# --- during an attempt ----------------------------------------------------------------------------


def test_members_not_yet_pinned_are_pinned() -> None:
    rec = provisioning(*CLAIMS)
    gated = [member("a", pinned=True, record=rec), member("b"), member("c", pinned=True)]
    claims = [claim(n) for n in CLAIMS]
    d = decide(view(gated, pending=rec, claims=claims, seen=set(CLAIMS)), now=T0, knobs=KNOBS)
    assert d == Pin(("b", "c")), "b is not pinned, c has no record of this attempt"


def test_members_beyond_the_planned_count_wait_and_a_replacement_takes_its_place() -> None:
    rec = provisioning(*CLAIMS).next(members=3)
    claims = [claim(n, initialized=True) for n in CLAIMS]
    extra = member("d", created=T0 + timedelta(seconds=30))
    gang = view([*pinned("a", "b", "c", record=rec), extra], pending=rec, claims=claims)
    assert decide(gang, now=T0, knobs=KNOBS) == Admit(("a", "b", "c")), "d waits for a top-up"
    replacement = member("c2", created=T0 + timedelta(seconds=20))
    gang = view([*pinned("a", "b", record=rec), extra, replacement], pending=rec, claims=claims)
    assert decide(gang, now=T0, knobs=KNOBS) == Pin(("c2",)), "the earliest newcomer takes the free place"


def test_the_gang_waits_until_every_node_is_initialized() -> None:
    rec = provisioning(*CLAIMS)
    claims = [claim("c0", initialized=True), claim("c1", initialized=True), claim("c2")]
    d = decide(view(pinned("a", "b", "c"), pending=rec, claims=claims), now=T0 + timedelta(minutes=5), knobs=KNOBS)
    assert isinstance(d, Wait)
    assert d.seconds == 600
    assert "1 of 3" in d.why


def test_every_gate_is_removed_together_once_every_node_is_initialized() -> None:
    rec = provisioning(*CLAIMS)
    claims = [claim(n, initialized=True) for n in CLAIMS]
    d = decide(view(pinned("a", "b", "c"), pending=rec, claims=claims), now=T0, knobs=KNOBS)
    assert d == Admit(("a", "b", "c"))


def test_a_failed_member_rolls_back_the_whole_attempt_with_its_reason() -> None:
    rec = provisioning(*CLAIMS)
    claims = [claim("c0", initialized=True), claim("c1", deleting=True, reason="RegistrationTimedOut"), claim("c2")]
    d = decide(view(pinned("a", "b", "c"), pending=rec, claims=claims), now=T0, knobs=KNOBS)
    assert isinstance(d, Rollback)
    assert d.reason == "RegistrationTimedOut"
    assert d.failed == ("c1",)
    assert d.backoff
    assert not d.capacity_only, "a machine that ran and never registered cost time: the backoff grows"
    assert d.avoid == ("gpu-8/zone-a/on-demand",)
    assert "nodeclaim/c1 (gpu-8, zone-a) failed: RegistrationTimedOut" in d.message


def test_a_member_refused_for_capacity_is_planned_again_alone_keeping_the_launched_ones() -> None:
    rec = provisioning(*CLAIMS)
    claims = [claim("c0", initialized=True), claim("c1", deleting=True, reason="InsufficientCapacity"), claim("c2")]
    d = decide(view(pinned("a", "b", "c"), pending=rec, claims=claims), now=T0, knobs=KNOBS)
    assert isinstance(d, Replan)
    assert d.kept == ("c0", "c2")
    # what applies when the refused member cannot be bought again beside the others
    assert d.rollback.reason == "InsufficientCapacity"
    assert d.rollback.failed == ("c1",)
    assert d.rollback.avoid == ("gpu-8/zone-a/on-demand",)
    assert d.rollback.capacity_only
    assert "nodeclaim/c1 (gpu-8, zone-a) failed: InsufficientCapacity" in d.rollback.message


def test_refusals_roll_the_attempt_back_when_nothing_launched_past_the_deadline_or_after_too_many_replans() -> None:
    every = [claim(n, deleting=True, reason="InsufficientCapacity") for n in CLAIMS]
    d = decide(view(pinned("a", "b", "c"), pending=provisioning(*CLAIMS), claims=every), now=T0, knobs=KNOBS)
    assert isinstance(d, Rollback), "nothing launched: nothing to keep, the retry plans afresh after the backoff"
    assert d.capacity_only

    one = [claim("c0", initialized=True), claim("c1", deleting=True, reason="InsufficientCapacity"), claim("c2")]
    late = view(pinned("a", "b", "c"), pending=provisioning(*CLAIMS, deadline=timedelta(minutes=1)), claims=one)
    assert isinstance(decide(late, now=T0 + timedelta(seconds=59), knobs=KNOBS), Replan)
    assert isinstance(decide(late, now=T0 + timedelta(minutes=1), knobs=KNOBS), Rollback)

    rec = replace(provisioning(*CLAIMS), replans=KNOBS.max_replans)
    d = decide(view(pinned("a", "b", "c", record=rec), pending=rec, claims=one), now=T0, knobs=KNOBS)
    assert isinstance(d, Rollback), "a gang refused again and again is rolled back whole, with the backoff"

    mixed = [
        claim("c0", deleting=True, reason="InsufficientCapacity"),
        claim("c1", deleting=True, reason="InitializationTimedOut"),
        claim("c2"),
    ]
    d = decide(view(pinned("a", "b", "c"), pending=provisioning(*CLAIMS), claims=mixed), now=T0, knobs=KNOBS)
    assert isinstance(d, Rollback), "a machine that broke is not a refusal: the whole attempt goes"


def test_a_rollback_only_on_refused_capacity_does_not_raise_the_backoff_level() -> None:
    rec = provisioning(*CLAIMS)
    refused = [claim(n, deleting=True, reason="InsufficientCapacity") for n in CLAIMS]
    d = decide(view(pinned("a", "b", "c"), pending=rec, claims=refused), now=T0, knobs=KNOBS)
    assert isinstance(d, Rollback)
    assert d.capacity_only
    timed_out = [
        claim("c0", deleting=True, reason="InsufficientCapacity"),
        claim("c1", deleting=True, reason="InitializationTimedOut"),
        claim("c2"),
    ]
    d = decide(view(pinned("a", "b", "c"), pending=rec, claims=timed_out), now=T0, knobs=KNOBS)
    assert isinstance(d, Rollback)
    assert not d.capacity_only, "a machine that ran and never became Ready cost time: the backoff grows"


def test_a_claim_that_vanished_after_it_was_seen_is_a_failure() -> None:
    rec = provisioning(*CLAIMS)
    claims = [claim("c0"), claim("c2")]
    d = decide(view(pinned("a", "b", "c"), pending=rec, claims=claims, seen=set(CLAIMS)), now=T0, knobs=KNOBS)
    assert isinstance(d, Rollback)
    assert d.reason == "NodeClaimDeleted"
    assert d.backoff


def test_claims_never_created_because_of_a_crash_are_retried_at_once() -> None:
    rec = provisioning(*CLAIMS)
    d = decide(view(pinned("a", "b", "c"), pending=rec, claims=[claim("c0")], seen={"c0"}), now=T0, knobs=KNOBS)
    assert isinstance(d, Rollback)
    assert d.reason == "Interrupted"
    assert not d.backoff
    assert d.failed == ("c1", "c2")


def test_the_deadline_rolls_back_and_names_the_slow_members() -> None:
    rec = provisioning(*CLAIMS, deadline=timedelta(minutes=15))
    claims = [claim("c0", initialized=True), claim("c1", initialized=True), claim("c2")]
    gang = view(pinned("a", "b", "c"), pending=rec, claims=claims)
    assert isinstance(decide(gang, now=T0 + timedelta(minutes=14), knobs=KNOBS), Wait)
    d = decide(gang, now=T0 + timedelta(minutes=15), knobs=KNOBS)
    assert isinstance(d, Rollback)
    assert d.reason == "DeadlineExceeded"
    assert d.failed == ("c2",)
    assert "within 15m" in d.message
    assert "nodeclaim/c2" in d.message
    assert "not initialized" in d.message.lower()


def test_a_member_deleted_during_the_attempt_is_waited_for_until_the_deadline() -> None:
    rec = provisioning(*CLAIMS)
    claims = [claim(n, initialized=True) for n in CLAIMS]
    d = decide(view(pinned("a", "b"), pending=rec, claims=claims), now=T0, knobs=KNOBS)
    assert isinstance(d, WaitForMembers)
    assert d.recheck is not None
    assert d.recheck <= 60
    late = decide(view(pinned("a", "b"), pending=rec, claims=claims), now=T0 + timedelta(minutes=15), knobs=KNOBS)
    assert isinstance(late, Rollback)
    assert "1 member pod(s) missing" in late.message


def test_claims_of_no_attempt_are_deleted_even_mid_attempt() -> None:
    rec = provisioning(*CLAIMS)
    claims = [claim(n) for n in CLAIMS] + [claim("stray", attempt="zz")]
    d = decide(view(pinned("a", "b", "c"), pending=rec, claims=claims), now=T0, knobs=KNOBS)
    assert isinstance(d, DeleteClaims)
    assert d.names == ("stray",)
    assert d.reason == "GangAbandoned"


# --- after admission ------------------------------------------------------------------------------


def test_admitted_claims_are_marked_so_nothing_consolidates_them() -> None:
    adm = admitted(*CLAIMS)
    released = [member(n, gated=False, record=adm) for n in "abc"]
    claims = [claim(n, initialized=True) for n in CLAIMS]
    d = decide(view([], released=released, claims=claims, admitted=adm), now=T0, knobs=KNOBS)
    assert d == MarkAdmitted(CLAIMS)
    marked = [claim(n, initialized=True, admitted=True) for n in CLAIMS]
    d = decide(view([], released=released, claims=marked, admitted=adm), now=T0, knobs=KNOBS)
    assert isinstance(d, Wait)


def test_a_crash_while_removing_gates_is_finished() -> None:
    rec = provisioning(*CLAIMS)
    adm = rec.next(phase="Admitted")
    released = [member("a", gated=False, record=adm)]
    gated = pinned("b", "c", record=rec)
    claims = [claim(n, initialized=True) for n in CLAIMS]
    d = decide(view(gated, released=released, claims=claims, pending=rec, admitted=adm), now=T0, knobs=KNOBS)
    assert d == Admit(("b", "c"))


def test_an_interrupted_admission_is_finished_before_anything_else_about_the_gang() -> None:
    """A leader died between the gate removals: the rest of the gang follows first, before leftovers of
    an earlier attempt are deleted (a 5 s recheck) and before a lost node's policy is applied."""
    rec = provisioning(*CLAIMS)
    adm = rec.next(phase="Admitted")
    released = [member("a", gated=False, record=adm)]
    gated = pinned("b", "c", record=rec)
    stale = claim("old-0", initialized=True)
    stale["metadata"]["annotations"]["joiner.sh/gang-attempt"] = "old"
    claims = [*(claim(n, initialized=True) for n in CLAIMS), stale]
    d = decide(view(gated, released=released, claims=claims, pending=rec, admitted=adm), now=T0, knobs=KNOBS)
    assert d == Admit(("b", "c"))
    lost = [claim("c0", initialized=True), claim("c1", initialized=True), claim("c2", deleting=True)]
    d = decide(view(gated, released=released, claims=lost, pending=rec, admitted=adm), now=T0, knobs=KNOBS)
    assert d == Admit(("b", "c")), "the members run already: the rest join them, then the policy applies"


def test_a_lost_node_applies_the_policy() -> None:
    adm = admitted(*CLAIMS)
    released = [member(n, gated=False, record=adm) for n in "abc"]
    claims = [claim("c0", initialized=True, admitted=True), claim("c1", deleting=True, reason="Interrupted")]
    for policy in ("restart-gang", "replace-member"):
        d = decide(view([], released=released, claims=claims, admitted=adm, policy=policy), now=T0, knobs=KNOBS)
        assert isinstance(d, MemberLost)
        assert d.lost == ("c1", "c2")
        assert d.policy == policy


def test_a_replacement_member_of_a_running_gang_is_planned_on_its_own() -> None:
    adm = admitted("c0", "c1")
    released = [member(n, gated=False, record=adm) for n in "ab"]
    claims = [claim(n, initialized=True, admitted=True) for n in ("c0", "c1")]
    d = decide(view([member("c")], released=released, claims=claims, admitted=adm), now=T0, knobs=KNOBS)
    assert d == PlanAttempt(top_up=True)


def test_a_finished_gang_releases_its_nodes_to_consolidation() -> None:
    claims = [claim(n, initialized=True, admitted=True) for n in CLAIMS]
    assert decide(view([], claims=claims), now=T0, knobs=KNOBS) == MarkFinished(CLAIMS)
    done = [claim(n, initialized=True, admitted=False) for n in CLAIMS]
    assert isinstance(decide(view([], claims=done), now=T0, knobs=KNOBS), Wait), "left to consolidation"


# --- backoff and timing ---------------------------------------------------------------------------


def test_backoff_doubles_from_thirty_seconds_to_ten_minutes() -> None:
    waits = [backoff_seconds(n, base=30, maximum=600) for n in range(8)]
    assert waits == [30, 30, 60, 120, 240, 480, 600, 600]  # level 0 (only capacity refusals so far): the base


@given(n=st.integers(1, 10_000), base=st.floats(0.1, 100), maximum=st.floats(1, 10_000))
def test_backoff_grows_and_is_capped(n: int, base: float, maximum: float) -> None:
    now = backoff_seconds(n, base=base, maximum=maximum)
    assert 0 < now <= maximum
    assert backoff_seconds(n + 1, base=base, maximum=maximum) >= now


def test_a_gang_is_complete_when_its_last_needed_member_appears() -> None:
    pods = [member("a", created=T0), member("b", created=T0 + timedelta(seconds=5))]
    pods.append(member("c", created=T0 + timedelta(seconds=9)))
    assert completed_at([PodView.of(p) for p in pods], 3) == T0 + timedelta(seconds=9)
    assert completed_at([PodView.of(p) for p in pods], 2) == T0 + timedelta(seconds=5)


def test_a_node_with_the_gangs_label_but_no_nodeclaim_never_hosts_a_member() -> None:
    fresh = [member(n) for n in "abc"]
    assert decide(view(fresh, strays=[node("stray")]), now=T0, knobs=KNOBS) == DeleteNodes(("stray",))
    going = node("stray", deleting=True)
    assert isinstance(decide(view(fresh, strays=[going]), now=T0, knobs=KNOBS), Wait), "it could still attract pods"
    tainted = node("stray", deleting=True, taints=[{"key": "joiner.sh/disrupted", "effect": "NoSchedule"}])
    assert decide(view(fresh, strays=[tainted]), now=T0, knobs=KNOBS) == PlanAttempt(top_up=False)
    rec = provisioning(*CLAIMS)
    ready = [claim(n, initialized=True) for n in CLAIMS]
    gang = view(pinned("a", "b", "c"), pending=rec, claims=ready, strays=[going])
    assert isinstance(decide(gang, now=T0, knobs=KNOBS), Wait), "no admission while a stray Node could take a member"


# --- an attempt's failure, read from its NodeClaims alone (members need not be pods) ----------------


def test_how_an_attempt_failed_is_read_from_its_nodeclaims_alone() -> None:
    from controller.gang.decide import failed_attempt
    from controller.state.views import NodeClaimView

    def claims(*objs: dict[str, object]) -> dict[str, NodeClaimView]:
        views = [NodeClaimView.of(o) for o in objs]
        return {c.name: c for c in views}

    pend = provisioning("c0", "c1", "c2")
    up = claims(claim("c0"), claim("c1"), claim("c2"))
    assert failed_attempt(pend, up, gone={}, seen=frozenset(CLAIMS), now=T0, knobs=KNOBS) is None
    refused = claims(claim("c2", reason="InsufficientCapacity"))
    replan = failed_attempt(
        pend, claims(claim("c0"), claim("c1")), gone=refused, seen=frozenset(CLAIMS), now=T0, knobs=KNOBS
    )
    assert isinstance(replan, Replan)
    assert replan.kept == ("c0", "c1")
    assert replan.rollback.capacity_only
    deleted = failed_attempt(
        pend, claims(claim("c0"), claim("c1")), gone={}, seen=frozenset(CLAIMS), now=T0, knobs=KNOBS
    )
    assert isinstance(deleted, Rollback)
    assert (deleted.reason, deleted.failed, deleted.backoff) == ("NodeClaimDeleted", ("c2",), True)
    never = failed_attempt(pend, claims(claim("c0"), claim("c1")), gone={}, seen=frozenset(), now=T0, knobs=KNOBS)
    assert isinstance(never, Rollback)
    assert (never.reason, never.failed, never.backoff) == ("Interrupted", ("c2",), False)
    late = failed_attempt(
        pend,
        claims(claim("c0", initialized=True), claim("c1"), claim("c2")),
        gone={},
        seen=frozenset(CLAIMS),
        missing=2,
        now=T0 + timedelta(minutes=15),
        knobs=KNOBS,
    )
    assert isinstance(late, Rollback)
    assert (late.reason, late.failed) == ("DeadlineExceeded", ("c1", "c2"))
    assert late.message.startswith("attempt 1 did not finish within 15m: 2 of 3 NodeClaims not Initialized")
    assert late.message.endswith("; 2 member pod(s) missing")
