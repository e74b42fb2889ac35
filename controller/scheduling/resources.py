"""Resource lists: immutable name -> milli-unit maps with exact arithmetic.

:class:`Resources` is the value type that crosses the package boundary. It is hashable (so pods
with identical requests group together) and compares by content. Inside a solve the solver maps
the few resource names that matter to positions in a tuple (see ``solver_model.Universe``) so fit
checks are tuple comparisons.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from controller.scheduling.quantity import format_human, format_resource, parse_quantity

CPU: Final = "cpu"
MEMORY: Final = "memory"
PODS: Final = "pods"
EPHEMERAL_STORAGE: Final = "ephemeral-storage"
NVIDIA_GPU: Final = "nvidia.com/gpu"

_STANDARD: Final = (CPU, MEMORY, PODS, EPHEMERAL_STORAGE)


def is_accelerator(name: str) -> bool:
    """Extended resources that denote accelerators (GPUs and the like) rather than cpu/memory."""
    if name in _STANDARD or name.startswith("hugepages-"):
        return False
    lowered = name.lower()
    return any(word in lowered for word in ("gpu", "neuron", "tpu", "accelerator", "habana", "gaudi"))


def _order(name: str) -> tuple[int, str]:
    return (_STANDARD.index(name), name) if name in _STANDARD else (len(_STANDARD), name)


def _item_order(item: tuple[str, int]) -> tuple[int, str]:
    return _order(item[0])


@dataclass(frozen=True, slots=True)
class Resources:
    """An immutable resource list in milli-units (see :mod:`controller.scheduling.quantity`).

    Zero entries are dropped, so ``Resources({"cpu": 0}) == Resources()``. Missing names read as
    zero.
    """

    items: tuple[tuple[str, int], ...] = ()
    _map: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __init__(self, values: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        pairs = values.items() if isinstance(values, Mapping) else values
        merged: dict[str, int] = {}
        for name, amount in pairs:
            if not isinstance(amount, int) or isinstance(amount, bool):
                raise TypeError(f"resource {name!r}: amount must be an int of milli-units, got {amount!r}")
            merged[name] = merged.get(name, 0) + amount
        ordered = tuple(sorted([kv for kv in merged.items() if kv[1]], key=_item_order))
        object.__setattr__(self, "items", ordered)
        object.__setattr__(self, "_map", dict(ordered))

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def parse(cls, values: Mapping[str, str | int | float] | None) -> Resources:
        """From a Kubernetes resource list (``{"cpu": "500m", "memory": "1Gi"}``)."""
        if not values:
            return EMPTY
        return cls({name: parse_quantity(amount) for name, amount in values.items()})

    @classmethod
    def of(cls, **values: int) -> Resources:
        """Convenience for tests and code: whole units, ``Resources.of(cpu=2, pods=1)``.

        Keyword names use ``_`` for ``-`` and ``__`` for ``/`` is not supported; use
        :meth:`parse` for names such as ``nvidia.com/gpu``.
        """
        return cls({name.replace("_", "-"): amount * 1000 for name, amount in values.items()})

    # --- reading --------------------------------------------------------------------------

    def get(self, name: str) -> int:
        return self._map.get(name, 0)

    def __getitem__(self, name: str) -> int:
        return self._map.get(name, 0)

    def __contains__(self, name: object) -> bool:
        return name in self._map

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.items)

    def to_dict(self) -> dict[str, int]:
        return dict(self.items)

    def to_quantities(self) -> dict[str, str]:
        """As a Kubernetes resource list with canonical quantity strings."""
        return {name: format_resource(name, amount) for name, amount in self.items}

    def __str__(self) -> str:
        return ", ".join(f"{name}={format_human(name, amount)}" for name, amount in self.items) or "{}"

    # --- arithmetic -----------------------------------------------------------------------

    def __add__(self, other: Resources) -> Resources:
        if not other.items:
            return self
        if not self.items:
            return other
        merged = dict(self._map)
        for name, amount in other.items:
            merged[name] = merged.get(name, 0) + amount
        return Resources(merged)

    def __sub__(self, other: Resources) -> Resources:
        if not other.items:
            return self
        merged = dict(self._map)
        for name, amount in other.items:
            merged[name] = merged.get(name, 0) - amount
        return Resources(merged)

    def scale(self, factor: int) -> Resources:
        return Resources({name: amount * factor for name, amount in self.items})

    def clamp(self) -> Resources:
        """Negative entries become zero."""
        if all(amount > 0 for _, amount in self.items):
            return self
        return Resources({name: amount for name, amount in self.items if amount > 0})

    def fits_in(self, capacity: Resources) -> bool:
        """Every entry of ``self`` is at most the same entry of ``capacity``."""
        cap = capacity._map
        return all(amount <= cap.get(name, 0) for name, amount in self.items)

    def exceeding(self, capacity: Resources) -> tuple[str, ...]:
        """Names whose amount in ``self`` is more than in ``capacity``."""
        cap = capacity._map
        return tuple(name for name, amount in self.items if amount > cap.get(name, 0))

    def restrict(self, names: Iterable[str]) -> Resources:
        keep = set(names)
        return Resources({name: amount for name, amount in self.items if name in keep})


def weighted_sum(values: Iterable[tuple[Resources, int]]) -> Resources:
    """``sum_resources(r.scale(k) for r, k in values)``, without the lists in between."""
    total: dict[str, int] = {}
    for resources, factor in values:
        for name, amount in resources.items:
            total[name] = total.get(name, 0) + amount * factor
    return Resources(total)


def sum_resources(values: Iterable[Resources]) -> Resources:
    total: dict[str, int] = {}
    for resources in values:
        for name, amount in resources.items:
            total[name] = total.get(name, 0) + amount
    return Resources(total)


EMPTY: Final = Resources()
ONE_POD: Final = Resources({PODS: 1000})
