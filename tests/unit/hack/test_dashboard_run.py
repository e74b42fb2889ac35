"""The dashboard run's NodePools are what the API accepts, and its budget binds where the timeline
says: the burst fits under it, the peak does not (checked with the solver offline, `joiner plan`)."""

from __future__ import annotations

from typing import Any

from api.v1 import KWOKNodeClass, NodePool
from hack.dashboard_run import INFERENCE, INFERENCE_PEAK, L4_BUDGET, inference, pools
from tests.e2e.manifests import offline_plan


def test_the_runs_objects_are_valid_nodepools_and_a_nodeclass() -> None:
    nodeclass, *nodepools = pools()
    KWOKNodeClass.model_validate(nodeclass)
    parsed = [NodePool.model_validate(p) for p in nodepools]
    assert [p.metadata.name for p in parsed] == ["cpu", "l4", "h100"]
    budgets = {p.metadata.name: p.spec.capacity.budget for p in parsed if p.spec.capacity and p.spec.capacity.budget}
    assert {name: float(b.max_price_per_hour) for name, b in budgets.items()} == {"l4": L4_BUDGET}


def _l4_plan(replicas: int) -> dict[str, Any]:
    return offline_plan(pools(), [inference("ns", replicas)])


def test_the_burst_fits_under_the_l4_budget_and_the_peak_does_not() -> None:
    burst = _l4_plan(INFERENCE)
    assert not burst["unschedulable"], burst["unschedulable"]
    assert len(burst["nodeClaims"]) == INFERENCE
    assert burst["totalPrice"] <= L4_BUDGET
    peak = _l4_plan(INFERENCE_PEAK)
    refused = peak["unschedulable"]
    assert refused, "at the peak every inference pod fits under the budget: the run's phase 4 would show nothing"
    assert all(f"its budget is ${L4_BUDGET:.2f}/h" in r["reason"] for r in refused), refused
    assert len(peak["nodeClaims"]) + len(refused) == INFERENCE_PEAK
    assert peak["totalPrice"] <= L4_BUDGET
