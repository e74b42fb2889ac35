"""NodePool ``spec.capacity``: warm buffers, scheduled buffers, the forecast's settings and the
$/hour budget -- capacity joiner keeps ahead of demand, and the ceiling on what it spends."""

from __future__ import annotations

import re
from typing import Annotated, Final, Self

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator
from pydantic_core import PydanticCustomError

from api.quantity import is_non_negative_quantity
from api.v1.common import cel_rule
from api.v1.meta import SpecModel, StatusModel
from api.v1.tiermix import TierMix
from api.v1.types import BudgetDuration, CronSchedule, PositiveDuration, Quantity, parse_duration

GPU_RESOURCE: Final = "nvidia.com/gpu"
MAX_BUFFER_NODES: Final = 500
MAX_BUFFER_GPUS: Final = 8000
MAX_SCHEDULES: Final = 20
MAX_SELECTOR_LABELS: Final = 20
DEFAULT_LOOKBACK: Final = "168h"
DEFAULT_LEAD_TIME: Final = "30m"
DEFAULT_CONFIDENCE: Final = 0.7
PRICE_PATTERN: Final = r"^[0-9]{1,9}(\.[0-9]{1,6})?$"


class BufferShape(SpecModel):
    """What one unit of a GPU buffer looks like: the requests of a pod that would use it and the
    node labels it needs (like a pod's ``resources.requests`` and ``nodeSelector``)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    f"'{GPU_RESOURCE}' in self.requests",
                    f"shape: requests must include {GPU_RESOURCE} (the GPUs one buffer pod holds)",
                )
            ]
        }
    )
    omit_when_empty = frozenset({"node_selector"})

    requests: dict[str, Quantity] = Field(min_length=1)
    """Requests of one buffer pod, e.g. ``{nvidia.com/gpu: 8, cpu: 90, memory: 900Gi}``. Must
    include ``nvidia.com/gpu`` (at least 1)."""
    node_selector: dict[str, str] = Field(default_factory=dict, max_length=MAX_SELECTOR_LABELS)
    """Node labels the buffer must be on, e.g. ``{joiner.sh/gpu-name: h100}``."""

    @field_validator("requests")
    @classmethod
    def _has_gpus(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        gpus = value.get(GPU_RESOURCE)
        if gpus is None:
            raise PydanticCustomError(
                "shape_gpus",
                "shape: requests must include {gpu} (the GPUs one buffer pod holds)",
                {"gpu": GPU_RESOURCE},
            )
        if str(gpus) in ("0", "0.0") or not str(gpus).isdigit():
            raise PydanticCustomError(
                "shape_gpus",
                "shape: {gpu} must be a whole number of at least 1, got '{value}'",
                {"gpu": GPU_RESOURCE, "value": gpus},
            )
        return value


class Buffer(SpecModel):
    """Capacity kept ready and unused: ``nodes`` whole empty nodes, or ``gpus`` GPUs of a ``shape``."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule("has(self.nodes) != has(self.gpus)", "buffer: set exactly one of 'nodes' or 'gpus'"),
                cel_rule("!has(self.shape) || has(self.gpus)", "buffer: 'shape' goes with 'gpus', not 'nodes'"),
            ]
        }
    )

    nodes: int | None = Field(default=None, ge=0, le=MAX_BUFFER_NODES)
    """Empty nodes to keep, each of the pool's cheapest instance type (see docs/capacity.md)."""
    gpus: int | None = Field(default=None, ge=0, le=MAX_BUFFER_GPUS)
    """GPUs to keep free, in units of ``shape`` (rounded up to whole shapes)."""
    shape: BufferShape | None = None
    """What the free GPUs must look like. Unset: single GPUs (``{nvidia.com/gpu: 1}``) anywhere in
    the pool."""

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        if (self.nodes is None) == (self.gpus is None):
            raise PydanticCustomError("buffer_kind", "buffer: set exactly one of 'nodes' or 'gpus'")
        if self.shape is not None and self.gpus is None:
            raise PydanticCustomError("buffer_shape", "buffer: 'shape' goes with 'gpus', not 'nodes'")
        return self


class CapacitySchedule(SpecModel):
    """A window (cron, UTC, plus a duration) during which a larger buffer applies."""

    schedule: CronSchedule
    """When the window opens (cron, UTC), e.g. ``30 8 * * 1-5`` for weekdays 08:30."""
    duration: BudgetDuration
    """How long it stays open after each opening (hours and minutes, e.g. ``10h``)."""
    buffer: Buffer
    """The buffer while the window is open (the larger of it and ``spec.capacity.buffer`` applies)."""


