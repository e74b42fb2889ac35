"""Interruption notices: EventBridge messages (as SQS delivers them) parsed into `Notice`. Pure.

Four kinds are understood:

* ``spot_interruption``: "EC2 Spot Instance Interruption Warning" (two minutes before the reclaim);
* ``rebalance``: "EC2 Instance Rebalance Recommendation" (elevated risk of interruption);
* ``scheduled_change``: an "AWS Health Event" of category ``scheduledChange`` for EC2, naming the
  affected instances (retirement, maintenance);
* ``state_change``: "EC2 Instance State-change Notification" for ``stopping``, ``stopped``,
  ``shutting-down`` or ``terminated`` (other states are ignored).

Anything else that is valid JSON of another EventBridge type parses to no notices (ignored);
a body that is not an EventBridge event raises :class:`MalformedMessage`. The notice and message
types are the seam's (``controller/cloudprovider/notices.py``), shared with the providers' queues.
"""

from __future__ import annotations

import json
from typing import Any, Final

from controller.cloudprovider.notices import (
    REBALANCE,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTION,
    STATE_CHANGE,
    MalformedMessage,
    Notice,
)

ACTIONABLE_STATES: Final = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


def parse(body: str) -> list[Notice]:
    """The notices in one message body (several instances for a Health event)."""
    try:
        event: Any = json.loads(body)
    except json.JSONDecodeError as err:
        raise MalformedMessage(f"not JSON: {err}") from None
    if not isinstance(event, dict) or not isinstance(event.get("detail-type"), str):
        raise MalformedMessage("not an EventBridge event (no detail-type)")
    detail = event.get("detail")
    if not isinstance(detail, dict):
        raise MalformedMessage("no detail object")
    kind = event["detail-type"]
    source = event.get("source")
    if source == "aws.ec2" and kind == "EC2 Spot Instance Interruption Warning":
        return [Notice(SPOT_INTERRUPTION, _instance(detail), str(detail.get("instance-action") or ""))]
    if source == "aws.ec2" and kind == "EC2 Instance Rebalance Recommendation":
        return [Notice(REBALANCE, _instance(detail))]
    if source == "aws.ec2" and kind == "EC2 Instance State-change Notification":
        state = str(detail.get("state") or "")
        return [Notice(STATE_CHANGE, _instance(detail), state)] if state in ACTIONABLE_STATES else []
    if source == "aws.health" and kind == "AWS Health Event":
        if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
            return []
        entities = detail.get("affectedEntities")
        if not isinstance(entities, list):
            raise MalformedMessage("AWS Health Event without affectedEntities")
        event_type = str(detail.get("eventTypeCode") or "")
        return [
            Notice(SCHEDULED_CHANGE, str(e["entityValue"]), event_type)
            for e in entities
            if isinstance(e, dict) and str(e.get("entityValue", "")).startswith("i-")
        ]
    return []


def _instance(detail: dict[str, Any]) -> str:
    instance = detail.get("instance-id")
    if not isinstance(instance, str) or not instance.startswith("i-"):
        raise MalformedMessage("detail.instance-id is missing or not an instance id")
    return instance
