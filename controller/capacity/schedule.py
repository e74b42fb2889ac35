"""Which warm buffers apply at an instant: the static ``spec.capacity.buffer`` and every schedule
window open then (cron in UTC, read by croniter as the disruption budgets are). Pure: ``now`` is
passed in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from croniter import croniter

from api.v1.capacity import Buffer, Capacity, CapacitySchedule
from api.v1.types import parse_duration


@dataclass(frozen=True, slots=True)
class ActiveBuffer:
    """A buffer in force now, and where it comes from (``buffer`` or ``schedules[i]``)."""

    buffer: Buffer
    source: str


def window(schedule: CapacitySchedule, now: datetime) -> tuple[datetime, datetime]:
    """The latest window ``[start, end)`` of ``schedule`` that opened at or before ``now`` (UTC)."""
    now = now.astimezone(UTC)
    duration = parse_duration(schedule.duration) or timedelta(0)
    # croniter's get_prev is strictly before its start: nudge so a window opening at `now` counts
    start: datetime = croniter(schedule.schedule, now + timedelta(microseconds=1)).get_prev(datetime)
    return start, start + duration


def is_open(schedule: CapacitySchedule, now: datetime) -> bool:
    """Whether ``now`` falls within ``duration`` after the latest opening of the cron schedule."""
    start, end = window(schedule, now)
    return start <= now.astimezone(UTC) < end


def next_change(schedules: Sequence[CapacitySchedule], now: datetime) -> datetime | None:
    """The next instant after ``now`` at which a window opens or closes (None without schedules)."""
    now = now.astimezone(UTC)
    edges: list[datetime] = []
    for s in schedules:
        _, end = window(s, now)
        if end > now:
            edges.append(end)
        nxt: datetime = croniter(s.schedule, now).get_next(datetime)
        edges.append(nxt)
    return min(edges) if edges else None


def active_buffers(capacity: Capacity | None, now: datetime) -> list[ActiveBuffer]:
    """The static buffer (when set) and the buffers of the windows open at ``now``."""
    if capacity is None:
        return []
    out = [ActiveBuffer(capacity.buffer, "buffer")] if capacity.buffer is not None else []
    out += [ActiveBuffer(s.buffer, f"schedules[{i}]") for i, s in enumerate(capacity.schedules) if is_open(s, now)]
    return out
