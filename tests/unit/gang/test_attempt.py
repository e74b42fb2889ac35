"""What each step of a gang writes, from its view and the capacity read: inputs in, a typed step out,
on the fake clock and without an apiserver."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from controller.clock import FakeClock
from controller.gang.attempt import (
    CannotRebuy,
    GangInputs,
    Provision,
    Rebuy,
    ReplaceMember,
    RestartGang,
    Solved,
    lose_member,
    members_missing,
    next_seq,
    plan_attempt,
    provision,
    rebuy,
    refused_avoid,
    release,
    replan_zone,
    roll_back,
    running_zone,
)
from controller.gang.decide import Knobs, MemberLost, Replan, Rollback, WaitForMembers
from controller.gang.planner import NoFit
from controller.gang.record import (
    ADMITTED,
    BROKEN_OFFERING_AVOID_SECONDS,
    PROVISIONING,
    ROLLED_BACK,
    Avoided,
    Record,
)
from controller.scheduling import kubeconv_nodes
from controller.scheduling.bounds import PoolBounds
from controller.scheduling.kubeconv_volumes import BIND_COMPLETED, Volumes, with_volumes
from controller.scheduling.model import ExistingNode
from controller.scheduling.resources import Resources
from controller.state.existing import existing_node
from controller.state.views import NodeClaimView, StateNode
from tests.unit.gang.builders import (
    CATALOG,
    GID,
    T0,
    admitted,
    claim,
    gpu_member,
    member,
    pool,
    provisioning,
    view,
)

Obj = dict[str, Any]
KNOBS = Knobs(member_wait_seconds=60, backoff_base_seconds=30, backoff_max_seconds=600)
ZONE_B_OD = "gpu-8/zone-b/on-demand"
ZONE_A_OD = "gpu-8/zone-a/on-demand"


def capacity(*, existing: tuple[ExistingNode, ...] = (), **kw: Any) -> GangInputs:
    p = pool()
    return GangInputs(
        pools={"gpu": p},
        templates=(kubeconv_nodes.nodepool_from_dict(p, CATALOG, usage=Resources()),),
        existing=existing,
        **kw,
    )


def members(n: int = 3, **kw: Any) -> list[Obj]:
    return [gpu_member(f"w{i}", **kw) for i in range(n)]


def rolled_back(*, attempt: int = 1, level: int = 1, avoid: tuple[Avoided, ...] = ()) -> Record:
    return Record(
        seq=4,
        attempt=attempt,
        id="a1",
        phase=ROLLED_BACK,
        nodeclaims=("c0", "c1", "c2"),
        started=T0,
        rollbacks=1,
        retry_at=T0,
        last_failure="attempt 1: registration timed out",
        avoid=avoid,
        level=level,
    )


def zoned_claim(name: str, zone: str = "zone-a", **kw: Any) -> Obj:
    """A gang NodeClaim as the gang writes it for a same-zone gang: its zone is a requirement."""
    c = claim(name, zone=zone, **kw)
    c["spec"]["requirements"] = [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]
    c["spec"]["taints"] = [{"key": "joiner.sh/gang", "value": GID, "effect": "NoSchedule"}]
    return c


def in_flight(c: Obj) -> ExistingNode:
    node = existing_node(StateNode(claim=NodeClaimView.of(c)), instance_types=CATALOG)
    assert node is not None
    return node


# --- starting an attempt --------------------------------------------------------------------------


def start(v: Any, cap: GangInputs, *, top_up: bool = False, now: Any = T0) -> Provision | NoFit:
    """Solve, then start the attempt at the same instant (as the controller does, the solve taking no time)."""
    solved = plan_attempt(v, cap, top_up=top_up, now=now, knobs=KNOBS)
    return solved if isinstance(solved, NoFit) else provision(v, solved, cap, now=now, knobs=KNOBS)


def test_an_attempt_buys_the_whole_plan_and_records_it_for_every_member() -> None:
    step = start(view(members()), capacity())
    assert isinstance(step, Provision)
    names = [m["metadata"]["name"] for _, m in step.claims]
    assert len(names) == 3
    assert all(n.startswith(f"gpu-g{step.record.id}-") for n in names)
    assert all(m["metadata"]["labels"]["joiner.sh/gang"] == GID for _, m in step.claims)
    r = step.record
    assert (r.seq, r.attempt, r.phase, r.members) == (1, 1, PROVISIONING, 3)
    assert r.nodeclaims == tuple(names)
    assert r.deadline == T0 + timedelta(seconds=KNOBS.gang_timeout_seconds)
    assert step.mark == ()
    assert step.text() == (
        "attempt 1: buying 3x gpu-8 (on-demand, zone-b) for the 3 members of gang ml/train; the pods stay "
        "gated until every node is Initialized (deadline 15m)"
    )


def test_members_on_a_zonal_volume_get_the_gang_in_its_zone_and_wait_while_their_claim_is_unbound() -> None:
    """Workers that read one dataset volume, bound and pinned to zone-a: the gang is bought there
    (it would go to zone-b alone). While the claim binds at once but is not bound, kube-scheduler
    would place the members nowhere: the gang waits (not "never fits"), buying nothing."""
    pods = members()
    for pod in pods:
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "dataset"}}]
    in_a = [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]
    bound = Volumes(
        {"ml/dataset": {"metadata": {"annotations": {BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "pv-1"}}},
        {
            "pv-1": {
                "metadata": {"name": "pv-1"},
                "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": in_a}]}}},
            }
        },
        {},
    )
    step = start(view(pods), capacity(volumes=lambda pod, raw: with_volumes(pod, raw, bound)))
    assert isinstance(step, Provision)
    assert "(on-demand, zone-a)" in step.text()
    unbound = Volumes(
        {"ml/dataset": {"metadata": {}, "spec": {"storageClassName": "gp2"}}},
        {},
        {"gp2": {"metadata": {"name": "gp2"}}},
    )
    result = start(view(pods), capacity(volumes=lambda pod, raw: with_volumes(pod, raw, unbound)))
    assert isinstance(result, NoFit)
    assert not result.permanent
    assert result.reason.startswith("gang ml/train waits for its members' volumes: pod w0: PersistentVolumeClaim")


async def test_the_attempt_starts_and_its_deadline_runs_from_when_the_solve_is_done() -> None:
    clock = FakeClock(T0)
    v = view(members())
    solved = plan_attempt(v, capacity(), top_up=False, now=clock.now(), knobs=KNOBS)
    assert isinstance(solved, Solved)
    assert solved.timeout_seconds is None
    await clock.advance(2)  # the solve of a large gang takes a while
    step = provision(v, solved, capacity(), now=clock.now(), knobs=KNOBS)
    assert step.record.started == T0 + timedelta(seconds=2)
    assert step.record.deadline == T0 + timedelta(seconds=2 + KNOBS.gang_timeout_seconds)
    assert step.result is solved.result


def test_the_pods_timeout_annotation_sets_the_deadline() -> None:
    pods = members()
    for pod in pods:
        pod["metadata"]["annotations"]["joiner.sh/gang-timeout"] = "20m"
    step = start(view(pods), capacity(), top_up=False, now=T0)
    assert isinstance(step, Provision)
    assert step.timeout_seconds == 1200.0
    assert step.record.deadline == T0 + timedelta(minutes=20)


async def test_the_retry_avoids_what_the_last_attempt_failed_on_and_so_does_the_launch() -> None:
    clock = FakeClock(T0)
    failed = Avoided(ZONE_B_OD, T0 + timedelta(seconds=60), attempt=1)
    pending = rolled_back(avoid=(failed,))
    await clock.advance(30)
    step = start(view(members(), pending=pending), capacity(), top_up=False, now=clock.now())
    assert isinstance(step, Provision)
    assert {n.choice.zone for n, _ in step.claims} == {"zone-a"}, "the cheaper zone failed"
    assert step.mark == (failed,), "the NodeClaims list zone-b too: the launch must skip it"
    r = step.record
    assert (r.attempt, r.rollbacks, r.level, r.seq) == (2, 1, 1, 5)
    assert r.avoid == (failed,)
    assert r.last_failure == pending.last_failure
    # the attempt after that one no longer avoids it once its TTL is over
    await clock.advance(600)
    later = start(
        view(members(), pending=rolled_back(attempt=2, avoid=(failed,))),
        capacity(),
        top_up=False,
        now=clock.now(),
    )
    assert isinstance(later, Provision)
    assert {n.choice.zone for n, _ in later.claims} == {"zone-b"}
    assert later.mark == ()
    assert later.record.avoid == ()


async def test_what_the_last_attempt_failed_on_is_avoided_however_long_the_backoff_took() -> None:
    clock = FakeClock(T0)
    failed = Avoided(ZONE_B_OD, T0 + timedelta(seconds=60), attempt=1)
    await clock.advance(900)
    step = start(view(members(), pending=rolled_back(avoid=(failed,))), capacity(), top_up=False, now=clock.now())
    assert isinstance(step, Provision)
    assert {n.choice.zone for n, _ in step.claims} == {"zone-a"}
    renewed = Avoided(ZONE_B_OD, clock.now() + timedelta(seconds=KNOBS.unavailable_ttl_seconds), attempt=1)
    assert step.mark == (renewed,), "a new TTL from the retry, so the launch skips it too"
    assert step.record.avoid == (renewed,)


def test_an_unreadable_member_makes_the_gang_unschedulable() -> None:
    bad = gpu_member("w2")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    step = start(view([*members(2), bad]), capacity())
    assert isinstance(step, NoFit)
    assert step.permanent
    assert step.reason.startswith("gang ml/train: ")
    assert "w2" in step.reason


def test_the_nodepools_node_limit_refuses_the_whole_attempt_for_now() -> None:
    bounds = {"gpu": PoolBounds(max_nodes=4, nodes=2)}
    step = start(view(members()), capacity(bounds=bounds), top_up=False, now=T0)
    assert isinstance(step, NoFit)
    assert not step.permanent
    assert step.reason.startswith("gang ml/train: ")


def test_a_top_up_goes_to_the_running_gangs_zone() -> None:
    running = admitted("c0", "c1")
    released = [member(n, gated=False, record=running) for n in ("w0", "w1")]
    v = view(
        [gpu_member("w2")],
        released=released,
        claims=[claim("c0", zone="zone-a", admitted=True), claim("c1", zone="zone-a", admitted=True)],
        admitted=running,
    )
    assert running_zone(v) == "zone-a"
    step = start(v, capacity(), top_up=True, now=T0)
    assert isinstance(step, Provision)
    assert [n.choice.zone for n, _ in step.claims] == ["zone-a"], "not the cheaper zone-b: beside the gang"
    assert (step.record.attempt, step.record.members) == (2, 1)


def test_a_top_up_uses_room_left_on_the_running_gangs_nodes() -> None:
    running = admitted("c0")
    released = [member("w0", gated=False, record=running)]
    c0 = zoned_claim("c0", admitted=True)
    v = view([gpu_member("w1", gpus=4)], released=released, claims=[c0], admitted=running)
    other = replace(in_flight(zoned_claim("x9")), name="x9")
    cap = capacity(existing=(in_flight(c0), other), claim_of_node={"c0": "c0", "x9": "x9"})
    step = start(v, cap, top_up=True, now=T0)
    assert isinstance(step, Provision)
    assert step.claims == ()
    assert step.reused == ("c0",), "only the gang's own running node may host its member"
    assert step.record.nodeclaims == ("c0",)


# --- rolling back -------------------------------------------------------------------------------


def timeout(*failed: str, avoid: tuple[str, ...] = (ZONE_B_OD,)) -> Rollback:
    return Rollback(
        reason="RegistrationTimedOut", message="attempt 1: it broke", failed=failed, avoid=avoid, backoff=True
    )


def test_a_failure_that_cost_machine_time_raises_the_backoff_and_avoids_the_offering_for_hours() -> None:
    pending = provisioning("c0", "c1", "c2")
    v = view(
        members(),
        pending=pending,
        claims=[claim("c0"), claim("c1"), claim("c2"), claim("x9"), claim("y0", attempt="b2")],
    )
    step = roll_back(v, timeout("c1"), now=T0, knobs=KNOBS)
    r = step.record
    assert (r.phase, r.attempt, r.rollbacks, r.level, r.seq) == (ROLLED_BACK, 1, 1, 1, 3)
    assert step.delay == 30.0
    assert r.retry_at == T0 + timedelta(seconds=30)
    assert r.avoid == (Avoided(ZONE_B_OD, T0 + timedelta(seconds=BROKEN_OFFERING_AVOID_SECONDS), attempt=1),)
    assert step.mark == r.avoid
    assert step.doomed == ("c0", "c1", "c2", "x9"), "every NodeClaim of the attempt, none of another"
    assert step.message == "gang ml/train: attempt 1: it broke"
    assert step.text(4) == (
        "attempt 1: it broke. Deleted 4 NodeClaim(s) of the attempt; no member was started, all stay gated; "
        f"retrying in 30s avoiding {ZONE_B_OD}"
    )


def test_the_backoff_doubles_with_each_such_failure_up_to_its_maximum() -> None:
    delays = []
    for level in (1, 2, 3, 4, 5, 6):
        pending = replace(provisioning("c0"), level=level)
        delays.append(roll_back(view(members(), pending=pending), timeout("c0"), now=T0, knobs=KNOBS).delay)
    assert delays == [60.0, 120.0, 240.0, 480.0, 600.0, 600.0]


def test_a_refusal_of_capacity_is_retried_at_once_and_avoided_only_for_the_ttl() -> None:
    refused = replace(timeout("c1"), reason="InsufficientCapacity", capacity_only=True)
    step = roll_back(view(members(), pending=provisioning("c0", "c1", "c2")), refused, now=T0, knobs=KNOBS)
    assert step.delay == 0.0
    assert (step.record.level, step.record.rollbacks) == (0, 1)
    assert step.record.avoid == (Avoided(ZONE_B_OD, T0 + timedelta(seconds=180), attempt=1),)
    assert step.text(3).endswith(f"retrying now avoiding {ZONE_B_OD}")


def test_an_interrupted_attempt_is_retried_at_once_without_counting() -> None:
    interrupted = Rollback(reason="Interrupted", message="never created", failed=("c2",), avoid=(), backoff=False)
    step = roll_back(view(members(), pending=provisioning("c0", "c1", "c2")), interrupted, now=T0, knobs=KNOBS)
    assert (step.delay, step.record.rollbacks, step.record.level) == (0.0, 0, 0)
    assert step.mark == ()


def test_the_nodes_a_running_gang_uses_survive_the_rollback_of_its_top_up() -> None:
    running = admitted("c0")
    v = view(
        [gpu_member("w1")],
        released=[member("w0", gated=False, record=running)],
        claims=[claim("c0", admitted=True), claim("c5", attempt="a2")],
        admitted=running,
        pending=provisioning("c0", "c5", id="a2", seq=4),
    )
    step = roll_back(v, timeout("c5"), now=T0, knobs=KNOBS)
    assert step.doomed == ("c5",)
    assert step.record.seq == 5


def test_a_record_written_but_not_cached_yet_counts_for_the_next_seq() -> None:
    v = view(members(), pending=provisioning("c0"), written_seq=7)
    assert next_seq(v) == 8
    assert roll_back(v, timeout("c0"), now=T0, knobs=KNOBS).record.seq == 8


# --- re-planning what the cloud refused ------------------------------------------------------------


def refused(*failed: str, offering: str = "gpu-8x/zone-a/spot") -> Replan:
    rollback = Rollback(
        reason="InsufficientCapacity",
        message=f"attempt 1: 1 of 3 NodeClaims failed: nodeclaim/{failed[0]} failed: InsufficientCapacity",
        failed=failed,
        avoid=(offering,),
        backoff=True,
        capacity_only=True,
    )
    return Replan(kept=("c0", "c1"), rollback=rollback)


def replan_view() -> tuple[Any, list[Obj]]:
    kept = [zoned_claim("c0"), zoned_claim("c1")]
    pinned = provisioning("c0", "c1", "c2")
    gated = [gpu_member(f"w{i}", record=pinned, pinned=True) for i in range(3)]
    return view(gated, pending=pinned, claims=kept), kept


def test_only_the_refused_machine_is_bought_again_beside_the_kept_ones_in_their_zone() -> None:
    v, kept = replan_view()
    d = refused("c2")
    assert replan_zone(v, d.kept) == "zone-a"
    avoid = refused_avoid(v, d, now=T0, knobs=KNOBS)
    assert avoid == (Avoided("gpu-8x/zone-a/spot", T0 + timedelta(seconds=180), attempt=1),)
    cap = capacity(existing=tuple(in_flight(c) for c in kept))
    step = rebuy(v, d, cap, avoid=avoid, now=T0 + timedelta(seconds=60))
    assert isinstance(step, Rebuy)
    assert [(n.choice.instance_type, n.choice.zone) for n, _ in step.claims] == [("gpu-8", "zone-a")]
    (name,) = [m["metadata"]["name"] for _, m in step.claims]
    assert name == "gpu-ga1r1-0"
    r = step.record
    assert (r.attempt, r.id, r.replans, r.seq) == (1, "a1", 1, 3)
    assert r.nodeclaims == ("c0", "c1", name)
    assert r.avoid == avoid
    assert r.last_failure == d.rollback.message
    assert step.recheck == 840.0, "until the attempt's deadline, which is kept"
    assert "buying 1x gpu-8 (on-demand, zone-a) in their place and keeping the 2 that launched" in step.text()


def test_when_only_the_refused_offering_would_do_the_attempt_is_rolled_back_whole() -> None:
    v, kept = replan_view()
    d = refused("c2", offering=ZONE_A_OD)
    avoid = refused_avoid(v, d, now=T0, knobs=KNOBS)
    step = rebuy(v, d, capacity(existing=tuple(in_flight(c) for c in kept)), avoid=avoid, now=T0)
    assert isinstance(step, CannotRebuy)
    assert step.why == "only the offerings that refused would fit"
    assert step.rollback.message == (
        f"{d.rollback.message}; they cannot be bought again beside the 2 that launched in zone-a "
        "(only the offerings that refused would fit)"
    )
    assert step.rollback.capacity_only
    assert step.rollback.failed == ("c2",)


def test_kept_machines_that_cannot_be_read_roll_the_attempt_back() -> None:
    v, _ = replan_view()
    d = refused("c2")
    step = rebuy(v, d, capacity(), avoid=(), now=T0, unreadable="Node n1: bad quantity")
    assert isinstance(step, CannotRebuy)
    assert step.rollback.message.endswith("in zone-a (Node n1: bad quantity)")


# --- admission and after -----------------------------------------------------------------------


def test_admission_records_the_attempt_and_releases_its_members() -> None:
    pinned = provisioning("c0", "c1", "c2")
    gated = [gpu_member(f"w{i}", record=pinned, pinned=True, created=T0 + timedelta(seconds=i)) for i in range(3)]
    now = T0 + timedelta(minutes=4)
    step = release(view(gated, pending=pinned), ("w0", "w1", "w2"), now=now)
    r = step.record
    assert (r.phase, r.attempt, r.seq, r.admitted_at, r.nodeclaims) == (ADMITTED, 1, 3, now, ("c0", "c1", "c2"))
    assert [p.name for p in step.pods] == ["w0", "w1", "w2"]
    assert step.since_complete == 238.0, "from the third member's creation"
    assert step.since_started == 240.0
    assert step.text(3) == (
        "all 3 node(s) of gang ml/train are Initialized; removed the scheduling gate from 3 member(s) together "
        "(attempt 1, 4m after it started)"
    )


def test_a_top_up_admission_keeps_the_running_gangs_nodes_that_still_exist() -> None:
    running = admitted("c0", "gone")
    v = view(
        [gpu_member("w1", record=provisioning("c5", id="a2", seq=4), pinned=True)],
        released=[member("w0", gated=False, record=running)],
        claims=[claim("c0", admitted=True), claim("c5", attempt="a2")],
        admitted=running,
        pending=provisioning("c5", id="a2", seq=4),
    )
    step = release(v, ("w1",), now=T0)
    assert step.record.nodeclaims == ("c5", "c0")


def test_an_interrupted_admission_is_finished_with_the_record_already_written() -> None:
    pinned = provisioning("c0", "c1")
    done = admitted("c0", "c1", seq=3)
    v = view(
        [gpu_member("w1", record=pinned, pinned=True)],
        released=[member("w0", gated=False, record=done)],
        pending=pinned,
        admitted=done,
    )
    step = release(v, ("w1",), now=T0 + timedelta(minutes=1))
    assert step.record == done


def test_a_lost_member_restarts_the_gang_by_default() -> None:
    running = admitted("c0", "c1")
    v = view(
        [],
        released=[member(n, gated=False, record=running) for n in ("w0", "w1")],
        claims=[claim("c0", admitted=True)],
        admitted=running,
    )
    step = lose_member(v, MemberLost(("c1",), "restart-gang", "gang ml/train lost 1 node(s): c1: gone"))
    assert isinstance(step, RestartGang)
    assert [p.name for p in step.pods] == ["w0", "w1"]
    assert step.remaining == ("c0",)
    assert "deleting the 2 remaining member(s)" in step.text


def test_a_lost_member_is_replaced_alone_under_replace_member() -> None:
    running = admitted("c0", "c1")
    v = view([], released=[member("w0", gated=False, record=running)], admitted=running, policy="replace-member")
    step = lose_member(v, MemberLost(("c1",), "replace-member", "lost c1"))
    assert isinstance(step, ReplaceMember)
    assert step.record == replace(running, seq=4, nodeclaims=("c0",))


def test_an_incomplete_gang_is_told_how_many_members_are_missing() -> None:
    d = WaitForMembers(present=2, size=3, waited=61.0, warn=True, recheck=None)
    assert members_missing(view(members(2)), d, knobs=KNOBS) == (
        "gang ml/train has 2 of 3 members after more than 1m; waiting for 1 more before buying any node "
        "(create the missing pods, or fix joiner.sh/gang-size / the PodGroup's minMember)"
    )
