"""Taints and tolerations, matched the way kube-scheduler matches them.

A toleration tolerates a taint when the effects agree (an empty toleration effect means every
effect), the keys agree (an empty key with ``Exists`` means every key), and, for ``Equal``
(the default operator), the values are equal. For feasibility only ``NoSchedule`` and
``NoExecute`` taints count; ``PreferNoSchedule`` is a preference and never blocks a pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

NO_SCHEDULE: Final = "NoSchedule"
NO_EXECUTE: Final = "NoExecute"
PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
EFFECTS: Final = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)
_BLOCKING: Final = frozenset({NO_SCHEDULE, NO_EXECUTE})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Taint:
        return Taint(key=str(data.get("key", "")), value=str(data.get("value") or ""), effect=str(data["effect"]))

    def to_dict(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out

    def blocks_scheduling(self) -> bool:
        return self.effect in _BLOCKING

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Toleration:
        return Toleration(
            key=str(data.get("key") or ""),
            operator=str(data.get("operator") or "Equal"),
            value=str(data.get("value") or ""),
            effect=str(data.get("effect") or ""),
        )

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        if self.operator == "Equal":
            return self.key == taint.key and self.value == taint.value
        return False


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def first_untolerated(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> Taint | None:
    """The first ``NoSchedule``/``NoExecute`` taint none of the tolerations tolerates, or None."""
    tols = tuple(tolerations)
    for taint in taints:
        if taint.blocks_scheduling() and not tolerates(tols, taint):
            return taint
    return None
