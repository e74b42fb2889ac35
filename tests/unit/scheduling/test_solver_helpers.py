"""The solver's small numeric helpers and its slot index, on their own."""

from __future__ import annotations

import random

from controller.scheduling.solver_model import SlotIndex
from controller.scheduling.solver_numeric import HeapOrder, fit_count, fits, suffix_minima, water_fill


def test_fit_count_is_the_tightest_resource() -> None:
    assert fit_count([10, 7, 100], (2, 3, 1)) == 2
    assert fit_count([1, 7, 100], (2, 3, 1)) == 0


def test_fit_count_of_a_request_for_nothing_is_unbounded() -> None:
    assert fit_count([5, 5], (0, 0)) == 1 << 30


def test_fits_compares_every_dimension() -> None:
    assert fits((1, 2), (1, 2))
    assert not fits((1, 3), (1, 2))


def test_suffix_minima_bound_what_any_later_request_needs() -> None:
    out = suffix_minima([(3, 5), (4, 1), (2, 9)], 2)
    assert out[0] == (2, 1)
    assert out[1] == (2, 1)
    assert out[2] == (2, 9)
    assert min(out[3]) > 10**12


def test_suffix_minima_neighbours_with_equal_bounds_share_one_tuple() -> None:
    out = suffix_minima([(3, 5), (4, 1), (2, 9), (2, 9)], 2)
    assert out[0] is out[1]
    assert out[2] is out[3]
    assert out[1] is not out[2]


def test_heap_order_reads_in_key_order_and_readers_share_what_was_found() -> None:
    rng = random.Random(7)
    items = [f"item-{i}" for i in range(50)]
    keys = [(rng.choice((1.0, 2.0, 0.5)), rng.random(), i) for i in range(50)]
    expected = [items[k[-1]] for k in sorted(keys)]
    order = HeapOrder(items, list(keys))
    first = []
    for item in order:  # a reader that stops early
        first.append(item)
        if len(first) == 5:
            break
    assert first == expected[:5]
    assert list(order) == expected  # a later reader sees every item, in order
    assert list(order) == expected
    assert list(HeapOrder(items, [])) == []


def test_water_fill_raises_the_lowest_zones_first() -> None:
    assert water_fill({"a": 2, "b": 0, "c": 1}, 4, caps=None) == {"a": 1, "b": 2, "c": 1}


def test_water_fill_ties_break_on_zone_name() -> None:
    assert water_fill({"a": 0, "b": 0, "c": 0}, 4, caps=None) == {"a": 2, "b": 1, "c": 1}


def test_water_fill_respects_caps_and_leaves_the_rest() -> None:
    out = water_fill({"a": 0, "b": 0}, 5, caps={"a": 1, "b": 2})
    assert out == {"a": 1, "b": 2}


def test_slot_index_finds_the_slots_with_enough_room() -> None:
    index = SlotIndex([(4, 8), (2, 16), (8, 32)], 2)
    assert index.fitting((3, 8)) == 0b101
    assert index.fitting((1, 16)) == 0b110
    assert index.fitting((9, 1)) == 0
    assert index.fitting((0, 0)) == 0b111


def test_water_fill_ties_go_to_the_least_loaded_zone() -> None:
    out = water_fill({"a": 1, "b": 1, "c": 1}, 2, caps=None, load={"a": 6.0, "b": 5.0, "c": 4.0}, weight=3.0)
    assert out == {"a": 0, "b": 1, "c": 1}


def test_water_fill_load_grows_with_the_pods_it_places() -> None:
    out = water_fill({"a": 0, "b": 0}, 3, caps={"a": 2, "b": 2}, load={"a": 0.0, "b": 1.0}, weight=5.0)
    assert out == {"a": 2, "b": 1}
