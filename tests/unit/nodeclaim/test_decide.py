"""The lifecycle's next step, decided from a NodeClaim, its Node and the time alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.v1.labels import FINALIZER_TERMINATION, LABEL_NODEPOOL, TAINT_PLANNED, TAINT_UNREGISTERED
from controller.clock import format_time
from controller.nodeclaim.decide import (
    OPEN_AFTER_SECONDS,
    OPEN_MAX_SECONDS,
    OPEN_PROGRESS_SECONDS,
    OPEN_RECHECK_SECONDS,
    RESERVE_UNINITIALIZED_SECONDS,
    RESERVED_RECHECK_SECONDS,
    AddFinalizer,
    Initialize,
    Launch,
    NextStep,
    NominationProgress,
    NotInitialized,
    Register,
    SyncNode,
    TimedOut,
    Wait,
)
from controller.nodeclaim.decide import decide as decide_on_views
from controller.nodeclaim.nodes import initialization_blockers as blockers_on_views
from controller.settings import Settings
from controller.state import patches as c
from controller.state.views import NodeClaimView, NodeView

Obj = dict[str, Any]


def decide(
    *,
    claim: Obj,
    node: Obj | None,
    now: datetime,
    settings: Settings,
    unnominated: int = 0,
    since_progress: float | None = None,
    reserved: int | None = None,
) -> NextStep:
    """The cache hands the lifecycle views: make them from the test's dicts."""
    return decide_on_views(
        claim=NodeClaimView.of(claim),
        node=NodeView.of(node) if node is not None else None,
        now=now,
        settings=settings,
        unnominated=unnominated,
        since_progress=since_progress,
        reserved=reserved,
    )


def initialization_blockers(claim: Obj, node: Obj) -> list[tuple[str, str]]:
    return blockers_on_views(NodeClaimView.of(claim), NodeView.of(node))


T0 = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = Settings()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def cond(ctype: str, status: str, when: float, reason: str = "R", message: str = "") -> Obj:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": format_time(at(when)),
    }


def a_claim(*conditions: Obj, finalizer: bool = True, requests: dict[str, str] | None = None, **status: Any) -> Obj:
    return {
        "metadata": {
            "name": "nc",
            "uid": "u-nc",
            "creationTimestamp": format_time(T0),
            "labels": {LABEL_NODEPOOL: "gpu"},
            "finalizers": [FINALIZER_TERMINATION] if finalizer else [],
            "resourceVersion": "1",
        },
        "spec": {
            "resources": {"requests": requests or {"cpu": "1", "nvidia.com/gpu": "1"}},
            "startupTaints": [{"key": "agent", "effect": "NoSchedule"}],
        },
        "status": {"conditions": list(conditions), **status},
    }


def launched(when: float = 10) -> Obj:
    return a_claim(cond("Launched", "True", when), providerID="kwok://nc")


def registered(when: float = 20) -> Obj:
    return a_claim(
        cond("Launched", "True", 10), cond("Registered", "True", when), providerID="kwok://nc", nodeName="nc"
    )


def a_node(*, ready: bool = True, taints: list[Obj] | None = None, gpus: str | None = "1", synced: bool = True) -> Obj:
    allocatable = {"cpu": "8"}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = gpus
    meta: Obj = {"name": "nc", "labels": {"kubernetes.io/hostname": "nc"}, "resourceVersion": "5"}
    if synced:
        meta["labels"][LABEL_NODEPOOL] = "gpu"
        meta["finalizers"] = [FINALIZER_TERMINATION]
        meta["ownerReferences"] = [{"uid": "u-nc", "kind": "NodeClaim", "name": "nc"}]
    return {
        "metadata": meta,
        "spec": {"providerID": "kwok://nc", "taints": taints or []},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_the_finalizer_comes_first() -> None:
    assert isinstance(decide(claim=a_claim(finalizer=False), node=None, now=at(0), settings=SETTINGS), AddFinalizer)


def test_a_claim_being_deleted_is_left_to_termination() -> None:
    claim = launched()
    claim["metadata"]["deletionTimestamp"] = format_time(at(30))
    decision = decide(claim=claim, node=None, now=at(31), settings=SETTINGS)
    assert isinstance(decision, Wait)
    assert decision.seconds is None


def test_launch_until_the_launch_timeout() -> None:
    decision = decide(claim=a_claim(), node=None, now=at(60), settings=SETTINGS)
    assert decision == Launch(remaining=240)
    failing = a_claim(cond("Launched", "False", 1, "NodeClassNotReady", "KWOKNodeClass 'x' does not exist"))
    decision = decide(claim=failing, node=None, now=at(300), settings=SETTINGS)
    assert isinstance(decision, TimedOut)
    assert decision.step == "Launch"
    assert decision.reason == "LaunchTimedOut"
    assert "5m" in decision.message
    assert "KWOKNodeClass 'x' does not exist" in decision.message


def test_wait_for_registration_until_its_deadline_then_time_out() -> None:
    decision = decide(claim=launched(10), node=None, now=at(110), settings=SETTINGS)
    assert decision == Wait(800, "waiting for the Node to register")
    decision = decide(claim=launched(10), node=None, now=at(910), settings=SETTINGS)
    assert isinstance(decision, TimedOut)
    assert decision.step == "Registration"
    assert "kwok://nc" in decision.message
    assert "15m" in decision.message


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])  # NoExecute: Nodes of earlier builds
def test_a_joined_node_is_synced_then_registered(effect: str) -> None:
    keep = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    node = a_node(synced=False, taints=[keep, {"key": TAINT_UNREGISTERED, "effect": effect}])
    decision = decide(claim=launched(), node=node, now=at(30), settings=SETTINGS)
    assert isinstance(decision, SyncNode)
    ops = {(op["op"], op["path"]) for op in decision.patch}
    assert ("add", "/metadata/labels/joiner.sh~1nodepool") in ops
    assert ("replace", "/spec/taints") in ops
    assert ("add", "/metadata/finalizers") in ops
    assert ("add", "/metadata/ownerReferences") in ops
    taints = next(op["value"] for op in decision.patch if op["path"] == "/spec/taints" and op["op"] == "replace")
    # the NodeClaim's startup taint was not on the Node the kubelet registered: it is put there
    assert taints == [keep, {"key": "agent", "effect": "NoSchedule"}]
    synced = a_node(taints=[keep, {"key": "agent", "effect": "NoSchedule"}])
    assert decide(claim=launched(), node=synced, now=at(30), settings=SETTINGS) == Register("nc")


