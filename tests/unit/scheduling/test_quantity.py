from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scheduling.quantity import (
    QuantityError,
    format_human,
    format_quantity,
    format_resource,
    parse_quantity,
)
from controller.scheduling.resources import Resources


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("100m", 100),
        ("1", 1000),
        ("1.5", 1500),
        ("0.1", 100),
        (".5", 500),
        ("16Gi", 16 * 2**30 * 1000),
        ("1Ki", 1024 * 1000),
        ("2G", 2 * 10**9 * 1000),
        ("1e3", 10**6),
        ("1E-3", 1),
        ("+4", 4000),
        ("1.5Gi", 3 * 2**29 * 1000),
        ("1u", 1),  # below a milli-unit rounds up
        ("1n", 1),
        ("0", 0),
        ("110", 110_000),
    ],
)
def test_parses_kubernetes_quantities_exactly(text: str, milli: int) -> None:
    assert parse_quantity(text) == milli


def test_parses_json_numbers_without_float_error() -> None:
    assert parse_quantity(2) == 2000
    assert parse_quantity(0.1) == 100
    assert parse_quantity(1.005) == 1005


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "Gi", "1Gb", "1 Gi", "--1", "1e"])
def test_rejects_garbage(bad: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_formats_back_canonically() -> None:
    assert format_quantity(100) == "100m"
    assert format_quantity(2000) == "2"
    assert format_quantity(16 * 2**30 * 1000, binary=True) == "16Gi"
    assert format_quantity(1536 * 2**20 * 1000, binary=True) == "1536Mi"
    assert format_resource("memory", 2**30 * 1000) == "1Gi"
    assert format_resource("nvidia.com/gpu", 8000) == "8"
    assert format_human("memory", 3 * 2**29 * 1000) == "1536Mi"
    assert format_human("cpu", 95690) == "95690m"


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**22), st.booleans())
def test_format_parse_round_trip(milli: int, binary: bool) -> None:
    assert parse_quantity(format_quantity(milli, binary=binary)) == milli


def test_resources_arithmetic_and_fit() -> None:
    a = Resources.parse({"cpu": "1500m", "memory": "1Gi"})
    b = Resources.parse({"cpu": "500m", "nvidia.com/gpu": 1})
    assert (a + b).get("cpu") == 2000
    assert (a - a) == Resources()
    assert Resources({"cpu": 0}) == Resources()
    assert b.fits_in(Resources.parse({"cpu": 1, "nvidia.com/gpu": 1}))
    assert not b.fits_in(Resources.parse({"cpu": 1}))
    assert b.exceeding(Resources.parse({"cpu": 1})) == ("nvidia.com/gpu",)
    assert a.to_quantities() == {"cpu": "1500m", "memory": "1Gi"}
    assert hash(Resources.parse({"cpu": "1"})) == hash(Resources.parse({"cpu": 1}))
