"""Instance types, their offerings, and the (pure) catalog parser.

The catalog format is documented in ``docs/catalog.md``::

    {"instanceTypes": [{"name": "g6.xlarge",
                        "capacity": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1", "pods": "58"},
                        "overhead": {"cpu": "80m", "memory": "893Mi"},
                        "labels": {"kubernetes.io/arch": "amd64", ...},
                        "offerings": [{"zone": "us-east-1a", "capacityType": "on-demand",
                                       "price": 0.805, "available": true}, ...]}]}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from api.v1.types import MAX_QUANTITY
from controller.scheduling.frozen import FrozenLabels, freeze
from controller.scheduling.labels import LABEL_INSTANCE_TYPE
from controller.scheduling.quantity import QuantityError
from controller.scheduling.resources import EMPTY, PODS, Resources

CAPACITY_TYPES: Final = ("spot", "on-demand", "reserved")
DEFAULT_PODS: Final = 110


@dataclass(frozen=True, slots=True)
class Offering:
    """One way to buy an instance type: in a zone, with a capacity type, at a price per hour."""

    zone: str
    capacity_type: str
    price: float
    available: bool = True


@dataclass(frozen=True, slots=True)
class InstanceType:
    """A machine shape. ``allocatable`` is ``capacity - overhead`` (never negative)."""

    name: str
    capacity: Resources
    overhead: Resources = EMPTY
    labels: Mapping[str, str] = field(default_factory=FrozenLabels)
    offerings: tuple[Offering, ...] = ()
    allocatable: Resources = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", freeze(self.labels))
        if self.labels.get(LABEL_INSTANCE_TYPE) != self.name:
            merged = dict(self.labels)
            merged[LABEL_INSTANCE_TYPE] = self.name
            object.__setattr__(self, "labels", FrozenLabels(merged))
        object.__setattr__(self, "allocatable", (self.capacity - self.overhead).clamp())

    def available_offerings(self) -> tuple[Offering, ...]:
        return tuple(o for o in self.offerings if o.available)

    def cheapest_price(self) -> float | None:
        prices = [o.price for o in self.offerings if o.available]
        return min(prices) if prices else None


class CatalogError(ValueError):
    """The catalog does not follow the documented format; the message names the entry and field.

    ``path``: where the problem is, for the reader to name its line (set for unknown fields)."""

    def __init__(self, message: str, *, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.path = path


CATALOG_FIELDS: Final = frozenset({"instanceTypes"})
INSTANCE_TYPE_FIELDS: Final = frozenset({"name", "capacity", "overhead", "labels", "offerings"})
OFFERING_FIELDS: Final = frozenset({"zone", "capacityType", "price", "available"})


def _refuse_unknown(data: Mapping[Any, Any], known: frozenset[str], where: str, path: tuple[str | int, ...]) -> None:
    """A field the format does not have is an error (strict decoding, as kubectl's), not ignored."""
    for key in data:
        if key not in known:
            raise CatalogError(
                f'{where}: unknown field "{key}" (expected {", ".join(sorted(known))})', path=(*path, str(key))
            )


def _where(index: int, name: object) -> str:
    return f"instanceTypes[{index}]" + (f" ({name})" if isinstance(name, str) and name else "")


def _parse_resources(value: Any, where: str) -> Resources:
    if value is None:
        return Resources()
    if not isinstance(value, Mapping):
        raise CatalogError(f"{where}: must be an object of resource name -> quantity")
    try:
        parsed = Resources.parse({str(k): v for k, v in value.items()})
    except QuantityError as err:
        raise CatalogError(f"{where}: {err}") from err
    for name, amount in parsed.items:
        if amount < 0:
            raise CatalogError(f"{where}.{name}: must not be negative, got {value.get(name)!r}")
        if amount > MAX_QUANTITY * 1000:
            raise CatalogError(f"{where}.{name}: must be at most 2^63-1, got {value.get(name)!r}")
    return parsed


def _parse_offering(data: Any, where: str, path: tuple[str | int, ...] = ()) -> Offering:
    if not isinstance(data, Mapping):
        raise CatalogError(f"{where}: must be an object")
    _refuse_unknown(data, OFFERING_FIELDS, where, path)
    zone = data.get("zone")
    if not isinstance(zone, str) or not zone:
        raise CatalogError(f"{where}.zone: must be a non-empty string")
    capacity_type = data.get("capacityType")
    if capacity_type not in CAPACITY_TYPES:
        raise CatalogError(f"{where}.capacityType: must be one of {', '.join(CAPACITY_TYPES)}, got {capacity_type!r}")
    price = data.get("price")
    if isinstance(price, bool) or not isinstance(price, int | float) or not math.isfinite(price) or price < 0:
        raise CatalogError(f"{where}.price: must be a non-negative number (per hour, finite), got {price!r}")
    available = data.get("available", True)
    if not isinstance(available, bool):
        raise CatalogError(f"{where}.available: must be true or false, got {available!r}")
    return Offering(zone=zone, capacity_type=str(capacity_type), price=float(price), available=available)


def parse_instance_type(data: Any, *, index: int = 0) -> InstanceType:
    """One catalog entry. Raises :class:`CatalogError` naming the entry and field."""
    if not isinstance(data, Mapping):
        raise CatalogError(f"instanceTypes[{index}]: must be an object")
    name = data.get("name")
    where = _where(index, name)
    _refuse_unknown(data, INSTANCE_TYPE_FIELDS, where, ("instanceTypes", index))
    if not isinstance(name, str) or not name:
        raise CatalogError(f"{where}.name: must be a non-empty string")
    capacity = _parse_resources(data.get("capacity"), f"{where}.capacity")
    raw_capacity = data.get("capacity") or {}
    if PODS in raw_capacity and PODS not in capacity:
        raise CatalogError(
            f"{where}.capacity.pods: must be at least 1 (a machine that runs no pod is of no use), "
            f"got {raw_capacity[PODS]!r}; leave it out for the default of {DEFAULT_PODS}"
        )
    if PODS not in capacity:
        capacity = capacity + Resources({PODS: DEFAULT_PODS * 1000})
    overhead = _parse_resources(data.get("overhead"), f"{where}.overhead")
    labels = data.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        raise CatalogError(f"{where}.labels: must be an object of string -> string")
    offerings_data = data.get("offerings") or []
    if not isinstance(offerings_data, Sequence) or isinstance(offerings_data, str):
        raise CatalogError(f"{where}.offerings: must be a list")
    offerings = tuple(
        _parse_offering(o, f"{where}.offerings[{i}]", ("instanceTypes", index, "offerings", i))
        for i, o in enumerate(offerings_data)
    )
    return InstanceType(
        name=name,
        capacity=capacity,
        overhead=overhead,
        labels=FrozenLabels({str(k): str(v) for k, v in labels.items()}),
        offerings=offerings,
    )


def parse_catalog(data: Any) -> tuple[InstanceType, ...]:
    """Parse a catalog document (``{"instanceTypes": [...]}``) into instance types.

    Pure: the caller reads the file. Raises :class:`CatalogError` for malformed input, including
    duplicate names.
    """
    if not isinstance(data, Mapping):
        raise CatalogError("catalog: must be an object with an 'instanceTypes' list")
    _refuse_unknown(data, CATALOG_FIELDS, "catalog", ())
    items = data.get("instanceTypes")
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise CatalogError("catalog.instanceTypes: must be a list")
    out: list[InstanceType] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        it = parse_instance_type(item, index=index)
        if it.name in seen:
            raise CatalogError(f"{_where(index, it.name)}.name: duplicate instance type {it.name!r}")
        seen.add(it.name)
        out.append(it)
    return tuple(out)


def catalog_to_dict(instance_types: Iterable[InstanceType]) -> dict[str, Any]:
    """The inverse of :func:`parse_catalog` (canonical quantities)."""
    return {
        "instanceTypes": [
            {
                "name": it.name,
                "capacity": it.capacity.to_quantities(),
                **({"overhead": it.overhead.to_quantities()} if it.overhead else {}),
                "labels": dict(it.labels),
                "offerings": [
                    {
                        "zone": o.zone,
                        "capacityType": o.capacity_type,
                        "price": o.price,
                        "available": o.available,
                    }
                    for o in it.offerings
                ],
            }
            for it in instance_types
        ]
    }
