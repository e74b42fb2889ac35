"""The pure pieces of hack/render-dashboard.py's picture: a run's phases as marks, and the series
drawn the way Grafana draws them.

Marks are what a run did and when, drawn as numbered vertical lines on every panel, the numbers
explained under the figure's title; a marks file is a JSON list of ``{"at": <Unix seconds>,
"label": <text>}`` (hack/dashboard_run.py writes one). Series break where Prometheus has no value
(``NaN``, or no sample at a step) instead of a line drawn across the gap. No I/O but the text given.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Mark:
    at: float  # Unix time, seconds
    label: str


def parse_marks(text: str) -> list[Mark]:
    """The marks of a marks file, oldest first; ValueError names the entry at fault."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError(f"a marks file is a JSON list of {{'at', 'label'}} objects, not {type(data).__name__}")
    marks: list[Mark] = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or set(entry) != {"at", "label"}:
            raise ValueError(f"mark {i}: wants exactly the keys 'at' and 'label', got {entry!r}")
        at, label = entry["at"], entry["label"]
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
            raise ValueError(f"mark {i}: 'at' must be a Unix time in seconds, got {at!r}")
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"mark {i}: 'label' must be a non-empty text, got {label!r}")
        marks.append(Mark(at=float(at), label=label.strip()))
    return sorted(marks, key=lambda m: m.at)


def with_gaps(points: list[tuple[float, float]], *, step: float) -> list[tuple[float, float]]:
    """A range query's points with a ``NaN`` wherever the series has none (a ``NaN`` value, or more
    than one and a half steps to the next sample), so the line breaks there as Grafana's does."""
    out: list[tuple[float, float]] = []
    for t, v in points:
        if out and t - out[-1][0] > 1.5 * step and not math.isnan(out[-1][1]):
            out.append((out[-1][0] + step, math.nan))
        out.append((t, v))
    return out


def isolated(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points with no value on either side (drawn as dots: a line needs two)."""
    return [
        (t, v)
        for i, (t, v) in enumerate(points)
        if not math.isnan(v)
        and (i == 0 or math.isnan(points[i - 1][1]))
        and (i == len(points) - 1 or math.isnan(points[i + 1][1]))
    ]


def all_zero(points: list[tuple[float, float]]) -> bool:
    """Whether a series never leaves 0 (it is drawn, but named only in a note, not the legend)."""
    return all(v == 0 or math.isnan(v) for _, v in points)


def dump_marks(marks: list[Mark]) -> str:
    return json.dumps([{"at": m.at, "label": m.label} for m in marks], indent=1)


def within(marks: list[Mark], start: float, end: float) -> list[Mark]:
    """The marks the window [start, end] shows."""
    return [m for m in marks if start <= m.at <= end]


def label_rows(marks: list[Mark], *, start: float, end: float, min_gap: float = 0.05) -> list[int]:
    """The row of each mark's number (0 at the top of a panel, 1 under it, ...), so that two marks
    closer than ``min_gap`` of the window's width never put their numbers on one row: each mark
    takes the first row whose last number is far enough to its left. ``marks`` sorted by time."""
    span = max(end - start, 1e-9)
    last_on_row: list[float] = []
    rows: list[int] = []
    for mark in marks:
        x = (mark.at - start) / span
        row = next((r for r, last in enumerate(last_on_row) if x - last >= min_gap), len(last_on_row))
        if row == len(last_on_row):
            last_on_row.append(x)
        else:
            last_on_row[row] = x
        rows.append(row)
    return rows


def caption(marks: list[Mark], *, start: float, width: int = 150) -> list[str]:
    """Lines that explain the numbers, ``1 +0:40 a burst ...   2 +1:45 ...``, times from the
    window's start (minutes:seconds), an entry never split and no line longer than ``width`` unless
    one entry alone is."""

    def clock(seconds: float) -> str:
        whole = max(0, round(seconds))
        return f"+{whole // 60}:{whole % 60:02d}"

    lines: list[str] = []
    for i, mark in enumerate(marks, start=1):
        entry = f"{i} {clock(mark.at - start)} {mark.label}"
        if lines and len(lines[-1]) + 3 + len(entry) <= width:
            lines[-1] += "   " + entry
        else:
            lines.append(entry)
    return lines
