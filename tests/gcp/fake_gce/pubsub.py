"""The events joiner hears of through Pub/Sub: preemptions and host events change the instance and
publish its audit-log entry, as a Log Router sink would, to every subscription of the project;
``pull`` and ``acknowledge`` serve them (unacknowledged messages come back after the ack deadline)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.gcp.fake_gce.common import PROJECT, Obj, _error, _now
from tests.gcp.fake_gce.inserts import Inserts


@dataclass
class Subscription:
    messages: list[Obj] = field(default_factory=list)  # {"id", "data", "publishTime", "visibleAt", "ackId"}


class PubSub(Inserts):
    """Instance events and the subscriptions that carry them."""

    def __init__(self, *, pull_wait_seconds: float = 1.0, **inserts: Any) -> None:
        super().__init__(**inserts)
        self.pull_wait_seconds = pull_wait_seconds
        self.ack_deadline_seconds = 10.0
        self.subscriptions = {f"projects/{PROJECT}/subscriptions/interruptions": Subscription()}

    def publish(self, project: str, zone: str, name: str, method: str, message: str) -> None:
        instance = self.instances.get((project, zone, name))
        entry = {
            "protoPayload": {
                "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
                "status": {"message": message},
                "authenticationInfo": {"principalEmail": "system@google.com"},
                "serviceName": "compute.googleapis.com",
                "methodName": method,
                "resourceName": f"projects/{project}/zones/{zone}/instances/{name}",
                "request": {"@type": "type.googleapis.com/compute.instances." + method.rsplit(".", 1)[-1]},
            },
            "insertId": f"{next(self.ids):x}",
            "resource": {
                "type": "gce_instance",
                "labels": {
                    "instance_id": (instance or {}).get("id", "0"),
                    "project_id": project,
                    "zone": zone,
                },
            },
            "timestamp": _now(),
            "severity": "INFO",
            "logName": f"projects/{project}/logs/cloudaudit.googleapis.com%2Fsystem_event",
            "operation": {"id": f"systemevent-{next(self.ids)}", "producer": method, "first": True, "last": True},
            "receiveTimestamp": _now(),
        }
        data = base64.b64encode(json.dumps(entry).encode()).decode()
        for sub_name, sub in self.subscriptions.items():
            if sub_name.startswith(f"projects/{project}/"):
                mid = str(next(self.ids))
                sub.messages.append(
                    {"id": mid, "data": data, "publishTime": _now(), "visibleAt": 0.0, "ackId": f"ack-{mid}-0"}
                )

    def preempt(self, zone: str, name: str, *, project: str = PROJECT) -> None:
        """A spot VM reclaimed: its termination action (DELETE) runs, the audit log says so."""
        instance = self.instances.get((project, zone, name))
        if instance is None:
            raise KeyError(name)
        self._release(instance)
        action = (instance.get("scheduling") or {}).get("instanceTerminationAction", "STOP")
        if action == "DELETE":
            del self.instances[(project, zone, name)]
        else:
            instance["status"] = "TERMINATED"
        self.publish(project, zone, name, "compute.instances.preempted", "Instance was preempted.")

    def host_event(self, zone: str, name: str, method: str, *, project: str = PROJECT) -> None:
        """``compute.instances.hostError`` or ``compute.instances.terminateOnHostMaintenance``: a GPU
        machine without automatic restart is left TERMINATED."""
        instance = self.instances.get((project, zone, name))
        if instance is None:
            raise KeyError(name)
        if method.endswith("terminateOnHostMaintenance") or not (instance.get("scheduling") or {}).get(
            "automaticRestart", True
        ):
            self._release(instance)
            instance["status"] = "TERMINATED"
        message = {
            "compute.instances.hostError": "Instance terminated by Compute Engine.",
            "compute.instances.terminateOnHostMaintenance": "Instance terminated during Compute Engine maintenance.",
        }.get(method, "Compute Engine event.")
        self.publish(project, zone, name, method, message)

    async def pubsub(self, request: web.Request) -> web.Response:
        m = request.match_info
        name, _, verb = m["sub"].partition(":")
        sub = self.subscriptions.get(f"projects/{m['project']}/subscriptions/{name}")
        if sub is None:
            return _error(404, "notFound", f"Resource not found (resource={name}).")
        body = await request.json()
        if verb == "acknowledge":
            acks = set(body.get("ackIds") or [])
            sub.messages = [msg for msg in sub.messages if msg["ackId"] not in acks]
            return web.json_response({})
        if verb != "pull":
            return _error(400, "badRequest", f"unknown method {verb}")
        deadline = time.monotonic() + self.pull_wait_seconds
        while True:
            now = time.monotonic()
            ready = [msg for msg in sub.messages if msg["visibleAt"] <= now][: int(body.get("maxMessages") or 1)]
            if ready or now >= deadline:
                break
            await asyncio.sleep(0.02)
        out = []
        for msg in ready:
            attempt = int(msg["ackId"].rsplit("-", 1)[-1]) + 1
            msg["ackId"] = f"ack-{msg['id']}-{attempt}"
            msg["visibleAt"] = now + self.ack_deadline_seconds
            out.append(
                {
                    "ackId": msg["ackId"],
                    "message": {"data": msg["data"], "messageId": msg["id"], "publishTime": msg["publishTime"]},
                    "deliveryAttempt": attempt,
                }
            )
        return web.json_response({"receivedMessages": out} if out else {})
