"""The forecast on synthetic traces: diurnal, weekday-only, noise, a one-off spike, too little
history, the week boundary; and the history's storage."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.capacity.forecast import ForecastConfig, ForecastError, decide, predict, weekly_profile
from controller.capacity.history import MAX_AGE, History, HistoryError, deserialize, serialize

MONDAY = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday, 00:00 UTC
CONFIG = ForecastConfig()


def trace(days: int, demand: Callable[[datetime], float], *, end: datetime) -> dict[datetime, float]:
    """Hourly peaks for the ``days`` before ``end``."""
    out = {}
    t = end - timedelta(days=days)
    while t < end:
        out[t.replace(minute=0)] = demand(t)
        t += timedelta(hours=1)
    return out


def office(t: datetime) -> float:
    return 16.0 if 9 <= t.hour < 18 else 0.0


def weekday_office(t: datetime) -> float:
    return office(t) if t.weekday() < 5 else 0.0


def test_a_daily_peak_is_prewarmed_half_an_hour_ahead() -> None:
    now = MONDAY + timedelta(days=7, hours=8, minutes=40)
    history = trace(7, office, end=now)
    d = decide(history, now=now, current=0, config=CONFIG)
    assert d.acted
    assert d.prewarm == 16
    assert d.hour == MONDAY + timedelta(days=7, hours=9)
    assert d.confidence >= 0.7
    quiet = decide(history, now=now - timedelta(hours=3), current=0, config=CONFIG)  # 05:40: nothing due
    assert quiet.prewarm == 0


def test_what_is_already_there_is_not_bought_again() -> None:
    now = MONDAY + timedelta(days=7, hours=8, minutes=40)
    d = decide(trace(7, office, end=now), now=now, current=10, config=CONFIG)
    assert d.prewarm == 6


def test_weekday_peaks_are_not_prewarmed_on_the_weekend() -> None:
    saturday = MONDAY + timedelta(days=12, hours=8, minutes=40)
    history = trace(7, weekday_office, end=saturday)
    assert decide(history, now=saturday, current=0, config=CONFIG).prewarm == 0
    monday = MONDAY + timedelta(days=14, hours=8, minutes=40)
    assert decide(trace(7, weekday_office, end=monday), now=monday, current=0, config=CONFIG).prewarm == 16


def test_noise_is_tolerated() -> None:
    rng = random.Random(7)
    now = MONDAY + timedelta(days=7, hours=8, minutes=40)
    history = trace(7, lambda t: max(0.0, office(t) + rng.uniform(-2, 2)), end=now)
    d = decide(history, now=now, current=0, config=CONFIG)
    assert d.acted
    assert 13 <= d.prewarm <= 18


def test_a_one_off_spike_is_not_learned() -> None:
    now = MONDAY + timedelta(days=7, hours=8, minutes=40)
    history = trace(7, office, end=now)
    history[MONDAY + timedelta(days=2, hours=9)] = 200.0  # one Wednesday
    d = decide(history, now=now, current=0, config=CONFIG)
    assert d.prewarm == 16


def test_too_little_history_does_nothing() -> None:
    now = MONDAY + timedelta(days=1, hours=8, minutes=40)  # Tuesday: one earlier day
    d = decide(trace(1, office, end=now), now=now, current=0, config=CONFIG)
    assert not d.acted
    assert d.prewarm == 0
    assert "below 0.70" in d.why


def test_the_lead_time_crosses_the_week_boundary() -> None:
    sunday_late = MONDAY + timedelta(days=13, hours=23, minutes=50)
    night_batch = trace(14, lambda t: 8.0 if t.hour == 0 and t.weekday() < 5 else 0.0, end=sunday_late)
    d = decide(night_batch, now=sunday_late, current=0, config=CONFIG)  # covers Monday 00:00
    assert d.prewarm == 8
    assert d.hour == MONDAY + timedelta(days=14)


def test_three_weeks_of_history_switch_to_the_weekly_pattern() -> None:
    now = MONDAY + timedelta(days=21, hours=8, minutes=40)
    # Mondays only have a 32-GPU peak; other weekdays 16
    history = trace(21, lambda t: 32.0 if t.weekday() == 0 and 9 <= t.hour < 18 else weekday_office(t), end=now)
    lookback = ForecastConfig(lookback=timedelta(days=21))
    p = predict(history, now + timedelta(minutes=20), now=now, lookback=lookback.lookback)
    assert p.basis == "weekly"
    assert p.demand == 32
    assert decide(history, now=now, current=0, config=lookback).prewarm == 32


def test_the_profile_has_a_row_per_day() -> None:
    now = MONDAY + timedelta(days=7, hours=8, minutes=40)
    rows = weekly_profile(trace(7, office, end=now), now=now, lookback=CONFIG.lookback)
    assert len(rows) == 7
    assert all(len(r) == 24 for r in rows)
    assert rows[0][9] == 16
    assert rows[0][3] == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lookback": timedelta(hours=3)}, "a day or more"),
        ({"lead_time": timedelta(0)}, "longer than zero"),
        ({"confidence": 1.5}, "0..1"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ForecastError, match=message):
        ForecastConfig(**kwargs)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(min_value=0, max_value=500, allow_nan=False), min_size=24 * 8, max_size=24 * 8),
    current=st.floats(min_value=0, max_value=600, allow_nan=False),
    minute=st.integers(min_value=0, max_value=24 * 60 - 1),
)
def test_the_decision_is_never_negative_and_never_above_what_history_saw(
    values: list[float], current: float, minute: int
) -> None:
    now = MONDAY + timedelta(days=8, minutes=minute)
    start = now.replace(minute=0) - timedelta(hours=len(values))
    history = {start + timedelta(hours=i): v for i, v in enumerate(values)}
    d = decide(history, now=now, current=current, config=CONFIG)
    assert d.prewarm >= 0
    assert d.prewarm <= max(values) + 1
    if not d.acted:
        assert d.prewarm == 0


def test_history_keeps_hourly_peaks_bounded_and_round_trips() -> None:
    h = History(unit="gpu")
    t = MONDAY
    for minute in range(0, 60 * 24 * 7 * 10, 30):  # ten weeks, a sample every 30 minutes
        h.record(float(minute % 17), at=t + timedelta(minutes=minute))
    assert len(h.peaks) <= MAX_AGE / timedelta(hours=1) + 1
    h.record(-1, at=t)  # ignored
    h.record(float("nan"), at=t)
    again = History.from_json(h.to_json())
    assert again.peaks == h.peaks
    assert len(h.to_json()) < 30_000  # a few kilobytes per pool in the ConfigMap
    data = serialize({"h100": h, "cpu": History(unit="cpu")})
    back, problems = deserialize({**data, "broken": "{not json"})
    assert problems
    assert "NodePool broken" in problems[0]
    assert back["h100"].peaks == h.peaks


@pytest.mark.parametrize(
    "text",
    [
        '{"format": 9}',
        '{"format": 1, "unit": "tpu"}',
        '{"format": 1, "start": "yesterday", "hours": {}}',
        '{"format": 1, "start": "2026-11-02T00:00:00Z", "hours": {"0": -3}}',
        "[]",
    ],
)
def test_stored_history_that_cannot_be_read_is_an_error_not_a_crash(text: str) -> None:
    with pytest.raises(HistoryError):
        History.from_json(text)