def test_the_claims_taints_reach_a_node_registered_without_them_but_never_come_back_after() -> None:
    claim = launched()
    claim["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    decision = decide(claim=claim, node=a_node(), now=at(30), settings=SETTINGS)
    assert isinstance(decision, SyncNode)
    taints = [op["value"] for op in decision.patch if op["path"] == "/spec/taints"][-1]
    assert taints == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "agent", "effect": "NoSchedule"},
    ]
    # once registered, the startup taint's agent removed it (and someone the GPU taint): left alone
    done = registered(20)
    done["spec"]["taints"] = claim["spec"]["taints"]
    assert not isinstance(decide(claim=done, node=a_node(), now=at(30), settings=SETTINGS), SyncNode)


def test_a_node_being_deleted_does_not_register() -> None:
    node = a_node()
    node["metadata"]["deletionTimestamp"] = format_time(at(25))
    decision = decide(claim=launched(), node=node, now=at(30), settings=SETTINGS)
    assert isinstance(decision, Wait)


def test_initialization_waits_for_ready_startup_taints_and_gpus() -> None:
    claim = registered(20)
    blockers = initialization_blockers(
        claim, a_node(ready=False, taints=[{"key": "agent", "effect": "NoSchedule"}], gpus=None)
    )
    assert [reason for reason, _ in blockers] == ["NodeNotReady", "StartupTaintsPresent", "ResourceNotRegistered"]
    assert "nvidia.com/gpu (requested 1)" in blockers[2][1]
    assert decide(claim=claim, node=a_node(), now=at(30), settings=SETTINGS) == Initialize("nc")


def test_not_initialized_is_recorded_once_then_waits_until_the_deadline() -> None:
    claim = registered(20)
    node = a_node(gpus="0")
    decision = decide(claim=claim, node=node, now=at(30), settings=SETTINGS)
    assert isinstance(decision, NotInitialized)
    assert decision.reason == "ResourceNotRegistered"
    recorded = a_claim(
        *c.with_conditions(
            claim,
            [
                c.ConditionUpdate("Initialized", "False", decision.reason, decision.message),
                c.ConditionUpdate("Ready", "False", decision.reason, decision.message),
            ],
            now=at(30),
        ),
        providerID="kwok://nc",
        nodeName="nc",
    )
    assert decide(claim=recorded, node=node, now=at(120), settings=SETTINGS) == Wait(
        800, "waiting for the Node to initialize"
    )
    timed_out = decide(claim=recorded, node=node, now=at(920), settings=SETTINGS)
    assert isinstance(timed_out, TimedOut)
    assert timed_out.step == "Initialization"
    assert "nvidia.com/gpu" in timed_out.message


def test_an_initialized_claim_rests() -> None:
    claim = initialized_at_30()
    assert decide(claim=claim, node=a_node(), now=at(5000), settings=SETTINGS) == Wait(None, "initialized")


