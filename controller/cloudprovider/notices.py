"""Interruption notices at the seam between a cloud's queue and the interruption controller.

A provider's queue reader (``aws/sqs.py``, ``gcp/pubsub.py``, ``azure/servicebus.py``) hands over
:class:`Message` objects and, where the cloud has its own format, reads their bodies into
:class:`Notice` objects; the interruption controller (``controller/interruption/``) acts on the
notices. Both import this module; neither imports the other. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Protocol

SPOT_INTERRUPTION: Final = "spot_interruption"
REBALANCE: Final = "rebalance"
SCHEDULED_CHANGE: Final = "scheduled_change"
STATE_CHANGE: Final = "state_change"


class MalformedMessage(ValueError):
    """The message body is not an event joiner can read."""


@dataclass(frozen=True, slots=True)
class Notice:
    kind: str
    instance_id: str
    detail: str = ""  # the state, the Health event type, ...


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    receipt: str
    body: str
    sent_at: datetime | None = None  # when the queue received it (for the latency metric)


class MessageSource(Protocol):
    async def receive(self) -> list[Message]:
        """The next messages (waits up to a long-poll interval; may return none)."""

    async def delete(self, message: Message) -> None:
        """Remove a handled message from the queue."""
