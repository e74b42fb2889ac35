"""Skipping disruption passes over a cluster at rest: when the next pass is needed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from controller.disruption import metrics
from controller.disruption.budgets import Budget
from controller.disruption.model import Command, Decision
from controller.disruption.quiet import MAX_QUIET, node_signature, quiet_until
from tests.unit.disruption.builders import NOW, node, policy, snapshot
from tests.unit.disruption.world import World


def test_a_cluster_at_rest_is_quiet_until_the_safety_net() -> None:
    snap = snapshot([node("a", "cpu-4")])  # stable long ago: consolidateAfter has passed
    assert quiet_until(snap, Decision()) == NOW + MAX_QUIET


def test_the_next_pass_comes_when_a_node_becomes_consolidatable() -> None:
    since = NOW - timedelta(seconds=10)
    snap = snapshot([node("a", "cpu-4", stable_since=since), node("b", "cpu-4")])
    assert quiet_until(snap, Decision()) == since + timedelta(seconds=30)


def test_expiry_and_the_end_of_a_replacement_s_protection_are_moments_too() -> None:
    snap = snapshot(
        [
            node("a", "cpu-4", expires_at=NOW + timedelta(minutes=2)),
            node("b", "cpu-4", protected_until=NOW + timedelta(seconds=45)),
        ]
    )
    assert quiet_until(snap, Decision()) == NOW + timedelta(seconds=45)


def test_a_budget_window_opening_or_closing_is_a_moment() -> None:
    # NOW is 12:00: a window opened then for 2 minutes closes at 12:02
    closing = Budget(nodes="0", schedule="0 * * * *", duration=timedelta(minutes=2))
    snap = snapshot([node("a", "cpu-4")], pools={"cpu": policy("cpu", budgets=(closing,))})
    assert quiet_until(snap, Decision()) == NOW + timedelta(minutes=2)
    # the last window of this one closed at 11:04; the next opens at 12:03
    opening = Budget(nodes="0", schedule="3 * * * *", duration=timedelta(minutes=1))
    snap = snapshot([node("a", "cpu-4")], pools={"cpu": policy("cpu", budgets=(opening,))})
    assert quiet_until(snap, Decision()) == NOW + timedelta(minutes=3)


def test_no_quiet_while_a_command_runs_something_waits_or_a_node_s_history_is_unknown() -> None:
    snap = snapshot([node("a", "cpu-4")])
    command = Command(reason="Empty", candidates=("claim-a",), nodes=("a",), pools=("cpu",))
    assert quiet_until(snap, Decision(commands=(command,))) is None
    assert quiet_until(snap, Decision(waiting="pods are pending")) is None
    assert quiet_until(snapshot([node("a", "cpu-4")], active=frozenset({"claim-a"})), Decision()) is None
    assert quiet_until(snapshot([node("a", "cpu-4", stable_since=None)]), Decision()) is None


def test_node_heartbeats_are_not_changes_but_taints_and_readiness_are() -> None:
    base: dict[str, Any] = {
        "metadata": {"name": "n", "labels": {"a": "b"}},
        "spec": {"providerID": "kwok://n"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"}]},
    }
    beat = {**base, "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t2"}]}}
    assert node_signature(beat) == node_signature(base)
    not_ready = {**base, "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    assert node_signature(not_ready) != node_signature(base)
    tainted = {**base, "spec": {**base["spec"], "taints": [{"key": "x", "effect": "NoSchedule"}]}}
    assert node_signature(tainted) != node_signature(base)


async def test_the_controller_skips_passes_at_rest_and_runs_one_when_a_pod_moves(world: World) -> None:
    await world.nodepool()
    await world.node("busy", capacity_type="spot")  # the cheapest machine for its pod: nothing to do
    await world.pod("web-1", "busy", cpu="3")
    await world.advance(31)
    controller = world.controller
    await controller.reconcile()
    await world.settle()
    await controller.reconcile()  # the first pass wrote conditions: the second sees them and writes nothing
    await world.settle()
    assert not controller.due()
    skipped = metrics.PASSES_SKIPPED._value.get()
    world.h.start(controller)
    await world.advance(11)
    assert metrics.PASSES_SKIPPED._value.get() > skipped
    await world.pod("web-2", "busy")
    assert controller.due()
    await world.advance(11)
    assert not controller.due()  # the pass ran and found the cluster at rest again