def initialized_at_30() -> Obj:
    """Launched at 10 s, registered at 20 s, Initialized and Ready at 30 s."""
    return a_claim(
        cond("Launched", "True", 10),
        cond("Registered", "True", 20),
        cond("Initialized", "True", 30),
        cond("Ready", "True", 30),
        providerID="kwok://nc",
        nodeName="nc",
    )


def test_a_node_opens_once_its_planned_pods_are_nominated_to_it_or_at_the_latest_after_a_few_seconds() -> None:
    closed = [{"key": TAINT_UNREGISTERED, "effect": "NoSchedule"}]

    def taint_ops(step: NextStep) -> list[Obj]:
        assert isinstance(step, SyncNode)
        return [op for op in step.patch if op["path"] == "/spec/taints"]

    # joined: registered with the taint kept while 5 planned pods are not nominated to it
    agent = {"key": "agent", "effect": "NoSchedule"}  # the claim's startup taint
    joined = decide(
        claim=launched(), node=a_node(taints=[*closed, agent]), now=at(30), settings=SETTINGS, unnominated=5
    )
    assert joined == Register("nc")
    claim = registered(20)
    assert decide(claim=claim, node=a_node(taints=closed), now=at(30), settings=SETTINGS, unnominated=5) == (
        Initialize("nc")
    )
    initialized = initialized_at_30()
    node = a_node(taints=closed)
    waiting = decide(claim=initialized, node=node, now=at(31), settings=SETTINGS, unnominated=5)
    assert waiting == Wait(OPEN_RECHECK_SECONDS, "initialized; 5 planned pods not nominated to it yet")
    # all nominated: the taint goes
    opened = decide(claim=initialized, node=node, now=at(31), settings=SETTINGS, unnominated=0)
    assert isinstance(opened, SyncNode)
    assert taint_ops(opened)[-1]["value"] == []
    # some never are (kube-scheduler cleared them): it opens anyway OPEN_AFTER_SECONDS after Initialized
    late = decide(claim=initialized, node=node, now=at(30 + OPEN_AFTER_SECONDS), settings=SETTINGS, unnominated=2)
    assert isinstance(late, SyncNode)
    assert taint_ops(late)[-1]["value"] == []


def test_a_node_stays_closed_past_the_first_seconds_while_the_nominations_still_come() -> None:
    """A burst of thousands needs as many nominations at the apiserver's pace: opened at
    OPEN_AFTER_SECONDS, the pods not nominated yet take planned room and are solved again."""
    closed = [{"key": TAINT_UNREGISTERED, "effect": "NoSchedule"}]
    initialized = initialized_at_30()
    node = a_node(taints=closed)
    later = 20 + OPEN_AFTER_SECONDS + 5

    def step(at_s: float, since_progress: float | None) -> NextStep:
        return decide(
            claim=initialized,
            node=node,
            now=at(at_s),
            settings=SETTINGS,
            unnominated=800,
            since_progress=since_progress,
        )

    assert isinstance(step(later, 0.5), Wait), "nominations came half a second ago: stay closed"
    assert isinstance(step(later, OPEN_PROGRESS_SECONDS + 0.1), SyncNode), "none for a while: open"
    assert isinstance(step(later, None), SyncNode), "no progress known: open after OPEN_AFTER_SECONDS"
    assert isinstance(step(20 + OPEN_MAX_SECONDS, 0.1), SyncNode), "never longer than OPEN_MAX_SECONDS"


def test_a_node_planned_for_pending_pods_opens_reserved_to_them_and_the_reservation_ends_once_they_are_bound() -> None:
    """With reservations on, the write that takes the unregistered taint off puts the
    `joiner.sh/planned=<NodeClaim>` taint on (one patch: no moment open to every pod); it stays while
    planned pods are pending, and goes once none is."""
    closed = [{"key": TAINT_UNREGISTERED, "effect": "NoSchedule"}]
    planned = {"key": TAINT_PLANNED, "value": "nc", "effect": "NoSchedule"}

    def taints_after(step: NextStep) -> list[Obj]:
        assert isinstance(step, SyncNode)
        ops = [op for op in step.patch if op["path"] == "/spec/taints"]
        return list(ops[-1]["value"])  # (after the test of the list as it was)

    # joined with pods planned there: opens at once, reserved, whatever the nominations
    joined = decide(
        claim=launched(), node=a_node(taints=closed, synced=False), now=at(30), settings=SETTINGS, reserved=5
    )
    assert taints_after(joined) == [{"key": "agent", "effect": "NoSchedule"}, planned]
    # no pod planned there any more: opens to everyone
    plain = decide(
        claim=launched(), node=a_node(taints=closed, synced=False), now=at(30), settings=SETTINGS, reserved=0
    )
    assert taints_after(plain) == [{"key": "agent", "effect": "NoSchedule"}]
    # reserved while 3 planned pods are pending: waits, looking again now and then (pods bind by their own events)
    initialized = initialized_at_30()
    waiting = decide(claim=initialized, node=a_node(taints=[planned]), now=at(40), settings=SETTINGS, reserved=3)
    assert waiting == Wait(RESERVED_RECHECK_SECONDS, "initialized; reserved to 3 planned pods not bound yet")
    # all bound: the reservation ends, the Node's other taints stay
    other = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    ended = decide(claim=initialized, node=a_node(taints=[other, planned]), now=at(41), settings=SETTINGS, reserved=0)
    assert taints_after(ended) == [other]
    # reservations switched off meanwhile (the cluster refused the pods' tolerations): a leftover goes
    off = decide(claim=initialized, node=a_node(taints=[planned]), now=at(41), settings=SETTINGS, reserved=None)
    assert taints_after(off) == []
    # a Node that opened without a reservation never gets one later
    assert decide(claim=initialized, node=a_node(), now=at(41), settings=SETTINGS, reserved=4) == Wait(
        None, "initialized"
    )


