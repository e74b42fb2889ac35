"""The pure pieces of the dashboard picture: the phase marks read from the run's file, kept apart and
explained; series broken where Prometheus has no value."""

from __future__ import annotations

import json
import math

import pytest

from hack.dashboard_figure import (
    Mark,
    all_zero,
    caption,
    dump_marks,
    isolated,
    label_rows,
    parse_marks,
    with_gaps,
    within,
)


def test_a_marks_file_reads_back_what_was_written_oldest_first() -> None:
    marks = [Mark(at=1_800_000_100.5, label="gang admitted"), Mark(at=1_800_000_040.0, label="burst")]
    assert parse_marks(dump_marks(marks)) == [marks[1], marks[0]]


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ('{"at": 1, "label": "x"}', "JSON list"),
        ('[{"at": 1}]', "mark 0: wants exactly the keys"),
        ('[{"at": 1, "label": "x", "colour": "red"}]', "mark 0: wants exactly the keys"),
        ('[{"at": 1, "label": "ok"}, {"at": "noon", "label": "x"}]', "mark 1: 'at' must be a Unix time"),
        ('[{"at": true, "label": "x"}]', "'at' must be a Unix time"),
        ('[{"at": 1, "label": "  "}]', "'label' must be a non-empty text"),
    ],
)
def test_a_malformed_marks_file_names_the_entry_at_fault(text: str, fault: str) -> None:
    with pytest.raises(ValueError, match=fault):
        parse_marks(text)


def test_infinite_times_are_refused() -> None:
    with pytest.raises(ValueError, match="Unix time"):
        parse_marks(json.dumps([{"at": float("inf"), "label": "x"}]))


def test_only_the_marks_inside_the_window_are_drawn() -> None:
    marks = [Mark(at=t, label=str(t)) for t in (5.0, 10.0, 60.0, 100.0, 101.0)]
    assert [m.at for m in within(marks, 10.0, 100.0)] == [10.0, 60.0, 100.0]


def test_marks_far_apart_share_the_top_row() -> None:
    marks = [Mark(at=t, label="x") for t in (0.0, 100.0, 200.0, 300.0)]
    assert label_rows(marks, start=0.0, end=400.0) == [0, 0, 0, 0]


def test_close_marks_step_down_and_free_rows_are_reused() -> None:
    # 0 and 10 s are 2.5 % of a 400 s window apart: the second goes a row down; at 15 s the third is
    # close to both; at 200 s the top row is free again, and 205 s steps down to row 1, free again too
    marks = [Mark(at=t, label="x") for t in (0.0, 10.0, 15.0, 200.0, 205.0)]
    assert label_rows(marks, start=0.0, end=400.0) == [0, 1, 2, 0, 1]


def test_the_caption_numbers_the_marks_with_their_time_into_the_window() -> None:
    marks = [Mark(at=1040.0, label="burst"), Mark(at=1125.4, label="gang admitted")]
    assert caption(marks, start=1000.0) == ["1 +0:40 burst   2 +2:05 gang admitted"]


def test_the_caption_wraps_between_entries_never_inside_one() -> None:
    marks = [Mark(at=float(i), label="a phase of the run") for i in range(4)]
    lines = caption(marks, start=0.0, width=60)
    assert lines == [
        "1 +0:00 a phase of the run   2 +0:01 a phase of the run",
        "3 +0:02 a phase of the run   4 +0:03 a phase of the run",
    ]
    assert caption([Mark(at=0.0, label="x" * 80)], start=0.0, width=60) == ["1 +0:00 " + "x" * 80]


def _shape(points: list[tuple[float, float]]) -> list[tuple[float, str]]:
    return [(t, "gap" if math.isnan(v) else str(v)) for t, v in points]


def test_a_series_breaks_where_a_step_has_no_sample_or_a_nan() -> None:
    points = [(0.0, 1.0), (2.0, 1.0), (10.0, 3.0), (12.0, math.nan), (14.0, 4.0)]
    assert _shape(with_gaps(points, step=2.0)) == [
        (0.0, "1.0"),
        (2.0, "1.0"),
        (4.0, "gap"),  # nothing from 4 to 8: the line must not run from 2 to 10
        (10.0, "3.0"),
        (12.0, "gap"),
        (14.0, "4.0"),
    ]


def test_a_series_with_every_step_is_left_as_it_is() -> None:
    points = [(float(t), 1.0) for t in range(0, 10, 2)]
    assert with_gaps(points, step=2.0) == points
    assert with_gaps([], step=2.0) == []


def test_a_sample_alone_between_gaps_is_a_dot() -> None:
    gap = math.nan
    points = [(0.0, 5.0), (2.0, gap), (4.0, 6.0), (6.0, 7.0), (8.0, gap), (10.0, 8.0)]
    assert isolated(points) == [(0.0, 5.0), (10.0, 8.0)]
    assert isolated([(0.0, 1.0)]) == [(0.0, 1.0)]


def test_a_series_that_never_leaves_zero_is_told_apart() -> None:
    assert all_zero([(0.0, 0.0), (2.0, math.nan), (4.0, 0.0)])
    assert not all_zero([(0.0, 0.0), (2.0, 0.5)])
