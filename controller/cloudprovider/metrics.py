"""A CloudProvider wrapper that records every call: count by outcome, and latency, per method.

``joiner_cloudprovider_calls_total{provider,method,error}`` counts calls; ``error`` is empty on
success and the error's class name otherwise (``InsufficientCapacityError``, ...).
``joiner_cloudprovider_duration_seconds{provider,method}`` observes how long each call took.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from controller.clock import Clock, RealClock
from controller.cloudprovider.types import CloudProvider, Instance
from controller.metrics import counter, histogram
from controller.scheduling.instancetypes import InstanceType

Obj = dict[str, Any]
T = TypeVar("T")

CALLS = counter(
    "joiner_cloudprovider_calls_total",
    "Cloud provider calls by method and outcome (error is empty on success, else the error type).",
    ("provider", "method", "error"),
)
DURATION = histogram(
    "joiner_cloudprovider_duration_seconds",
    "Latency of cloud provider calls by method.",
    ("provider", "method"),
)


class MeteredCloudProvider:
    """Wraps any CloudProvider; behaves exactly like it and records calls, errors and latency."""

    def __init__(self, inner: CloudProvider, *, clock: Clock | None = None) -> None:
        self.inner = inner
        self._clock: Clock = clock if clock is not None else RealClock()

    @property
    def name(self) -> str:
        return self.inner.name

    async def _call(self, method: str, call: Awaitable[T]) -> T:
        start = self._clock.monotonic()
        error = ""
        try:
            return await call
        except Exception as err:
            error = type(err).__name__
            raise
        finally:
            CALLS.labels(self.inner.name, method, error).inc()
            DURATION.labels(self.inner.name, method).observe(max(0.0, self._clock.monotonic() - start))

    async def create(self, nodeclaim: Obj) -> Instance:
        return await self._call("create", self.inner.create(nodeclaim))

    async def delete(self, nodeclaim: Obj) -> None:
        await self._call("delete", self.inner.delete(nodeclaim))

    async def get(self, provider_id: str) -> Instance:
        return await self._call("get", self.inner.get(provider_id))

    async def list(self) -> list[Instance]:
        return await self._call("list", self.inner.list())

    async def is_drifted(self, nodeclaim: Obj) -> str | None:
        return await self._call("is_drifted", self.inner.is_drifted(nodeclaim))

    async def instance_types(self, nodepool: Obj) -> Sequence[InstanceType]:
        return await self._call("instance_types", self.inner.instance_types(nodepool))
