"""The metrics wrapper records every call's outcome and latency, and changes nothing else."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from controller.clock import FakeClock
from controller.cloudprovider.metrics import MeteredCloudProvider
from controller.cloudprovider.types import Instance, InsufficientCapacityError, NodeClaimNotFoundError
from controller.metrics import REGISTRY
from controller.scheduling.instancetypes import InstanceType

Obj = dict[str, Any]


class SlowCloud:
    """A fake provider whose calls take clock time."""

    name = "slowfake"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    async def create(self, nodeclaim: Obj) -> Instance:
        await self.clock.sleep(2.0)
        if nodeclaim["metadata"]["name"] == "full":
            raise InsufficientCapacityError("no capacity")
        return Instance(provider_id="fake://a", nodeclaim="a", instance_type="t", zone="z", capacity_type="spot")

    async def delete(self, nodeclaim: Obj) -> None:
        raise NodeClaimNotFoundError("gone")

    async def get(self, provider_id: str) -> Instance:
        raise NodeClaimNotFoundError("gone")

    async def list(self) -> list[Instance]:
        return []

    async def is_drifted(self, nodeclaim: Obj) -> str | None:
        return None

    async def instance_types(self, nodepool: Obj) -> Sequence[InstanceType]:
        return ()


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_calls_errors_and_latency_are_recorded_per_method() -> None:
    clock = FakeClock()
    cloud = MeteredCloudProvider(SlowCloud(clock), clock=clock)
    assert cloud.name == "slowfake"
    ok_before = sample("joiner_cloudprovider_calls_total", provider="slowfake", method="create", error="")
    ice_before = sample(
        "joiner_cloudprovider_calls_total", provider="slowfake", method="create", error="InsufficientCapacityError"
    )
    time_before = sample("joiner_cloudprovider_duration_seconds_sum", provider="slowfake", method="create")

    async def call(name: str) -> None:
        await cloud.create({"metadata": {"name": name}})

    task = asyncio.create_task(call("a"))
    await asyncio.sleep(0)
    await clock.advance(2.0)
    await task
    task = asyncio.create_task(call("full"))
    await asyncio.sleep(0)
    await clock.advance(2.0)
    with pytest.raises(InsufficientCapacityError):
        await task
    with pytest.raises(NodeClaimNotFoundError):
        await cloud.delete({"metadata": {"name": "x"}})
    assert await cloud.list() == []

    assert sample("joiner_cloudprovider_calls_total", provider="slowfake", method="create", error="") == ok_before + 1
    assert (
        sample(
            "joiner_cloudprovider_calls_total", provider="slowfake", method="create", error="InsufficientCapacityError"
        )
        == ice_before + 1
    )
    assert (
        sample("joiner_cloudprovider_calls_total", provider="slowfake", method="delete", error="NodeClaimNotFoundError")
        >= 1
    )
    assert sample("joiner_cloudprovider_calls_total", provider="slowfake", method="list", error="") >= 1
    took = sample("joiner_cloudprovider_duration_seconds_sum", provider="slowfake", method="create") - time_before
    assert took == pytest.approx(4.0)
