"""The $/hour budget and limits.nodes applied to a plan: the machine that would cross either is not
bought and its pods are told why."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from controller.scheduling.bounds import BUDGET_EXCEEDED, NODE_LIMIT_REACHED, PoolBounds, apply_bounds, bounds_wanted
from controller.scheduling.model import Plan
from controller.scheduling.solver import solve
from tests.unit.disruption.builders import cpu_pool, gpu_pool, pod


def gpu_plan(n: int) -> Plan:
    """n one-GPU pods: n gpu-1 machines at $1.00/h each."""
    return solve(pods=[pod(f"train-{i}", cpu=2, mem_gi=4, gpus=1) for i in range(n)], node_pools=[gpu_pool()])


def test_the_budget_refuses_the_pod_whose_machine_would_cross_it() -> None:
    plan = gpu_plan(3)
    assert [n.price for n in plan.new_nodes] == [1.0, 1.0, 1.0]
    # $1.50/h already spent, a $3.60/h ceiling: one more machine fits ($2.50), a second would make $3.50, a third $4.50
    bounded = apply_bounds(plan, {"gpu": PoolBounds(max_price=3.6, price=1.5, nodes=1)})
    assert len(bounded.plan.new_nodes) == 2
    [refused] = [
        k for n in plan.new_nodes for k in n.pods if k not in {p for m in bounded.plan.new_nodes for p in m.pods}
    ]
    reason, message = bounded.refused[refused]
    assert reason == BUDGET_EXCEEDED
    assert message == (
        'nodepool "gpu": its budget is $3.60/h and its nodes and the 2 planned cost $3.50/h: '
        "a gpu-1 at $1.00/h would cross it"
    )
    assert bounded.plan.unschedulable[refused] == message
    assert bounded.plan.total_price == 2.0


def test_a_machine_exactly_at_the_budget_is_bought() -> None:
    bounded = apply_bounds(gpu_plan(2), {"gpu": PoolBounds(max_price=2.0)})
    assert len(bounded.plan.new_nodes) == 2
    assert not bounded.refused


def test_limits_nodes_counts_running_and_planned_machines() -> None:
    bounded = apply_bounds(gpu_plan(3), {"gpu": PoolBounds(max_nodes=4, nodes=3)})
    assert len(bounded.plan.new_nodes) == 1
    assert {why for why, _ in bounded.refused.values()} == {NODE_LIMIT_REACHED}
    assert (
        next(iter(bounded.refused.values()))[1]
        == 'nodepool "gpu": all available instance types exceed limits for nodepool '
        "(limits.nodes is 4 and it has 3 and 1 more planned)"
    )


def test_pools_without_bounds_are_left_alone() -> None:
    plan = gpu_plan(2)
    assert apply_bounds(plan, {}).plan is plan
    assert apply_bounds(plan, {"cpu": PoolBounds(max_nodes=0)}).plan is plan  # another pool's bound


def test_a_gang_is_refused_whole_when_one_of_its_machines_would_cross() -> None:
    pods = [pod(f"g-{i}", cpu=2, mem_gi=4, gpus=1) for i in range(3)]
    gang = [replace(p, gang="job") for p in pods]
    plan = solve(pods=gang, node_pools=[gpu_pool(), cpu_pool()])
    assert len(plan.new_nodes) == 3
    bounded = apply_bounds(plan, {"gpu": PoolBounds(max_nodes=2)})
    assert bounded.plan.new_nodes == ()
    assert set(bounded.refused) == {p.key for p in gang}


@given(
    n=st.integers(1, 8),
    spent=st.floats(0, 5, allow_nan=False),
    ceiling=st.floats(0, 12, allow_nan=False),
    max_nodes=st.one_of(st.none(), st.integers(0, 10)),
    have=st.integers(0, 4),
)
def test_what_is_kept_never_crosses_a_bound(
    n: int, spent: float, ceiling: float, max_nodes: int | None, have: int
) -> None:
    plan = gpu_plan(n)
    bounded = apply_bounds(plan, {"gpu": PoolBounds(max_price=ceiling, max_nodes=max_nodes, price=spent, nodes=have)})
    kept = bounded.plan.new_nodes
    if kept:
        assert spent + sum(m.price for m in kept) <= ceiling + 1e-9
        assert max_nodes is None or have + len(kept) <= max_nodes
    # every pod is either on a kept machine or refused with a reason
    placed = {k for m in kept for k in m.pods}
    assert placed | set(bounded.refused) == {k for m in plan.new_nodes for k in m.pods}
    assert not placed & set(bounded.refused)


def test_a_gang_within_the_bounds_is_kept_whole() -> None:
    gang = [replace(pod(f"g-{i}", cpu=2, mem_gi=4, gpus=1), gang="job") for i in range(3)]
    plan = solve(pods=gang, node_pools=[gpu_pool(), cpu_pool()])
    bounded = apply_bounds(plan, {"gpu": PoolBounds(max_nodes=3, max_price=3.0)})
    assert bounded.plan is plan
    assert bounded.refused == {}


def test_bounds_wanted_names_the_pools_with_a_budget_or_a_node_limit() -> None:
    pools: dict[str, dict[str, Any]] = {
        "budget": {"spec": {"capacity": {"budget": {"maxPricePerHour": "12.5"}}}},
        "nodes": {"spec": {"limits": {"nodes": 4, "cpu": "100"}}},
        "both": {"spec": {"capacity": {"budget": {"maxPricePerHour": 3}}, "limits": {"nodes": "2"}}},
        "cpu-only": {"spec": {"limits": {"cpu": "100"}}},
        "bare": {},
    }
    assert bounds_wanted(pools) == {"budget": (12.5, None), "nodes": (None, 4), "both": (3.0, 2)}
    assert bounds_wanted({"bare": {"spec": None}}) == {}
