"""Kubernetes resource quantities as exact integers.

Every quantity is held as an ``int`` counting **milli-units** (thousandths of the base unit), for
every resource alike: ``cpu: "100m"`` is ``100``, ``cpu: 2`` is ``2000``, ``memory: 16Gi`` is
``16 * 2**30 * 1000``, ``pods: 110`` is ``110000``, ``nvidia.com/gpu: 1`` is ``1000``. One unit
for all resources keeps arithmetic uniform and exact (Python integers do not overflow); nothing
goes through a float. Values finer than a milli-unit (``1u``, ``0.0001``) are rounded up (away
from zero) to the next milli-unit, like Kubernetes' ``MilliValue()``. The grammar and the exact
value come from :mod:`api.quantity`, which the API models validate with too.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from api.quantity import NANO, QuantityError, parse_nano

__all__ = [
    "MILLI",
    "QuantityError",
    "format_human",
    "format_quantity",
    "format_resource",
    "is_binary_resource",
    "parse_quantity",
]

MILLI: Final = 1000
"""Milli-units per base unit: ``parse_quantity("1") == MILLI``."""

_NANO_PER_MILLI: Final = NANO // MILLI
_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_BINARY_RESOURCES: Final = ("memory", "ephemeral-storage", "storage")


def parse_quantity(value: str | int | float) -> int:
    """Parse a Kubernetes quantity into milli-units, exactly.

    Accepts what the apiserver accepts (``"100m"``, ``"1.5"``, ``"16Gi"``, ``"2G"``, ``"1e3"``,
    ``"+1"``; the grammar is :mod:`api.quantity`'s) and JSON numbers, which read as the text they
    are written as. Raises :class:`QuantityError` for anything else.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return value * MILLI
    if isinstance(value, float):
        # repr() is the shortest string that round-trips, so 0.1 means one tenth, not 0.1000000000000000055.
        return _parse_text(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    return _parse_text(value)


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> int:
    """Quantity strings repeat ("500m", "16Gi" on every pod of a deployment): parse each once.

    Finer than a milli-unit rounds away from zero, like Kubernetes' ``MilliValue()``.
    """
    nano = parse_nano(value)
    milli = -((-abs(nano)) // _NANO_PER_MILLI)
    return milli if nano >= 0 else -milli


def is_binary_resource(name: str) -> bool:
    """Resources conventionally written with binary suffixes (``Gi``): memory, storage, hugepages."""
    return name in _BINARY_RESOURCES or name.startswith("hugepages-")


def format_quantity(milli: int, *, binary: bool = False) -> str:
    """Format milli-units back to a canonical Kubernetes quantity.

    Fractions of a unit come out as ``"<n>m"``. Whole numbers come out plain (``"2"``), or with
    the largest exact binary suffix when ``binary`` (``"16Gi"``, ``"1536Mi"``).
    ``parse_quantity(format_quantity(x)) == x`` for every int ``x``.
    """
    if milli % MILLI:
        return f"{milli}m"
    whole = milli // MILLI
    if binary and whole:
        for suffix, factor in reversed(_BINARY.items()):
            if whole % factor == 0:
                return f"{whole // factor}{suffix}"
    return str(whole)


def format_resource(name: str, milli: int) -> str:
    """Format a quantity of resource ``name`` the way kubectl users expect (binary for memory)."""
    return format_quantity(milli, binary=is_binary_resource(name))


def format_human(name: str, milli: int) -> str:
    """A short, readable form for messages and tables: ``"4"``, ``"500m"``, ``"16Gi"``, ``"1.5Gi"``."""
    if not is_binary_resource(name):
        return format_quantity(milli)
    exact = format_quantity(milli, binary=True)
    if not exact[-1].isdigit() or milli % MILLI:
        return exact
    whole = milli // MILLI
    for suffix, factor in reversed(_BINARY.items()):
        if whole >= factor:
            return f"{whole / factor:.1f}".rstrip("0").rstrip(".") + suffix
    return exact
