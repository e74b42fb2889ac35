"""Budget arithmetic and cron windows: what a NodePool's disruption budgets allow, and when."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.disruption.budgets import (
    DEFAULT_BUDGETS,
    Budget,
    BudgetError,
    allowance,
    count_pool,
    node_limit,
    parse_budgets,
)

MONDAY = datetime(2026, 3, 2, tzinfo=UTC)  # 2026-03-02 is a Monday


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return MONDAY + timedelta(days=day, hours=hour, minutes=minute)


@pytest.mark.parametrize(
    ("nodes", "total", "limit"),
    [
        ("10%", 0, 0),
        ("10%", 1, 1),
        ("10%", 3, 1),
        ("10%", 10, 1),
        ("10%", 11, 2),
        ("50%", 5, 3),
        ("100%", 7, 7),
        ("0%", 7, 0),
        ("0", 7, 0),
        ("5", 3, 5),
    ],
)
def test_percentages_round_up_and_counts_are_counts(nodes: str, total: int, limit: int) -> None:
    assert node_limit(nodes, total=total) == limit


@given(percent=st.integers(0, 100), total=st.integers(0, 10_000))
def test_a_percentage_is_the_ceiling_of_its_share(percent: int, total: int) -> None:
    assert node_limit(f"{percent}%", total=total) == math.ceil(percent * total / 100)


@pytest.mark.parametrize("nodes", ["-1", "101%", "ten", "1.5", "%"])
def test_bad_node_counts_are_refused(nodes: str) -> None:
    with pytest.raises(BudgetError):
        node_limit(nodes, total=10)


def test_no_budgets_field_means_ten_percent_but_an_empty_list_means_no_limit() -> None:
    assert parse_budgets({}) == DEFAULT_BUDGETS
    assert parse_budgets(None) == DEFAULT_BUDGETS
    assert (Budget(nodes="10%"),) == DEFAULT_BUDGETS
    assert parse_budgets({"budgets": []}) == ()
    room = allowance((), reason="Empty", total=100, disrupting=50, now=MONDAY)
    assert room.allowed is None
    assert room.permits(1000)


def test_budgets_are_parsed_with_schedule_duration_and_reasons() -> None:
    [budget] = parse_budgets(
        {"budgets": [{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h", "reasons": ["Drifted"]}]}
    )
    assert budget == Budget(
        nodes="0", schedule="0 9 * * mon-fri", duration=timedelta(hours=8), reasons=frozenset({"Drifted"})
    )


@pytest.mark.parametrize(
    "raw",
    [
        {"nodes": "1", "schedule": "not a cron", "duration": "1h"},
        {"nodes": "1", "schedule": "0 9 * * *"},
        {"nodes": "1", "duration": "1h"},
        {"nodes": "1", "reasons": ["Bored"]},
        {"nodes": "x"},
    ],
)
def test_unreadable_budgets_are_errors_naming_the_entry(raw: dict[str, object]) -> None:
    with pytest.raises(BudgetError, match=r"budgets\[0\]"):
        parse_budgets({"budgets": [raw]})


def test_the_most_restrictive_active_budget_wins() -> None:
    budgets = (Budget(nodes="50%"), Budget(nodes="3"), Budget(nodes="20%"))
    room = allowance(budgets, reason="Underutilized", total=10, disrupting=0, now=MONDAY)
    assert (room.allowed, room.limit, room.budget) == (2, 2, Budget(nodes="20%"))


def test_nodes_being_disrupted_or_not_ready_count_against_the_budget() -> None:
    room = allowance((Budget(nodes="3"),), reason="Empty", total=10, disrupting=2, now=MONDAY)
    assert room.allowed == 1
    assert room.permits(1)
    assert not room.permits(2)
    full = allowance((Budget(nodes="3"),), reason="Empty", total=10, disrupting=5, now=MONDAY)
    assert full.allowed == 0
    assert "3 of 10 nodes" in full.explain()
    assert "5 are already" in full.explain()


def test_pool_counts_take_deleting_and_not_ready_nodes() -> None:
    # (disrupting, not ready) per initialized node
    counted = count_pool([(False, False), (True, False), (False, True), (True, True), (False, False)])
    assert (counted.total, counted.disrupting) == (5, 3)


def test_a_budget_applies_only_to_the_reasons_it_lists() -> None:
    budgets = (Budget(nodes="0", reasons=frozenset({"Drifted", "Expired"})), Budget(nodes="2"))
    assert allowance(budgets, reason="Drifted", total=10, disrupting=0, now=MONDAY).allowed == 0
    assert allowance(budgets, reason="Empty", total=10, disrupting=0, now=MONDAY).allowed == 2


def test_a_cron_window_is_active_from_its_start_for_its_duration() -> None:
    office = Budget(nodes="0", schedule="0 9 * * 1-5", duration=timedelta(hours=8))
    assert office.active(at(0, 9))  # opens exactly at 09:00
    assert office.active(at(0, 12))
    assert office.active(at(0, 16, 59))
    assert not office.active(at(0, 17))  # [09:00, 17:00)
    assert not office.active(at(0, 8, 59))
    assert not office.active(at(5, 10))  # Saturday
    assert office.window(at(2, 10)) == (at(2, 9), at(2, 17))


def test_outside_its_window_a_budget_does_not_restrict() -> None:
    budgets = (Budget(nodes="0", schedule="0 9 * * 1-5", duration=timedelta(hours=8)), Budget(nodes="100%"))
    assert allowance(budgets, reason="Empty", total=4, disrupting=0, now=at(0, 10)).allowed == 0
    assert allowance(budgets, reason="Empty", total=4, disrupting=0, now=at(0, 20)).allowed == 4
    assert allowance(budgets, reason="Empty", total=4, disrupting=0, now=at(6, 10)).allowed == 4


def test_macros_and_windows_that_cross_midnight() -> None:
    nightly = Budget(nodes="5", schedule="0 22 * * *", duration=timedelta(hours=4))
    assert nightly.active(at(0, 23))
    assert nightly.active(at(1, 1, 59))
    assert not nightly.active(at(1, 2))
    daily = Budget(nodes="5", schedule="@daily", duration=timedelta(minutes=30))
    assert daily.active(at(3, 0, 10))
    assert not daily.active(at(3, 0, 30))
    always = Budget(nodes="5", schedule="@hourly", duration=timedelta(hours=2))
    assert all(always.active(at(0, h, 17)) for h in range(24))


@given(
    limits=st.lists(st.integers(0, 20), min_size=1, max_size=5),
    total=st.integers(0, 50),
    disrupting=st.integers(0, 50),
)
def test_allowance_is_never_negative_and_never_above_any_active_budget(
    limits: list[int], total: int, disrupting: int
) -> None:
    budgets = tuple(Budget(nodes=str(n)) for n in limits)
    room = allowance(budgets, reason="Empty", total=total, disrupting=disrupting, now=MONDAY)
    assert room.allowed is not None
    assert 0 <= room.allowed <= min(limits)
    assert room.allowed == max(0, min(limits) - disrupting)
