"""Compatibility for callers that still read conditions on dicts (gang/, disruption/controller.py).

Conditions are read once, on the views (`controller.state.views.Condition`), and written with
`controller.state.writes`; these wrappers convert and delegate. Remove once those callers use views.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from controller.state.views import Condition, Obj, condition_of
from controller.state.writes import ConditionUpdate, with_conditions

__all__ = ["ConditionUpdate", "find", "is_true", "matches", "transition_time", "with_conditions"]


def _find(obj: Mapping[str, Any], ctype: str) -> Condition | None:
    return condition_of(obj, ctype)


def find(obj: Mapping[str, Any], ctype: str) -> Obj | None:
    cond = _find(obj, ctype)
    return None if cond is None else cond.as_dict()


def is_true(obj: Mapping[str, Any], ctype: str) -> bool:
    cond = _find(obj, ctype)
    return cond is not None and cond.is_true


def transition_time(obj: Mapping[str, Any], ctype: str) -> datetime | None:
    cond = _find(obj, ctype)
    return cond.transitioned if cond is not None else None


def matches(obj: Mapping[str, Any], update: ConditionUpdate) -> bool:
    """Whether the object already carries this condition with the same status, reason and message."""
    cond = _find(obj, update.type)
    return (
        cond is not None
        and cond.status == update.status
        and cond.reason == update.reason
        and cond.message == update.message
    )
