"""Small numeric helpers of the solver: resource-vector fit, suffix minima, zone water-filling."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from heapq import heapify, heappop
from operator import floordiv, le
from typing import Any, Final, Generic, TypeVar

Vec = tuple[int, ...]
_T = TypeVar("_T")


EPS: Final = 1e-9
"""Tolerance when comparing prices."""


def fit_count(free: Sequence[int], req: Vec) -> int:
    """How many copies of ``req`` fit in ``free`` (``req`` always asks for a pod slot)."""
    best = -1
    for f, r in zip(free, req, strict=True):
        if r:
            if f < r:
                return 0
            q = f // r
            if best < 0 or q < best:
                best = q
    return best if best >= 0 else 1 << 30


def fit_dense(free: Sequence[int], req: Vec, nz: tuple[int, ...] | None) -> int:
    """`fit_count` for a request whose non-zero dimensions ``nz`` are known (None: every one)."""
    if nz is None:
        k = min(map(floordiv, free, req))
    elif nz:
        k = min([free[i] // req[i] for i in nz])
    else:
        return 1 << 30
    return k if k > 0 else 0


def fits(req: Sequence[int], free: Sequence[int]) -> bool:
    return all(map(le, req, free))


def suffix_minima(reqs: Sequence[Vec], dims: int) -> list[Vec]:
    """out[j] = per-dimension minimum of reqs[j:] (out[len] = +inf-like): a lower bound on what
    any later part needs, so a fill can stop once the free space is below it.

    Neighbours with equal minima share one tuple, so a fill that found a bound below its free
    space knows, by identity, that the next positions ask the same until the bound changes."""
    big = 1 << 62
    out: list[Vec] = [tuple([big] * dims)] * (len(reqs) + 1)
    current = out[-1]
    for j in range(len(reqs) - 1, -1, -1):
        lower = tuple([min(c, r) for c, r in zip(current, reqs[j], strict=True)])
        if lower != current:
            current = lower
        out[j] = current
    return out


class HeapOrder(Generic[_T]):
    """``items`` in the order of their ``keys`` (``keys[i]`` = (sort key ..., i), all distinct),
    each found when it is first read: readers that stop early pay for what they read, not for a
    sort, and every reader of the same object shares what earlier readers found."""

    __slots__ = ("_found", "_heap", "_items")

    def __init__(self, items: Sequence[_T], keys: list[tuple[Any, ...]]) -> None:
        heapify(keys)
        self._heap = keys
        self._items = items
        self._found: list[_T] = []

    def __iter__(self) -> Iterator[_T]:
        found = self._found
        heap = self._heap
        items = self._items
        i = 0
        while True:
            if i < len(found):
                yield found[i]
            elif heap:
                item = items[heappop(heap)[-1]]
                found.append(item)
                yield item
            else:
                return
            i += 1


def water_fill(
    counts: Mapping[str, int],
    n: int,
    *,
    caps: Mapping[str, int] | None,
    load: Mapping[str, float] | None = None,
    weight: float = 0.0,
) -> dict[str, int]:
    """Spread n pods over zones, always into a zone with the lowest count.

    ``caps`` bounds how many each zone may take. Ties go to the zone with the least ``load``
    (each pod placed adds ``weight`` to its zone's), then by zone name. Returns pods per zone.
    """
    loads = dict(load) if load else None
    current = dict(counts)
    out = dict.fromkeys(counts, 0)
    left = n
    while left > 0:
        open_zones = [z for z in sorted(current) if caps is None or out[z] < caps.get(z, 0)]
        if not open_zones:
            break
        low = min(current[z] for z in open_zones)
        at_low = [z for z in open_zones if current[z] == low]
        higher = [current[z] for z in open_zones if current[z] > low]
        step = (min(higher) - low) if higher else None
        # raise every zone at the lowest level by the same amount, as far as possible
        per_zone = left // len(at_low) if step is None else min(step, left // len(at_low))
        if caps is not None:
            per_zone = min([per_zone] + [caps.get(z, 0) - out[z] for z in at_low])
        if per_zone <= 0:
            if loads is not None:
                at_low.sort(key=lambda z: (loads.get(z, 0.0), z))
            for z in at_low:
                if left <= 0:
                    break
                if caps is not None and out[z] >= caps.get(z, 0):
                    continue
                out[z] += 1
                current[z] += 1
                left -= 1
                if loads is not None:
                    loads[z] = loads.get(z, 0.0) + weight
            continue
        for z in at_low:
            out[z] += per_zone
            current[z] += per_zone
            left -= per_zone
            if loads is not None:
                loads[z] = loads.get(z, 0.0) + weight * per_zone
    return out
