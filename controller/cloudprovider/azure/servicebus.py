"""The interruption queue on Azure Service Bus: Resource Health annotations of the cluster's VMs, which
an Event Grid subscription on the subscription's ``Microsoft.ResourceNotifications.HealthResources``
system topic delivers to a Service Bus queue, as the interruption controller's MessageSource.

Each message is one Event Grid event (Event Grid or CloudEvents schema). Understood:
``Microsoft.ResourceNotifications.HealthResources.ResourceAnnotated`` with

* ``VirtualMachinePreempted``: a Spot VM evicted (capacity recall or price) -> a spot interruption
  (its offering is marked unavailable, the NodeClaim replaced);
* ``VirtualMachineRebootInitiatedForPlannedMaintenance``,
  ``VirtualMachineMigrationInitiatedForPlannedMaintenance``, ``VirtualMachineScheduledForServiceHealing``,
  ``VirtualMachinePossiblyDegradedDueToHardwareFailure``,
  ``VirtualMachineMigrationScheduledForDegradedHardware``, ``VirtualMachineHostCrashed``: the
  platform is taking (or has taken) the VM down -> a scheduled change.

Other events and annotations parse to no notices; a body that is not an event raises MalformedMessage.
The queue is read with Service Bus's REST API (peek-lock: ``POST <queue>/messages/head``, then
``DELETE <queue>/messages/<id>/<lock token>`` once handled), tokens from azure-identity.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final

import aiohttp

from controller.cloudprovider.notices import SCHEDULED_CHANGE, SPOT_INTERRUPTION, MalformedMessage, Message, Notice

ANNOTATED: Final = "Microsoft.ResourceNotifications.HealthResources.ResourceAnnotated"
ANNOTATIONS: Final = {
    "VirtualMachinePreempted": SPOT_INTERRUPTION,
    "VirtualMachineRebootInitiatedForPlannedMaintenance": SCHEDULED_CHANGE,
    "VirtualMachineMigrationInitiatedForPlannedMaintenance": SCHEDULED_CHANGE,
    "VirtualMachineScheduledForServiceHealing": SCHEDULED_CHANGE,
    "VirtualMachinePossiblyDegradedDueToHardwareFailure": SCHEDULED_CHANGE,
    "VirtualMachineMigrationScheduledForDegradedHardware": SCHEDULED_CHANGE,
    "VirtualMachineHostCrashed": SCHEDULED_CHANGE,
}
SERVICE_BUS_SCOPE: Final = "https://servicebus.azure.net/.default"


def parse(body: str) -> list[Notice]:
    """The notices of one Event Grid event (or a batch of them)."""
    try:
        events: Any = json.loads(body)
    except json.JSONDecodeError as err:
        raise MalformedMessage(f"not JSON: {err}") from None
    out: list[Notice] = []
    for event in events if isinstance(events, list) else [events]:
        if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
            raise MalformedMessage("not an Event Grid event (no data)")
        kind = event.get("eventType") or event.get("type")
        if kind != ANNOTATED:
            continue
        props = ((event["data"].get("resourceInfo") or {}).get("properties")) or {}
        notice_kind = ANNOTATIONS.get(str(props.get("annotationName") or ""))
        if notice_kind is None:
            continue
        target = str(props.get("targetResourceId") or event.get("subject") or "")
        if "/virtualMachines/" not in target:
            raise MalformedMessage(f"{props.get('annotationName')}: {target!r} is not a virtual machine")
        out.append(Notice(notice_kind, target.rstrip("/").rsplit("/", 1)[-1], str(props["annotationName"])))
    return out


class ServiceBusSource:
    def __init__(
        self,
        *,
        queue_url: str,
        token: Callable[[], Awaitable[str | None]],
        wait_seconds: int = 20,
        batch: int = 10,
    ) -> None:
        """``queue_url``: ``https://<namespace>.servicebus.windows.net/<queue>``."""
        self.queue_url = queue_url.rstrip("/")
        self._token = token
        self.wait_seconds = wait_seconds
        self.batch = batch
        self._http: aiohttp.ClientSession | None = None

    async def _headers(self) -> dict[str, str]:
        token = await self._token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.wait_seconds + 30))
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def receive(self) -> list[Message]:
        """Up to ``batch`` messages, peek-locked: the first waits up to ``wait_seconds``, the rest not."""
        out: list[Message] = []
        for i in range(self.batch):
            wait = self.wait_seconds if i == 0 else 0
            url = f"{self.queue_url}/messages/head?timeout={wait}"
            async with self._session().post(url, headers=await self._headers()) as response:
                if response.status == 204:
                    break
                if response.status >= 400:
                    raise OSError(f"Service Bus receive: {response.status} {await response.text()}")
                props = json.loads(response.headers.get("BrokerProperties") or "{}")
                out.append(
                    Message(
                        id=str(props.get("MessageId") or ""),
                        receipt=f"{props.get('MessageId')}/{props.get('LockToken')}",
                        body=await response.text(),
                        sent_at=_time(props.get("EnqueuedTimeUtc")),
                    )
                )
        return out

    async def delete(self, message: Message) -> None:
        async with self._session().delete(
            f"{self.queue_url}/messages/{message.receipt}", headers=await self._headers()
        ) as response:
            if response.status >= 400 and response.status != 404:
                raise OSError(f"Service Bus delete: {response.status} {await response.text()}")


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parsedate_to_datetime(value).astimezone(UTC)
    except (TypeError, ValueError):
        return None
