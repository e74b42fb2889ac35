"""Schedule windows on the fake clock: cron in UTC, across midnight and the week's end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from api.v1.capacity import Buffer, Capacity, CapacitySchedule
from controller.capacity.buffer import buffer_needs
from controller.capacity.schedule import active_buffers, is_open, next_change, window
from controller.clock import FakeClock


def at(day: int, hour: int, minute: int = 0) -> datetime:
    """2026-03-02 is a Monday: day 0 = Monday ... day 6 = Sunday, day 7 = the next Monday."""
    return datetime(2026, 3, 2, tzinfo=UTC) + timedelta(days=day, hours=hour, minutes=minute)


NIGHTLY = CapacitySchedule(schedule="0 22 * * *", duration="4h", buffer=Buffer(nodes=3))
WEEKEND = CapacitySchedule(schedule="0 20 * * 0", duration="6h", buffer=Buffer(gpus=16))  # Sunday 20:00


async def test_a_window_across_midnight_is_open_until_its_duration_has_passed() -> None:
    clock = FakeClock(at(0, 21, 59))
    assert not is_open(NIGHTLY, clock.now())
    await clock.advance(60)
    assert is_open(NIGHTLY, clock.now())  # 22:00 opens it
    await clock.advance(3 * 3600)
    assert clock.now() == at(1, 1, 0)
    assert is_open(NIGHTLY, clock.now())  # 01:00 the next day: still open
    await clock.advance(3600 - 1)
    assert is_open(NIGHTLY, clock.now())
    await clock.advance(1)
    assert not is_open(NIGHTLY, clock.now())  # 02:00 closes it


async def test_a_sunday_window_stays_open_into_monday_across_the_week_boundary() -> None:
    clock = FakeClock(at(6, 19, 0))
    assert not is_open(WEEKEND, clock.now())
    await clock.advance(3600)
    assert is_open(WEEKEND, clock.now())
    await clock.advance(5 * 3600)  # Monday 01:00 of the next week
    assert clock.now().weekday() == 0
    assert is_open(WEEKEND, clock.now())
    assert window(WEEKEND, clock.now()) == (at(6, 20), at(7, 2))
    await clock.advance(3600)
    assert not is_open(WEEKEND, clock.now())
    # and the next week it opens again on Sunday evening, not earlier
    assert not is_open(WEEKEND, at(13, 19, 59))
    assert is_open(WEEKEND, at(13, 20))


def test_a_window_is_read_in_utc_whatever_the_zone_of_the_instant() -> None:
    from zoneinfo import ZoneInfo

    berlin = at(0, 22, 30).astimezone(ZoneInfo("Europe/Berlin"))  # 23:30 local
    assert is_open(NIGHTLY, berlin)
    assert not is_open(NIGHTLY, at(0, 21, 30).astimezone(ZoneInfo("Asia/Tokyo")))


def test_next_change_is_the_next_opening_or_closing() -> None:
    assert next_change([NIGHTLY], at(0, 12)) == at(0, 22)
    assert next_change([NIGHTLY], at(0, 23)) == at(1, 2)
    assert next_change([NIGHTLY, WEEKEND], at(6, 21)) == at(6, 22)
    assert next_change([], at(0, 0)) is None


def test_the_static_buffer_and_open_windows_of_one_kind_take_the_largest() -> None:
    capacity = Capacity(
        buffer=Buffer(nodes=1),
        schedules=[
            NIGHTLY,
            CapacitySchedule(schedule="30 8 * * 1-5", duration="10h", buffer=Buffer(nodes=2)),
        ],
    )
    assert [(a.source, a.buffer.nodes) for a in active_buffers(capacity, at(0, 12))] == [
        ("buffer", 1),
        ("schedules[1]", 2),
    ]
    assert [(n.kind, n.amount) for n in buffer_needs(capacity, at(0, 12))] == [("nodes", 2)]
    assert [(n.kind, n.amount) for n in buffer_needs(capacity, at(0, 23))] == [("nodes", 3)]
    assert [(n.kind, n.amount) for n in buffer_needs(capacity, at(5, 12))] == [("nodes", 1)]  # Saturday
    assert buffer_needs(Capacity(schedules=[NIGHTLY]), at(0, 12)) == []


def test_buffers_of_different_kinds_are_kept_side_by_side() -> None:
    capacity = Capacity(buffer=Buffer(nodes=1), schedules=[WEEKEND])
    needs = buffer_needs(capacity, at(6, 21))
    assert sorted((n.kind, n.amount) for n in needs) == [("gpus", 16), ("nodes", 1)]


@given(
    hour=st.integers(0, 23),
    minute=st.integers(0, 59),
    hours=st.integers(1, 24),
    offset=st.integers(0, 7 * 24 * 60),
)
def test_a_daily_window_is_open_exactly_within_duration_of_its_latest_opening(
    hour: int, minute: int, hours: int, offset: int
) -> None:
    schedule = CapacitySchedule(schedule=f"{minute} {hour} * * *", duration=f"{hours}h", buffer=Buffer(nodes=1))
    now = at(0, 0) + timedelta(minutes=offset)
    opening = now.replace(hour=hour, minute=minute, second=0, microsecond=0)  # the latest opening, by hand
    if opening > now:
        opening -= timedelta(days=1)
    assert is_open(schedule, now) == (now < opening + timedelta(hours=hours))
