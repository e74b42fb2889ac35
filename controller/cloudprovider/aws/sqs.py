"""The interruption queue on SQS, as the interruption controller's MessageSource."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.notices import Message


class SQSSource:
    def __init__(self, *, api: AWSApi, queue_url: str, wait_seconds: int = 20, batch: int = 10) -> None:
        self.api = api
        self.queue_url = queue_url
        self.wait_seconds = wait_seconds
        self.batch = batch

    async def receive(self) -> list[Message]:
        answer = await self.api.call(
            "sqs",
            "receive_message",
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch,
            WaitTimeSeconds=self.wait_seconds,
            MessageSystemAttributeNames=["SentTimestamp"],
        )
        return [
            Message(
                id=str(m.get("MessageId")),
                receipt=str(m["ReceiptHandle"]),
                body=str(m.get("Body") or ""),
                sent_at=_sent_at(m),
            )
            for m in answer.get("Messages") or []
        ]

    async def delete(self, message: Message) -> None:
        await self.api.call("sqs", "delete_message", QueueUrl=self.queue_url, ReceiptHandle=message.receipt)


def _sent_at(message: dict[str, Any]) -> datetime | None:
    millis = (message.get("Attributes") or {}).get("SentTimestamp")
    try:
        return datetime.fromtimestamp(int(millis) / 1000, tz=UTC) if millis else None
    except ValueError:
        return None
