"""Properties every consolidation keeps, on random clusters: no pod is left without a place, no node
is over-committed, and $/hour never goes up."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.disruption.model import Command, NodeState, Snapshot
from controller.disruption.planner import plan
from controller.scheduling import Pod
from tests.unit.disruption.builders import NOW, TYPES, apply, node, pod, price_of, snapshot, used

CPU_TYPES = ("cpu-2", "cpu-4", "cpu-8", "cpu-16")


@st.composite
def clusters(draw: st.DrawFn) -> Snapshot:
    """Nodes of random CPU (and some GPU) types, filled first-fit with random pods."""
    count = draw(st.integers(1, 7))
    nodes: list[NodeState] = []
    serial = 0
    for i in range(count):
        gpu = draw(st.booleans()) and draw(st.booleans())
        it = draw(st.sampled_from(("gpu-1", "gpu-4"))) if gpu else draw(st.sampled_from(CPU_TYPES))
        pods: list[Pod] = []
        n = node(f"n{i}", it, pool="gpu" if gpu else "cpu")
        for _ in range(draw(st.integers(0, 6))):
            serial += 1
            wants_gpu = gpu and draw(st.booleans())
            candidate = pod(
                f"app{draw(st.integers(0, 3))}-{serial}",
                cpu=draw(st.sampled_from((0.25, 0.5, 1, 1.5, 3))),
                mem_gi=draw(st.sampled_from((0.5, 1, 4))),
                gpus=1 if wants_gpu else 0,
            )
            trial = replace(n.view, pods=(*n.view.pods, candidate))
            if used(trial).fits_in(TYPES[it].allocatable):
                pods.append(candidate)
                n = replace(n, view=trial, movable=tuple(pods))
        stable = draw(st.sampled_from((timedelta(seconds=5), timedelta(minutes=5))))
        nodes.append(replace(n, stable_since=NOW - stable))
    return snapshot(nodes)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=clusters())
def test_a_consolidation_leaves_no_pod_without_a_place_and_never_costs_more(snap: Snapshot) -> None:
    decision = plan(snap)
    for command in decision.commands:
        # every moved pod has a place and no node ends up over-committed (apply asserts both)
        _, after = apply(snap, command)
        if command.reason in ("Empty", "Underutilized"):
            assert after < price_of(snap) - 1e-9, command.describe()
            assert command.saving > 0
            assert abs((price_of(snap) - after) - command.saving) < 1e-6
        for claim in command.candidates:
            n = next(x for x in snap.nodes if x.claim == claim)
            assert not n.blockers
            assert snap.now - (n.stable_since or snap.now) >= timedelta(seconds=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=clusters())
def test_planning_is_deterministic(snap: Snapshot) -> None:
    assert plan(snap).commands == plan(snap).commands


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=clusters())
def test_applying_decisions_until_none_is_left_converges_and_keeps_every_pod(snap: Snapshot) -> None:
    pods_before = sorted(p.key for n in snap.nodes for p in n.movable)
    start_price = price_of(snap)
    for _ in range(20):
        decision = plan(snap)
        if not decision.commands:
            break
        [command] = decision.commands
        snap = _applied(snap, command)
    else:
        raise AssertionError("did not converge in 20 passes")
    assert sorted(p.key for n in snap.nodes for p in n.movable) == pods_before
    assert price_of(snap) <= start_price + 1e-9


def _applied(snap: Snapshot, command: Command) -> Snapshot:
    views, _ = apply(snap, command)
    by_name = {v.name: v for v in views}
    kept = [n for n in snap.nodes if n.claim not in command.candidates]
    nodes = [replace(n, view=by_name[n.node], movable=by_name[n.node].pods) for n in kept]
    for r in command.replacements:
        view = by_name[r.name]
        extra = node(f"{r.name}-{len(snap.nodes)}", r.choice.instance_type, pool=r.node_pool)
        renamed = replace(extra, view=replace(extra.view, pods=view.pods), movable=view.pods)
        nodes.append(renamed)
    return snapshot(nodes)
