"""The interruption queue on Pub/Sub: Compute Engine system-event audit logs, routed by a Log Router
sink to a topic, pulled from its subscription, as the interruption controller's MessageSource.

Each message's data is one audit ``LogEntry`` (JSON). Understood (``protoPayload.methodName``):

* ``compute.instances.preempted``: a spot (or preemptible) instance was reclaimed -> a spot
  interruption (its offering is marked unavailable and the NodeClaim replaced);
* ``compute.instances.hostError``: the host failed and the instance was restarted or stopped ->
  a scheduled change (``hostError``);
* ``compute.instances.terminateOnHostMaintenance``: maintenance stops the instance (GPU machines
  cannot live-migrate) -> a scheduled change (``terminateOnHostMaintenance``).

Other audit entries parse to no notices; data that is not a LogEntry raises MalformedMessage.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any, Final

from controller.cloudprovider.gcp.api import GCPApi
from controller.cloudprovider.notices import SCHEDULED_CHANGE, SPOT_INTERRUPTION, MalformedMessage, Message, Notice

METHODS: Final = {
    "compute.instances.preempted": SPOT_INTERRUPTION,
    "compute.instances.hostError": SCHEDULED_CHANGE,
    "compute.instances.terminateOnHostMaintenance": SCHEDULED_CHANGE,
}


def parse(body: str) -> list[Notice]:
    """The notices in one audit LogEntry (JSON)."""
    try:
        entry: Any = json.loads(body)
    except json.JSONDecodeError as err:
        raise MalformedMessage(f"not JSON: {err}") from None
    if not isinstance(entry, dict) or not isinstance(entry.get("protoPayload"), dict):
        raise MalformedMessage("not an audit LogEntry (no protoPayload)")
    payload = entry["protoPayload"]
    method = str(payload.get("methodName") or "")
    kind = METHODS.get(method)
    if kind is None:
        return []
    resource = str(payload.get("resourceName") or "")
    parts = resource.split("/")
    if len(parts) < 6 or parts[-2] != "instances" or not parts[-1]:
        raise MalformedMessage(f"{method}: resourceName {resource!r} names no instance")
    return [Notice(kind, parts[-1], method.rsplit(".", 1)[-1])]


class PubSubSource:
    def __init__(self, *, api: GCPApi, subscription: str, batch: int = 10) -> None:
        """``subscription`` is ``projects/<project>/subscriptions/<name>``."""
        self.api = api
        self.subscription = subscription
        self.batch = batch

    async def receive(self) -> list[Message]:
        answer = await self.api.pubsub("POST", f"{self.subscription}:pull", body={"maxMessages": self.batch})
        out = []
        for received in answer.get("receivedMessages") or []:
            message = received.get("message") or {}
            try:
                body = base64.b64decode(str(message.get("data") or "")).decode("utf-8", errors="replace")
            except ValueError:
                body = ""
            out.append(
                Message(
                    id=str(message.get("messageId") or ""),
                    receipt=str(received["ackId"]),
                    body=body,
                    sent_at=_time(message.get("publishTime")),
                )
            )
        return out

    async def delete(self, message: Message) -> None:
        await self.api.pubsub("POST", f"{self.subscription}:acknowledge", body={"ackIds": [message.receipt]})


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
