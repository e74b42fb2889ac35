"""The idle tracker: below the threshold for a whole window, never on missing data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.gpuidle.tracker import IdlePolicy, IdlePolicyError, IdleTracker

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
POLICY = IdlePolicy(threshold_percent=20.0, window=timedelta(minutes=10))


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_a_node_is_idle_only_after_a_whole_window_below_the_threshold() -> None:
    t = IdleTracker(POLICY)
    for minute in range(10):
        t.observe({"n1": 5.0}, now=at(minute))
        assert t.idle(now=at(minute)) == {}
    t.observe({"n1": 19.9}, now=at(10))
    idle = t.idle(now=at(10))
    assert set(idle) == {"n1"}
    assert idle["n1"].since == T0
    assert idle["n1"].peak == 19.9


def test_one_sample_at_the_threshold_starts_the_window_again() -> None:
    t = IdleTracker(POLICY)
    t.observe({"n1": 0.0}, now=at(0))
    t.observe({"n1": 20.0}, now=at(9))
    t.observe({"n1": 0.0}, now=at(10))
    assert t.idle(now=at(19)) == {}
    assert set(t.idle(now=at(20))) == {"n1"}
    assert t.quiet_since("n1") == at(10)


def test_a_node_missing_from_a_poll_is_never_idle_on_missing_data() -> None:
    t = IdleTracker(POLICY)
    t.observe({"n1": 1.0, "n2": 1.0}, now=at(0))
    t.observe({"n2": 1.0}, now=at(5))  # n1 not reported
    t.observe({"n1": 1.0, "n2": 1.0}, now=at(10))
    assert set(t.idle(now=at(10))) == {"n2"}
    assert t.quiet_since("n1") == at(10)


def test_not_a_number_counts_as_busy() -> None:
    t = IdleTracker(POLICY)
    t.observe({"n1": 1.0}, now=at(0))
    t.observe({"n1": float("nan")}, now=at(5))
    assert t.quiet_since("n1") is None


def test_a_failed_poll_keeps_what_is_known_until_a_whole_window_passed_without_data() -> None:
    t = IdleTracker(POLICY)
    t.observe({"n1": 1.0}, now=at(0))
    t.observe({"n1": 1.0}, now=at(10))
    t.failed(now=at(15))
    assert set(t.idle(now=at(15))) == {"n1"}
    t.failed(now=at(20))  # nothing learnt since minute 10: forget
    assert t.idle(now=at(20)) == {}
    fresh = IdleTracker(POLICY)
    fresh.failed(now=at(0))
    assert fresh.idle(now=at(30)) == {}


@pytest.mark.parametrize(
    ("threshold", "window"),
    [(0.0, 600), (-1.0, 600), (101.0, 600), (float("nan"), 600), (20.0, 0), (20.0, -5)],
)
def test_bad_policies_are_refused_with_a_reason(threshold: float, window: float) -> None:
    with pytest.raises(IdlePolicyError, match="idle GPU"):
        IdlePolicy(threshold_percent=threshold, window=timedelta(seconds=window))


@given(
    samples=st.lists(
        st.one_of(st.none(), st.floats(min_value=0, max_value=100, allow_nan=False)), min_size=1, max_size=40
    ),
    window_polls=st.integers(min_value=1, max_value=10),
)
def test_idle_means_every_sample_of_the_last_window_was_below_the_threshold(
    samples: list[float | None], window_polls: int
) -> None:
    """One poll a minute; None: the node was not reported. Compared with a direct reading."""
    policy = IdlePolicy(threshold_percent=20.0, window=timedelta(minutes=window_polls))
    t = IdleTracker(policy)
    for i, value in enumerate(samples):
        t.observe({} if value is None else {"n": value}, now=at(i))
        # the direct reading: the polls from i - window_polls to i all reported and were below 20
        lookback = samples[max(0, i - window_polls) : i + 1]
        expected = i >= window_polls and all(v is not None and v < 20.0 for v in lookback)
        assert ("n" in t.idle(now=at(i))) == expected, (i, samples)
