"""Kubernetes resource quantities: the one grammar and the one exact reading of it.

The API models (CRD validation) and the solver both read quantities through this module, so a
string is a quantity for one exactly when it is for the other. The grammar and the value are those
of apimachinery's ``resource.ParseQuantity``::

    quantity  ::= [sign] number [suffix]
    sign      ::= "+" | "-"
    number    ::= digits | digits "." | digits "." digits | "." digits
    suffix    ::= binary | decimal | exponent
    binary    ::= Ki | Mi | Gi | Ti | Pi | Ei                (powers of 1024)
    decimal   ::= n | u | m | k | M | G | T | P | E          (powers of 1000)
    exponent  ::= ("e" | "E") [sign] digits                  (a power of ten, integers only)

No white space, no other suffix (``K``, ``Gb``, ``mi``), no fractional exponent (``1e1.5``).
A non-zero value finer than a nano-unit rounds away from zero to one nano-unit, as Kubernetes does.

Departures, all outside anything a cluster holds: ParseQuantity reads a bare sign, dot or suffix
(``+``, ``.``, ``Gi``) as zero (kubernetes/apimachinery#165), which is rejected here; ParseQuantity
caps binary-suffixed values at 2^63-1, which is not done here (values stay exact); and
:func:`parse_nano` refuses a value of 10^1000 or more, one with more than 1000 significant digits,
or an exponent beyond 64 bits, instead of holding it as an arbitrary-precision decimal (the
patterns, and so the CRDs, still match such strings: they are refused when read, not validated).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

NUMBER_PATTERN: Final = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)"
SUFFIX_PATTERN: Final = r"([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)"
QUANTITY_PATTERN: Final = rf"^[+-]?{NUMBER_PATTERN}{SUFFIX_PATTERN}?$"
"""Any quantity, signed or not: ``500m``, ``16Gi``, ``-1``, ``1e3``. RE2-compatible."""
NON_NEGATIVE_QUANTITY_PATTERN: Final = rf"^\+?{NUMBER_PATTERN}{SUFFIX_PATTERN}?$"
"""A quantity without a minus sign (what the CRDs accept for requests, limits and capacity)."""

NANO: Final = 10**9
"""Nano-units per base unit: ``parse_nano("1") == NANO``."""

_QUANTITY_RE: Final = re.compile(QUANTITY_PATTERN)
_NON_NEGATIVE_RE: Final = re.compile(NON_NEGATIVE_QUANTITY_PATTERN)
_BINARY_POWERS: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_EXPONENTS: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_DIGITS: Final = 1000
"""A value must be below 10**_MAX_DIGITS base units (a guard against ``1e999999999``)."""
_INT64_MAX: Final = 2**63 - 1
"""ParseQuantity reads the exponent as a 64-bit integer: a longer one is not a quantity."""


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity."""


def is_quantity(text: str) -> bool:
    """Whether ``text`` matches the quantity grammar (any sign)."""
    return _QUANTITY_RE.fullmatch(text) is not None


def is_non_negative_quantity(text: str) -> bool:
    """Whether ``text`` matches the quantity grammar without a minus sign."""
    return _NON_NEGATIVE_RE.fullmatch(text) is not None


def _ceil_div(numerator: int, denominator: int) -> int:
    return -((-numerator) // denominator)


@lru_cache(maxsize=4096)
def parse_nano(text: str) -> int:
    """The value of a quantity string in nano-units, exactly (``"500m"`` gives ``500_000_000``).

    A non-zero remainder below one nano-unit rounds away from zero. Raises :class:`QuantityError`
    for anything that is not a quantity. Cached: the same strings recur on every pod of a workload.
    """
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity (expected e.g. 100m, 1.5, 16Gi, 2G, 1e3)")
    whole, _, fraction = match.group(1).partition(".")
    suffix = match.group(3) or ""
    negative = text[0] == "-"
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return 0
    exponent = -len(fraction)
    significant = digits.rstrip("0")
    exponent += len(digits) - len(significant)
    digits = significant
    if len(digits) > _MAX_DIGITS:
        raise QuantityError(f"{text!r}: too many digits")
    binary = 0
    if suffix in _BINARY_POWERS:
        binary = _BINARY_POWERS[suffix]
    elif suffix in _DECIMAL_EXPONENTS:
        exponent += _DECIMAL_EXPONENTS[suffix]
    else:
        power = suffix[1:].lstrip("+-").lstrip("0") or "0"
        if len(power) > 19 or int(power) > _INT64_MAX:
            raise QuantityError(f"{text!r}: exponent out of range")
        exponent += -int(power) if suffix[1] == "-" else int(power)
    if len(digits) + exponent + binary * 0.302 > _MAX_DIGITS:  # log10(2) < 0.302
        raise QuantityError(f"{text!r}: too large")
    shift = exponent + 9  # to nano-units
    if shift >= 0:
        scale: int = 10**shift
        magnitude = int(digits) * scale << binary
    elif -shift > len(digits) + binary:
        magnitude = 1  # far below one nano-unit (2**binary < 10**binary): rounds up to one
    else:
        magnitude = _ceil_div(int(digits) << binary, 10**-shift)
    return -magnitude if negative else magnitude
