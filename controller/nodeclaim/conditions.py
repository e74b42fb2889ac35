"""Status conditions on objects as the apiserver sends them (plain dicts). Pure: `now` is passed in.

`api.v1.conditions` offers the same on the pydantic models; the controllers work on the cache's
dicts, so these helpers read and write the JSON shape directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controller.clock import format_time, parse_time

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ConditionUpdate:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""


def conditions_of(obj: Mapping[str, Any]) -> list[Obj]:
    return [dict(c) for c in (obj.get("status") or {}).get("conditions") or []]


def find(obj: Mapping[str, Any], ctype: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def is_true(obj: Mapping[str, Any], ctype: str) -> bool:
    cond = find(obj, ctype)
    return cond is not None and cond.get("status") == "True"


def transition_time(obj: Mapping[str, Any], ctype: str) -> datetime | None:
    cond = find(obj, ctype)
    return parse_time(cond.get("lastTransitionTime")) if cond else None


def matches(obj: Mapping[str, Any], update: ConditionUpdate) -> bool:
    """Whether the object already carries this condition with the same status, reason and message."""
    cond = find(obj, update.type)
    return (
        cond is not None
        and cond.get("status") == update.status
        and cond.get("reason") == update.reason
        and (cond.get("message") or "") == update.message
    )


def with_conditions(obj: Mapping[str, Any], updates: Iterable[ConditionUpdate], *, now: datetime) -> list[Obj]:
    """The object's conditions with `updates` applied; lastTransitionTime moves only on a status change."""
    conditions = conditions_of(obj)
    generation = (obj.get("metadata") or {}).get("generation")
    stamp = format_time(now)
    for update in updates:
        new: Obj = {
            "type": update.type,
            "status": update.status,
            "reason": update.reason,
            "message": update.message[:32768],
            "lastTransitionTime": stamp,
        }
        if generation is not None:
            new["observedGeneration"] = generation
        for i, cond in enumerate(conditions):
            if cond.get("type") == update.type:
                if cond.get("status") == update.status and cond.get("lastTransitionTime"):
                    new["lastTransitionTime"] = cond["lastTransitionTime"]
                conditions[i] = new
                break
        else:
            conditions.append(new)
    return conditions
