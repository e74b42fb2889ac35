"""Fault rates of the KWOKNodeClass (chaos runs): seeded, per offering and minute or per NodeClaim,
and the way a real cloud fails."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from controller.cloudprovider.kwok.nodeclass import Failures, capacity_period, parse_nodeclass
from controller.cloudprovider.types import CreateError, InsufficientCapacityError, OfferingId
from tests.unit.harness import Harness


def failures(**raw: object) -> Failures:
    return parse_nodeclass({"metadata": {"name": "x"}, "spec": {"failures": raw}}).failures


def test_capacity_draws_are_fixed_by_seed_offering_and_minute_and_follow_the_rate() -> None:
    f = failures(insufficientCapacityRate=0.3, seed=7)
    offering = OfferingId("g1", "zone-a", "spot")
    hits = [f.unlucky(offering, period) for period in range(2000)]
    assert hits == [f.unlucky(offering, period) for period in range(2000)]
    assert 0.26 < sum(hits) / len(hits) < 0.34
    zones = [f.unlucky(OfferingId("g1", f"zone-{i}", "spot"), 5) for i in range(2000)]
    assert 0.26 < sum(zones) / len(zones) < 0.34
    other_seed = failures(insufficientCapacityRate=0.3, seed=8)
    assert [other_seed.unlucky(offering, period) for period in range(50)] != hits[:50]


def test_an_offering_out_of_capacity_stays_out_for_the_minute() -> None:
    start = datetime(2026, 11, 26, 4, 0, tzinfo=UTC)
    assert capacity_period(start) == capacity_period(start + timedelta(seconds=59.9))
    assert capacity_period(start + timedelta(seconds=60)) == capacity_period(start) + 1


async def test_a_gangs_members_in_one_offering_are_all_refused_or_all_launched(harness: Harness) -> None:
    # a real cloud's pool is dry or not for every request of the moment; drawn per NodeClaim, a
    # 4-member gang in one offering launched whole only 0.7**4 = 24 % of the time at a 30 % rate
    await harness.create_nodeclass(failures={"insufficientCapacityRate": 0.5, "seed": 3})
    one_offering = [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]},
        {"key": "joiner.sh/capacity-type", "operator": "In", "values": ["spot"]},
    ]
    outcomes = []
    for period in range(12):
        await harness.advance(240)  # past the time a refused offering is avoided, into a new minute
        launched = set()
        for i in range(4):
            claim = await harness.create_claim(f"nc-{period}-{i}", instance_types=["cpu-4"], requirements=one_offering)
            try:
                await harness.cloud.create(claim)
                launched.add(True)
            except InsufficientCapacityError:
                launched.add(False)
        assert len(launched) == 1, f"period {period}: some members launched, some refused"
        outcomes.append(launched.pop())
    assert set(outcomes) == {True, False}  # the minutes differ


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"throttleRate": 1.5}, "spec.failures.throttleRate: expected a share between 0 and 1"),
        ({"neverReadyRate": -0.1}, "spec.failures.neverReadyRate"),
        ({"insufficientCapacityRate": "often"}, "spec.failures.insufficientCapacityRate"),
        ({"launchLatency": "soon"}, "spec.failures.launchLatency"),
    ],
)
def test_bad_rates_name_the_field(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        failures(**raw)


async def test_throttled_launches_fail_with_a_retryable_reason(harness: Harness) -> None:
    await harness.create_nodeclass(failures={"throttleRate": 1})
    claim = await harness.create_claim("nc-1", instance_types=["cpu-4"])
    with pytest.raises(CreateError) as err:
        await harness.cloud.create(claim)
    assert err.value.reason == "Throttled"
    assert "throttleRate" in str(err.value)


async def test_an_insufficient_capacity_rate_falls_back_or_runs_out(harness: Harness) -> None:
    await harness.create_nodeclass(failures={"insufficientCapacityRate": 1})
    claim = await harness.create_claim("nc-1", instance_types=["cpu-4"])
    with pytest.raises(InsufficientCapacityError) as err:
        await harness.cloud.create(claim)
    assert len(err.value.offerings) == 3  # every offering drew "no capacity"
    assert "insufficientCapacityRate" in str(err.value)


async def test_never_register_and_never_ready_rates(harness: Harness) -> None:
    await harness.create_nodeclass(name="lost", failures={"neverRegisterRate": 1})
    await harness.create_nodeclass(name="stuck", failures={"neverReadyRate": 1})
    lost = await harness.create_claim("nc-lost", instance_types=["cpu-4"], nodeclass="lost")
    stuck = await harness.create_claim("nc-stuck", instance_types=["cpu-4"], nodeclass="stuck")
    await harness.cloud.create(lost)
    await harness.cloud.create(stuck)
    await harness.advance(60)
    assert harness.node("nc-lost") is None
    node = harness.node("nc-stuck")
    assert node is not None
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})  # kwok never makes it Ready


async def test_launch_latency_holds_the_launch_on_the_clock(harness: Harness) -> None:
    await harness.create_nodeclass(failures={"launchLatency": "60s", "seed": 3})
    claim = await harness.create_claim("nc-1", instance_types=["cpu-4"])
    launch = asyncio.create_task(harness.cloud.create(claim))
    await asyncio.sleep(0)
    assert not launch.done()
    await harness.advance(61)
    instance = await asyncio.wait_for(launch, timeout=1)
    assert instance.provider_id == "kwok://nc-1"