class Forecast(SpecModel):
    """Settings of the forecast that pre-warms ahead of demand learned from the pool's history."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "!has(self.lookback) || duration(self.lookback) >= duration('24h')",
                    "forecast: lookback must be 24h or more (it learns from earlier days)",
                )
            ]
        }
    )

    enabled: bool = False
    """Pre-warm from the forecast. Off by default."""
    lookback: PositiveDuration = DEFAULT_LOOKBACK
    """How much history the forecast learns from (default ``168h``: one week)."""
    lead_time: PositiveDuration = DEFAULT_LEAD_TIME
    """How far ahead of predicted demand capacity is started (default ``30m``)."""
    confidence: float = Field(default=DEFAULT_CONFIDENCE, ge=0.0, le=1.0)
    """Below this confidence (0..1) the forecast does nothing (default ``0.7``)."""

    @field_validator("lookback")
    @classmethod
    def _a_day_or_more(cls, value: str) -> str:
        parsed = parse_duration(value)
        if parsed is not None and parsed.total_seconds() < 24 * 3600:
            raise PydanticCustomError(
                "forecast_lookback",
                "forecast: lookback must be 24h or more (it learns from earlier days), got {v}",
                {"v": value},
            )
        return value


def _check_price(value: str) -> str:
    if re.fullmatch(PRICE_PATTERN, value) is None:
        raise PydanticCustomError(
            "price", "must be a price in $/hour as a decimal string such as \"120.50\", got '{value}'", {"value": value}
        )
    return value


Price = Annotated[
    str,
    AfterValidator(_check_price),
    WithJsonSchema({"type": "string", "pattern": PRICE_PATTERN, "maxLength": 16}),
]


class CapacityBudget(SpecModel):
    """A ceiling on what the pool's nodes cost."""

    max_price_per_hour: Price
    """Most the pool's nodes (running, launching and planned) may cost together, in $/hour, as a
    decimal string such as ``"120.50"``. joiner buys nothing that would cross it."""


class Capacity(SpecModel):
    """Proactive capacity and spending bounds of a NodePool."""

    omit_when_empty = frozenset({"schedules"})

    buffer: Buffer | None = None
    """Capacity kept ready and unused at all times."""
    schedules: list[CapacitySchedule] = Field(default_factory=list, max_length=MAX_SCHEDULES)
    """Windows with a larger buffer (e.g. weekdays 08:30 for 10 h, 16 GPUs)."""
    forecast: Forecast | None = None
    """Pre-warming from learned demand."""
    budget: CapacityBudget | None = None
    """A $/hour ceiling for the pool."""
    tier_mix: TierMix | None = None
    """Target shares of spot / on-demand / reserved across the pool's nodes."""


def price_value(text: str) -> float:
    """``maxPricePerHour`` as a number (validated by the model already)."""
    return float(text)


def limit_nodes(limits: dict[str, str | int]) -> int | None:
    """``spec.limits.nodes`` as a count, or None when unset."""
    raw = limits.get("nodes")
    if raw is None:
        return None
    return int(str(raw))


def check_nodes_limit(limits: dict[str, str | int]) -> None:
    """``spec.limits.nodes`` must be a whole count (raises ``PydanticCustomError``)."""
    raw = limits.get("nodes")
    if raw is None:
        return
    if isinstance(raw, int) or (isinstance(raw, str) and raw.isdigit() and is_non_negative_quantity(raw)):
        return
    raise PydanticCustomError(
        "nodes_limit", "limits: 'nodes' is a count of nodes such as 10, got '{value}'", {"value": raw}
    )


NODES_LIMIT_RULE: Final = cel_rule(
    "!('nodes' in self) || string(self['nodes']).matches('^[0-9]+$')",
    "limits: 'nodes' is a count of nodes such as 10",
)


class BufferStatus(StatusModel):
    """How much of the warm buffer the pool wants now and how much of it is ready."""

    wanted: int = Field(default=0, ge=0)
    """Buffer wanted now (nodes, or GPUs for a GPU buffer): the largest of the static buffer and
    the open schedules."""
    ready: int = Field(default=0, ge=0)
    """Of it, the part that sits unused on initialized nodes."""
    forecast: int | None = Field(default=None, ge=0)
    """With ``spec.capacity.forecast.enabled``: what the forecast pre-warms now (GPUs, or nodes in a
    pool without GPUs), 0 when it expects nothing or is not sure enough."""
    forecast_confidence: str | None = None
    """The forecast's confidence in the hour it acts for, e.g. ``"0.92"``."""
