"""Counters of rare events are served at 0 before the first one, so the dashboard's rate() and
increase() see the first interruption or disruption (a series born at 1 shows no increase)."""

from __future__ import annotations

from controller.metrics import REGISTRY
from tests.unit.disruption.world import World, world

__all__ = ["world"]


def test_interruption_kinds_and_actions_start_at_zero() -> None:
    import controller.interruption.controller  # noqa: F401

    for kind in ("spot_interruption", "rebalance", "scheduled_change", "state_change"):
        assert REGISTRY.get_sample_value("joiner_interruption_messages_total", {"kind": kind}) is not None
    for action in ("nodeclaim_deleted", "offering_marked_unavailable"):
        assert REGISTRY.get_sample_value("joiner_interruption_actions_total", {"action": action}) is not None


async def test_disruption_decisions_of_a_pool_are_served_once_a_pass_saw_it(world: World) -> None:
    await world.nodepool("zero-series")
    await world.node("busy", pool="zero-series")
    await world.pod("web-1", "busy")
    labels = {"nodepool": "zero-series", "reason": "Drifted", "action": "replace"}
    assert REGISTRY.get_sample_value("joiner_disruption_decisions_total", labels) is None
    await world.controller.reconcile()
    assert REGISTRY.get_sample_value("joiner_disruption_decisions_total", labels) == 0
