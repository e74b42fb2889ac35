"""Tier mix: target shares of spot / on-demand / reserved honoured across a pool's nodes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scheduling import ExistingNode, InstanceType, Offering, Plan, Pod, solve
from controller.scheduling.tiermix import (
    Bend,
    TierMix,
    TierMixError,
    apply,
    pool_weights,
    restrict_capacity_type,
    shares,
)
from tests.unit.scheduling.builders import (
    CAPACITY_TYPE,
    GPU,
    TOLERATE_GPU,
    check_plan,
    itype,
    node,
    pods,
    pool,
    res,
)

GPU_TYPE = itype("g1", cpu=8, mem_gi=32, gpu=1, price=1.0, spot=0.4)
MIX = TierMix.from_percent(spot=60, on_demand=40)


def gpu_pods(n: int, prefix: str = "train") -> list[Pod]:
    return pods(prefix, n, requests=res(cpu="6", memory="20Gi", gpu=1), tolerations=[TOLERATE_GPU])


def full_node(name: str, tier: str) -> ExistingNode:
    """A GPU node of the pool already running a pod on its GPU (no room for the new pods)."""
    return node(
        name,
        allocatable=res(cpu=8, memory="32Gi", gpu=1, pods=110),
        node_pool="gpu",
        labels={CAPACITY_TYPE: tier},
        bound=gpu_pods(1, prefix=f"on-{name}"),
    )


def plan_for(
    n: int, *, types: list[InstanceType] | None = None, existing: list[ExistingNode] | None = None, mix: TierMix = MIX
) -> tuple[Plan, list[Bend]]:
    its = types or [GPU_TYPE]
    p = pool("gpu", its)
    pending = gpu_pods(n)
    plan = solve(pods=pending, node_pools=[p], existing_nodes=existing or [])
    assert all(n.choice.capacity_type == "spot" for n in plan.new_nodes)  # the solver alone buys the cheapest
    mixed, bends = apply(plan, mixes={"gpu": mix}, existing=existing or [], instance_types={it.name: it for it in its})
    check_plan(mixed, pending=pending, pools=[p], existing=existing or [])
    return mixed, bends


def tiers(plan: Plan) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in plan.new_nodes:
        out[n.choice.capacity_type] = out.get(n.choice.capacity_type, 0) + 1
    return out


def test_one_hundred_nodes_split_as_the_targets_say_not_each_node_cheapest() -> None:
    plan, bends = plan_for(100)
    assert tiers(plan) == {"spot": 60, "on-demand": 40}
    assert bends == []
    for n in plan.new_nodes:  # each NodeClaim can only be bought as its tier
        req = n.requirements.get(CAPACITY_TYPE)
        assert req is not None
        assert req.values == frozenset({n.choice.capacity_type})
        assert all(o.capacity_type == n.choice.capacity_type for c in n.candidates for o in c.offerings)
    assert plan.total_price == pytest.approx(60 * 0.4 + 40 * 1.0)


def test_existing_nodes_count_so_new_ones_fill_the_gap() -> None:
    existing = [full_node(f"od-{i}", "on-demand") for i in range(4)]
    plan, _ = plan_for(6, existing=existing)
    assert tiers(plan) == {"spot": 6}  # 4 on-demand already: 6 spot make 60/40


def test_when_spot_is_short_the_shares_bend_and_say_so() -> None:
    short = itype(
        "g1",
        cpu=8,
        mem_gi=32,
        gpu=1,
        price=1.0,
        spot=0.4,
        unavailable=[(z, "spot") for z in ("zone-a", "zone-b", "zone-c")],
    )
    p = pool("gpu", [short])
    pending = gpu_pods(10)
    plan = solve(pods=pending, node_pools=[p])
    mixed, bends = apply(plan, mixes={"gpu": MIX}, existing=[], instance_types={"g1": short})
    assert tiers(mixed) == {"on-demand": 10}
    assert len(bends) == 10  # spot stayed below its share the whole time, so every node wanted it
    assert {(b.wanted, b.bought) for b in bends} == {("spot", "on-demand")}
    assert "no spot offering can host it" in bends[0].why


def test_reserved_capacity_is_used_first_whatever_its_share() -> None:
    reserved = replace(GPU_TYPE, offerings=(*GPU_TYPE.offerings, Offering("zone-a", "reserved", 0.0)))
    plan = solve(pods=gpu_pods(3), node_pools=[pool("gpu", [reserved])])
    # the solver's cheapest is the reservation for all three; the mix keeps them there
    mixed, bends = apply(
        plan,
        mixes={"gpu": TierMix.from_percent(spot=60, on_demand=35, reserved=5)},
        existing=[],
        instance_types={"g1": reserved},
    )
    assert tiers(mixed) == {"reserved": 3}
    assert bends == []


def test_pools_without_a_mix_keep_the_solver_choice() -> None:
    plan = solve(pods=gpu_pods(5), node_pools=[pool("gpu", [GPU_TYPE])])
    same, bends = apply(plan, mixes={"other": MIX}, existing=[], instance_types={"g1": GPU_TYPE})
    assert same is plan
    assert bends == []


def test_shares_are_counted_in_gpus_for_gpu_nodes_and_vcpus_for_others() -> None:
    nodes = [
        node("a", allocatable=res(cpu=96, memory="768Gi", gpu=8), node_pool="p", labels={CAPACITY_TYPE: "spot"}),
        node("b", allocatable=res(cpu=8, memory="32Gi", gpu=2), node_pool="p", labels={CAPACITY_TYPE: "on-demand"}),
        node("c", allocatable=res(cpu=4, memory="8Gi"), node_pool="p", labels={CAPACITY_TYPE: "on-demand"}),
        node("d", allocatable=res(cpu=4, memory="8Gi"), node_pool="q", labels={CAPACITY_TYPE: "spot"}),
    ]
    weights = pool_weights(nodes, pool="p")
    assert weights == {"spot": 8.0, "on-demand": 6.0, "reserved": 0.0}
    assert shares(weights)["spot"] == pytest.approx(8 / 14)


@pytest.mark.parametrize(
    ("spot", "od", "reserved", "message"),
    [(60, 30, 0, "add up to 100%"), (-10, 110, 0, "not negative"), (float("nan"), 50, 50, "finite")],
)
def test_bad_targets_are_refused(spot: float, od: float, reserved: float, message: str) -> None:
    with pytest.raises(TierMixError, match=message):
        TierMix.from_percent(spot=spot, on_demand=od, reserved=reserved)


def test_restricting_to_a_type_it_cannot_be_bought_as_changes_nothing() -> None:
    only_od = itype("g1", cpu=8, mem_gi=32, gpu=1, price=1.0)
    [n] = solve(pods=gpu_pods(1), node_pools=[pool("gpu", [only_od])]).new_nodes
    assert restrict_capacity_type(n, "spot") is n


@settings(max_examples=40, deadline=None)
@given(
    spot_pct=st.integers(min_value=0, max_value=100),
    count=st.integers(min_value=1, max_value=60),
    existing_spot=st.integers(min_value=0, max_value=10),
    existing_od=st.integers(min_value=0, max_value=10),
)
def test_the_pool_ends_as_close_to_the_target_as_one_node_allows(
    spot_pct: int, count: int, existing_spot: int, existing_od: int
) -> None:
    existing = [
        full_node(f"{t}-{i}", t) for t, k in (("spot", existing_spot), ("on-demand", existing_od)) for i in range(k)
    ]
    mix = TierMix.from_percent(spot=spot_pct, on_demand=100 - spot_pct)
    plan, bends = plan_for(count, existing=existing, mix=mix)
    assert bends == []
    spot = existing_spot + tiers(plan).get("spot", 0)
    total = existing_spot + existing_od + count
    target = spot_pct / 100 * total
    # never more than one node off, unless the existing nodes alone are already past the target
    assert spot <= max(target + 1, existing_spot)
    assert total - spot <= max(total - target + 1, existing_od)
    assert sum(n.price for n in plan.new_nodes) == pytest.approx(plan.total_price)
    assert GPU  # the builders' GPU resource name is the one the weights read


def test_one_hundred_nodes_with_spot_running_short_bend_and_the_pool_says_so() -> None:
    """30 spot nodes were bought before spot ran out; the next 70 machines can only be on-demand."""
    from controller.provisioning.nodepool_status import tier_mix_condition

    existing = [full_node(f"spot-{i}", "spot") for i in range(30)]
    short = itype(
        "g1",
        cpu=8,
        mem_gi=32,
        gpu=1,
        price=1.0,
        spot=0.4,
        unavailable=[(z, "spot") for z in ("zone-a", "zone-b", "zone-c")],
    )
    p = pool("gpu", [short])
    pending = gpu_pods(70)
    plan = solve(pods=pending, node_pools=[p], existing_nodes=existing)
    mixed, bends = apply(plan, mixes={"gpu": MIX}, existing=existing, instance_types={"g1": short})
    check_plan(mixed, pending=pending, pools=[p], existing=existing)
    assert tiers(mixed) == {"on-demand": 70}
    # the first 20 were wanted on-demand anyway (30 spot of 30 is above 60 %); from 30 spot of 51 on,
    # spot is below its share, so each of the other 50 wanted spot and bent
    assert len(bends) == 50
    weights = {"spot": 30.0, "on-demand": 70.0, "reserved": 0.0}
    cond = tier_mix_condition(MIX, weights)
    assert (cond["status"], cond["reason"]) == ("False", "SpotShort")
    assert cond["message"].startswith("spot 30% (target 60%), on-demand 70% (target 40%)")
