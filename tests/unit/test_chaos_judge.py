"""The fault suite's judge waits for a consolidation command under way, and only for one."""

from __future__ import annotations

from typing import Any

from hack.chaos import REPLACEMENT_FOR, _disruption_under_way


def claim(
    name: str, *, replaces: str | None = None, initialized: bool = True, marked: bool = False, deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if replaces:
        meta["annotations"] = {REPLACEMENT_FOR: replaces}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T03:12:40Z"
    conditions = [{"type": "Initialized", "status": "True" if initialized else "False"}]
    if marked:
        conditions.append({"type": "DisruptionReason", "status": "True", "reason": "Underutilized"})
    return {"metadata": meta, "status": {"conditions": conditions}}


def test_a_replace_under_way_is_waited_for_whatever_the_deletions() -> None:
    coming = [claim("l4-a", marked=True), claim("l4-b", replaces="l4-a", initialized=False)]
    assert _disruption_under_way(coming, deletions=False) == "l4-a marked for disruption (Underutilized)"
    draining = [claim("l4-a", marked=True, deleting=True), claim("l4-b", replaces="l4-a")]
    assert _disruption_under_way(draining, deletions=False) is not None
    assert _disruption_under_way([claim("l4-b", replaces="l4-a")], deletions=False) is None  # done


def test_a_plain_deletion_is_a_command_only_when_asked() -> None:
    rolled_back = [claim("h100-g1-0", deleting=True), claim("cpu-x")]
    assert _disruption_under_way(rolled_back, deletions=False) is None
    assert _disruption_under_way(rolled_back) == "h100-g1-0 being deleted"