def test_a_reserved_node_that_does_not_initialize_loses_its_reservation() -> None:
    """The GPUs never register while the Node is reserved (a device plugin's DaemonSet that does not
    tolerate the reservation is not even created there), and the planned GPU pods cannot bind
    before they do: RESERVE_UNINITIALIZED_SECONDS after registration the reservation ends."""
    planned = {"key": TAINT_PLANNED, "value": "nc", "effect": "NoSchedule"}
    claim = registered(20)
    node = a_node(taints=[planned], gpus=None)
    early = decide(
        claim=claim, node=node, now=at(20 + RESERVE_UNINITIALIZED_SECONDS - 1), settings=SETTINGS, reserved=2
    )
    assert not isinstance(early, SyncNode)
    late = decide(claim=claim, node=node, now=at(20 + RESERVE_UNINITIALIZED_SECONDS), settings=SETTINGS, reserved=2)
    assert isinstance(late, SyncNode)
    assert [op for op in late.patch if op["path"] == "/spec/taints"][-1]["value"] == []


def test_nomination_progress_counts_new_lows_and_starts_over_with_a_new_plan() -> None:
    p = NominationProgress()
    assert p.seconds_since(plan=1, count=900, now=100.0) == 0.0
    assert p.seconds_since(plan=1, count=700, now=101.0) == 0.0  # a new low
    assert p.seconds_since(plan=1, count=705, now=102.0) == 1.0  # cleared and not written back yet
    assert p.seconds_since(plan=1, count=700, now=103.0) == 2.0  # written back: not a new low
    assert p.seconds_since(plan=1, count=12, now=104.0) == 0.0
    assert p.seconds_since(plan=2, count=1500, now=110.0) == 0.0  # pods newly planned: start over
    assert p.seconds_since(plan=2, count=1500, now=114.0) == 4.0


def test_condition_transition_time_moves_only_when_the_status_changes() -> None:
    claim = a_claim(cond("Ready", "False", 10, "A"))
    same = c.with_conditions(claim, [c.ConditionUpdate("Ready", "False", "B", "other")], now=at(50))
    assert same[0]["lastTransitionTime"] == format_time(at(10))
    assert same[0]["reason"] == "B"
    flipped = c.with_conditions(claim, [c.ConditionUpdate("Ready", "True", "C")], now=at(60))
    assert flipped[0]["lastTransitionTime"] == format_time(at(60))


@given(elapsed=st.floats(min_value=0, max_value=5000, allow_nan=False))
def test_registration_times_out_exactly_at_its_limit(elapsed: float) -> None:
    decision = decide(claim=launched(0), node=None, now=at(elapsed), settings=SETTINGS)
    if elapsed >= SETTINGS.registration_timeout_seconds:
        assert isinstance(decision, TimedOut)
    else:
        assert isinstance(decision, Wait)
        assert decision.seconds is not None
        assert 0 < decision.seconds <= SETTINGS.registration_timeout_seconds


@given(
    ready=st.booleans(),
    startup_taint=st.booleans(),
    gpus=st.sampled_from([None, "0", "1", "2"]),
    elapsed=st.integers(min_value=0, max_value=2000),
)
def test_initialize_iff_no_blockers(ready: bool, startup_taint: bool, gpus: str | None, elapsed: int) -> None:
    taints = [{"key": "agent", "effect": "NoSchedule"}] if startup_taint else []
    node = a_node(ready=ready, taints=taints, gpus=gpus)
    decision = decide(claim=registered(0), node=node, now=at(elapsed), settings=SETTINGS)
    ok = ready and not startup_taint and gpus in ("1", "2")
    if ok:
        assert decision == Initialize("nc")
    elif elapsed >= SETTINGS.initialization_timeout_seconds:
        assert isinstance(decision, TimedOut)
    else:
        assert isinstance(decision, NotInitialized | Wait)
