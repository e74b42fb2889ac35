"""A hashable, immutable string mapping for label sets inside frozen dataclasses."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar, overload

_T = TypeVar("_T")


class FrozenLabels(Mapping[str, str]):
    """An immutable ``str -> str`` mapping that can be hashed and compared."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, str] | None = None) -> None:
        self._data: dict[str, str] = dict(sorted((data or {}).items()))
        self._hash: int | None = None

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenLabels):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenLabels({self._data!r})"

    @overload
    def get(self, key: str, /) -> str | None: ...
    @overload
    def get(self, key: str, /, default: str | _T) -> str | _T: ...
    def get(self, key: str, /, default: Any = None) -> Any:
        return self._data.get(key, default)


EMPTY_LABELS = FrozenLabels()


def freeze(labels: Mapping[str, str] | None) -> FrozenLabels:
    if isinstance(labels, FrozenLabels):
        return labels
    if not labels:
        return EMPTY_LABELS
    return FrozenLabels(labels)
