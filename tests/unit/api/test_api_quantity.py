"""The one quantity grammar (api.quantity), and the API models and the solver agreeing on it.

The edge cases here are where the API's and the solver's parsers disagreed before they became one;
each now behaves as apimachinery's resource.ParseQuantity does.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.quantity import NON_NEGATIVE_QUANTITY_PATTERN, QuantityError, is_non_negative_quantity, is_quantity, parse_nano
from api.v1 import NodePool, parse_quantity
from api.v1.types import QUANTITY_PATTERN
from controller.scheduling.quantity import parse_quantity as parse_milli


def limits_valid(value: str | int) -> bool:
    manifest = {
        "metadata": {"name": "p"},
        "spec": {
            "limits": {"cpu": value},
            "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "d"}}},
        },
    }
    try:
        NodePool.model_validate(manifest)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("text", "nano"),
    [
        ("0", 0),
        ("500m", 500_000_000),
        ("1.5", 1_500_000_000),
        (".5", 500_000_000),
        ("1.", 10**9),
        ("007", 7 * 10**9),
        ("+4", 4 * 10**9),
        ("-4", -4 * 10**9),
        ("-.5", -500_000_000),
        ("16Gi", 16 * 2**30 * 10**9),
        ("1.5Gi", 3 * 2**29 * 10**9),
        ("1E", 10**27),  # E alone is exa
        ("2E3", 2000 * 10**9),  # E with digits is an exponent
        ("1e+3", 10**12),
        ("1e-3", 10**6),
        ("1n", 1),
        ("0e99", 0),
    ],
)
def test_quantities_read_as_kubernetes_reads_them(text: str, nano: int) -> None:
    assert parse_nano(text) == nano


@pytest.mark.parametrize(
    "text",
    ["", "abc", "Gi", "k", ".", "+", "-", "1K", "1Gb", "0.1mi", "1i", "1e", "1e+", "--1", "1.2.3", "1 Gi"],
)
def test_what_is_not_a_quantity(text: str) -> None:
    assert not is_quantity(text)
    with pytest.raises(QuantityError):
        parse_nano(text)


# --- where the two parsers disagreed ------------------------------------------------------------


@pytest.mark.parametrize("text", ["1e1.5", "1e.5", "2E3.", "1e-1.5"])
def test_a_fractional_exponent_is_not_a_quantity(text: str) -> None:
    """The API accepted these (the documented grammar's form); ParseQuantity and the solver do not."""
    assert not limits_valid(text)
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)
    with pytest.raises(QuantityError):
        parse_milli(text)


@pytest.mark.parametrize("text", [" 1", "1 ", "\t500m", "1\n", " 16Gi "])
def test_white_space_is_not_part_of_a_quantity(text: str) -> None:
    """The solver stripped white space; ParseQuantity and the API reject it."""
    assert not limits_valid(text)
    with pytest.raises(QuantityError):
        parse_milli(text)


@pytest.mark.parametrize(("text", "milli"), [("1e31", 10**34), ("1e100", 10**103), ("1e-31", 1), ("1e-100", 1)])
def test_exponents_beyond_thirty_are_quantities(text: str, milli: int) -> None:
    """The solver refused exponents beyond +-30; the grammar and ParseQuantity accept them. The
    models refuse values above 2^63-1 (issue 14): a quantity, but no sane limit or request."""
    assert is_quantity(text)
    assert parse_milli(text) == milli
    assert limits_valid(text) == (milli <= (2**63 - 1) * 1000)


@pytest.mark.parametrize("value", ["1e400", "1e19", "8Ei", "9223372036854775808", 2**63, "1e99999"])
def test_values_above_int64_are_refused_by_the_models(value: str | int) -> None:
    assert not limits_valid(value)
    with pytest.raises(ValueError, match="must be at most 2\\^63-1"):
        NodePool.model_validate(
            {
                "metadata": {"name": "p"},
                "spec": {
                    "limits": {"cpu": value},
                    "template": {
                        "spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "d"}}
                    },
                },
            }
        )


@pytest.mark.parametrize("value", ["7Ei", "9223372036854775807", 2**63 - 1, "1e18"])
def test_values_up_to_int64_are_accepted(value: str | int) -> None:
    assert limits_valid(value)


def test_values_finer_than_a_nano_unit_round_up_to_one() -> None:
    """The API's exact value kept 1e-10; ParseQuantity rounds every non-zero value up to 1n."""
    assert parse_quantity("1e-10") == Decimal("1e-9")
    assert parse_quantity("0.0000000001") == Decimal("1e-9")
    assert parse_nano("1.0000000001") == 10**9 + 1


def test_negative_values_finer_than_a_milli_unit_round_away_from_zero() -> None:
    """The solver rounded -1u up to 0; Kubernetes' MilliValue() gives -1m."""
    assert parse_milli("-1u") == -1
    assert parse_milli("-1500u") == -2
    assert parse_milli(-0.0001) == -1


def test_binary_suffixes_multiply_exactly() -> None:
    """The API's Decimal arithmetic rounded to 28 digits; the value is exact now."""
    digits = 123456789012345678901234567891  # 30 digits
    assert parse_quantity(f"{digits}Ki") == Decimal(digits * 1024)
    assert parse_milli(f"{digits}Ki") == digits * 1024 * 1000
    assert parse_milli("1.000000000000000000000000001Ei") == 2**60 * 1000 + 1  # 2**60 / 10**27 of a unit


def test_absurd_exponents_are_refused_not_computed() -> None:
    for text in ("1e99999", "1e99999999999999999999", "1" + "0" * 1001):
        assert is_quantity(text)
        with pytest.raises(QuantityError):
            parse_nano(text)
    assert parse_nano("1e-99999999999") == 1


def test_negative_quantities_are_quantities_but_not_valid_api_values() -> None:
    assert is_quantity("-1")
    assert not is_non_negative_quantity("-1")
    assert not limits_valid("-1")
    assert not limits_valid("-0")
    assert not limits_valid(-1)
    assert parse_milli("-1") == -1000


def test_the_crd_pattern_is_the_shared_grammar_without_a_minus_sign() -> None:
    assert QUANTITY_PATTERN == NON_NEGATIVE_QUANTITY_PATTERN
    assert is_non_negative_quantity("+1e3")
    assert is_non_negative_quantity("1Ei")


_PIECES = st.sampled_from(["", "+", "-", "0", "1", "9", "12", ".", "5", "e", "E", "i", "K", "k", "m", "Gi", "n", " "])


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=6).map("".join))
def test_the_api_and_the_solver_accept_the_same_strings(text: str) -> None:
    """For any string without a minus sign, the NodePool model and the solver agree on it (up to 2^63-1)."""
    milli: int | None = None
    try:
        milli = parse_milli(text)
    except QuantityError as err:
        if "too large" in str(err):
            return  # beyond 10**1000: the solver's one guard, see api.quantity
    if text.startswith("-"):
        assert not limits_valid(text)
        return
    # the models also refuse values above 2^63-1 base units (issue 14); the grammar is the same
    assert limits_valid(text) == (milli is not None and milli <= (2**63 - 1) * 1000)
    if milli is not None and limits_valid(text):
        assert milli - 1 < Fraction(parse_quantity(text)) * 1000 <= milli
