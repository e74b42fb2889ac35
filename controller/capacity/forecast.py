"""Demand forecast of a NodePool from its own history: what to pre-warm, and how sure it is. Pure.

The history is one number per hour (the peak demand seen in that hour: GPUs, or CPUs for pools
without GPUs). To predict the demand of an hour ``h``:

* with three weeks or more of history inside the lookback, the samples are the same hour of the
  week in earlier weeks (a Monday 09:00 is predicted from earlier Mondays 09:00);
* otherwise, the same hour of the day on earlier days of the same kind (weekdays, or weekend days).

The prediction is the *lower median* of the samples: the value reached in at least half of them.
A one-off spike is one sample among several and is never chosen; a peak that comes back every
weekday is. The confidence is the product of a count factor (more samples, more trust; full at
three weekly or four daily samples) and of how consistent the samples are (one minus the median
distance of the samples from the prediction, relative to it: a lone outlier does not make an
otherwise steady pattern look unsure). Below the threshold the forecast does nothing.

The pre-warm decision covers every hour from now to now + lead time (a peak already under way must
keep its capacity) and is the prediction minus the demand already there: the forecast only ever
adds warm capacity; taking it back is consolidation's job once the window has passed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

HOUR: Final = timedelta(hours=1)
DEFAULT_LOOKBACK: Final = timedelta(days=7)
DEFAULT_LEAD_TIME: Final = timedelta(minutes=30)
DEFAULT_CONFIDENCE: Final = 0.7
WEEKLY_MIN_WEEKS: Final = 3
DAILY_FULL_COUNT: Final = 4


class ForecastError(ValueError):
    """Settings the forecast cannot work with."""


@dataclass(frozen=True, slots=True)
class ForecastConfig:
    lookback: timedelta = DEFAULT_LOOKBACK
    lead_time: timedelta = DEFAULT_LEAD_TIME
    confidence: float = DEFAULT_CONFIDENCE

    def __post_init__(self) -> None:
        if self.lookback < timedelta(days=1):
            raise ForecastError(f"the forecast lookback must be a day or more, got {self.lookback}")
        if self.lead_time <= timedelta(0):
            raise ForecastError(f"the forecast lead time must be longer than zero, got {self.lead_time}")
        if not 0.0 <= self.confidence <= 1.0:
            raise ForecastError(f"the forecast confidence threshold must be in 0..1, got {self.confidence}")


@dataclass(frozen=True, slots=True)
class Prediction:
    """Demand expected in one hour, from ``samples`` of earlier hours (``basis``: weekly or daily)."""

    hour: datetime
    demand: float
    confidence: float
    samples: int
    basis: str


@dataclass(frozen=True, slots=True)
class Prewarm:
    """What to keep warm now: ``prewarm`` units (GPUs or CPUs) on top of the demand already there."""

    prewarm: int
    predicted: float
    current: float
    confidence: float
    hour: datetime | None
    acted: bool
    why: str


def hour_of(t: datetime) -> datetime:
    """The start of the UTC hour ``t`` falls in."""
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _weekend(t: datetime) -> bool:
    return t.weekday() >= 5


def _lower_median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def predict(history: Mapping[datetime, float], hour: datetime, *, now: datetime, lookback: timedelta) -> Prediction:
    """The demand of ``hour`` from the history (hour start → peak demand) seen up to ``now``."""
    hour = hour_of(hour)
    start = now - lookback
    weeks_back = max(1, math.ceil((hour - start) / timedelta(days=7)))
    weekly = [
        v
        for k in range(1, weeks_back + 1)
        if start <= (t := hour - k * timedelta(days=7)) < now and (v := history.get(t)) is not None
    ]
    if len(weekly) >= WEEKLY_MIN_WEEKS:
        samples, basis, full = weekly, "weekly", WEEKLY_MIN_WEEKS
    else:
        samples = [
            v
            for d in range(1, max(1, math.ceil((hour - start) / timedelta(days=1))) + 1)
            if start <= (t := hour - d * timedelta(days=1)) < now
            and _weekend(t) == _weekend(hour)
            and (v := history.get(t)) is not None
        ]
        basis, full = "daily", DAILY_FULL_COUNT
    if len(samples) < 2:
        return Prediction(hour=hour, demand=0.0, confidence=0.0, samples=len(samples), basis=basis)
    value = _lower_median(samples)
    spread = _lower_median([abs(v - value) for v in samples]) / max(value, 1.0)
    count_factor = min(1.0, (len(samples) - 1) / (full - 1))
    confidence = max(0.0, count_factor * (1.0 - min(1.0, spread)))
    return Prediction(hour=hour, demand=value, confidence=round(confidence, 4), samples=len(samples), basis=basis)


def decide(history: Mapping[datetime, float], *, now: datetime, current: float, config: ForecastConfig) -> Prewarm:
    """How much to keep warm now (see the module text)."""
    hours = []
    h = hour_of(now)
    while h <= now + config.lead_time:
        hours.append(h)
        h += HOUR
    predictions = [predict(history, x, now=now, lookback=config.lookback) for x in hours]
    confident = [p for p in predictions if p.confidence >= config.confidence]
    best = max(predictions, key=lambda p: (p.confidence >= config.confidence, p.demand, p.confidence))
    if not confident:
        return Prewarm(
            prewarm=0,
            predicted=best.demand,
            current=current,
            confidence=best.confidence,
            hour=best.hour,
            acted=False,
            why=f"confidence {best.confidence:.2f} is below {config.confidence:.2f} "
            f"({best.samples} {best.basis} samples)",
        )
    top = max(confident, key=lambda p: p.demand)
    prewarm = max(0, math.ceil(top.demand - current - 1e-9))
    return Prewarm(
        prewarm=prewarm,
        predicted=top.demand,
        current=current,
        confidence=top.confidence,
        hour=top.hour,
        acted=prewarm > 0,
        why=f"{top.demand:g} expected at {top.hour:%a %H:00} UTC ({top.samples} {top.basis} samples), "
        f"{current:g} in use now",
    )


def weekly_profile(history: Mapping[datetime, float], *, now: datetime, lookback: timedelta) -> list[list[float]]:
    """The prediction for each hour of the coming week, as 7 rows (Monday first) of 24 values."""
    monday = hour_of(now) - timedelta(days=hour_of(now).weekday(), hours=hour_of(now).hour)
    rows = []
    for day in range(7):
        row = []
        for hour in range(24):
            t = monday + timedelta(days=day, hours=hour)
            if t < hour_of(now):
                t += timedelta(days=7)
            row.append(predict(history, t, now=now, lookback=lookback).demand)
        rows.append(row)
    return rows
