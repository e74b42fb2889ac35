"""The interruption controller reading EventBridge messages from a real (moto) SQS queue."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import boto3
import pytest

from controller.cloudprovider.aws.api import AWSApi
from controller.cloudprovider.aws.sqs import SQSSource
from controller.cloudprovider.notices import MalformedMessage
from controller.cloudprovider.types import OfferingId
from controller.interruption.controller import MESSAGES, InterruptionController
from controller.interruption.messages import parse
from controller.kube.resources import NODECLAIMS
from controller.metrics import REGISTRY
from tests.aws.conftest import REGION
from tests.unit.harness import Harness, make_harness

Obj = dict[str, Any]


def ec2_event(detail_type: str, instance: str, **detail: Any) -> str:
    return json.dumps(
        {"version": "0", "source": "aws.ec2", "detail-type": detail_type, "detail": {"instance-id": instance, **detail}}
    )


def spot_warning(instance: str) -> str:
    return ec2_event("EC2 Spot Instance Interruption Warning", instance, **{"instance-action": "terminate"})


def health_event(*instances: str) -> str:
    return json.dumps(
        {
            "source": "aws.health",
            "detail-type": "AWS Health Event",
            "detail": {
                "service": "EC2",
                "eventTypeCategory": "scheduledChange",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "affectedEntities": [{"entityValue": i} for i in instances],
            },
        }
    )


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = await make_harness()
    try:
        yield harness
    finally:
        await harness.close()


@pytest.fixture
def queue(moto_url: str) -> tuple[Any, str]:
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto_url)
    url = sqs.create_queue(QueueName=f"interruptions-{id(sqs)}", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
    return sqs, url


@pytest.fixture
def controller(h: Harness, api: AWSApi, queue: tuple[Any, str]) -> InterruptionController:
    return InterruptionController(h.ctx, source=SQSSource(api=api, queue_url=queue[1], wait_seconds=0))


async def launched(h: Harness, name: str, *, instance: str, capacity_type: str = "spot") -> None:
    await h.create_claim(name, instance_types=["cpu-4"])
    labels = {"node.kubernetes.io/instance-type": "cpu-4", "topology.kubernetes.io/zone": "zone-a"}
    labels["joiner.sh/capacity-type"] = capacity_type
    await h.kube.patch(NODECLAIMS, name, {"metadata": {"labels": labels}})
    await h.kube.patch(NODECLAIMS, name, {"status": {"providerID": f"aws:///zone-a/{instance}"}}, subresource="status")
    await h.eventually(
        lambda: (view := h.cluster.claim_views().get(name)) is not None and view.provider_id is not None,
        what=f"{name} cached with its providerID",
    )


def send(queue: tuple[Any, str], *bodies: str) -> None:
    sqs, url = queue
    for body in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=body)


def left(queue: tuple[Any, str]) -> int:
    sqs, url = queue
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"])


async def test_a_spot_warning_deletes_the_nodeclaim_and_marks_the_offering(
    h: Harness, controller: InterruptionController, queue: tuple[Any, str]
) -> None:
    await launched(h, "nc-spot", instance="i-0000000000000aaaa")
    send(queue, spot_warning("i-0000000000000aaaa"))
    assert await controller.poll_once() == 1
    await h.settle()
    assert h.claim("nc-spot") is None
    assert OfferingId("cpu-4", "zone-a", "spot") in h.ctx.unavailable.current()
    assert left(queue) == 0


async def test_scheduled_changes_and_stopping_states_delete_rebalance_is_only_recorded(
    h: Harness, controller: InterruptionController, queue: tuple[Any, str]
) -> None:
    for name, instance in (("nc-a", "i-00000000000000a01"), ("nc-b", "i-00000000000000b02"), ("nc-c", "i-0000c03")):
        await launched(h, name, instance=instance, capacity_type="on-demand")
    await launched(h, "nc-d", instance="i-0000d04")
    send(
        queue,
        health_event("i-00000000000000a01", "i-00000000000000b02"),
        ec2_event("EC2 Instance State-change Notification", "i-0000c03", state="stopping"),
        ec2_event("EC2 Instance State-change Notification", "i-0000d04", state="running"),
        ec2_event("EC2 Instance Rebalance Recommendation", "i-0000d04"),
    )
    handled = 0
    for _ in range(5):
        handled += await controller.poll_once()
    assert handled == 4
    await h.settle()
    assert [n for n in ("nc-a", "nc-b", "nc-c", "nc-d") if h.claim(n) is not None] == ["nc-d"]
    assert h.ctx.unavailable.current() == frozenset()  # only spot warnings mark offerings
    assert left(queue) == 0


async def test_a_rebalance_recommendation_is_recorded_on_the_nodeclaim_once(
    h: Harness, controller: InterruptionController, queue: tuple[Any, str]
) -> None:
    await launched(h, "nc-r", instance="i-0000000000000r0b1")
    send(queue, ec2_event("EC2 Instance Rebalance Recommendation", "i-0000000000000r0b1"))
    send(queue, ec2_event("EC2 Instance Rebalance Recommendation", "i-0000000000000r0b1"))
    for _ in range(3):
        await controller.poll_once()
    await h.settle()
    claim = h.claim("nc-r")
    assert claim is not None  # not deleted: only disruption acts, and only where the pool opts in
    when = claim["metadata"]["annotations"]["joiner.sh/rebalance-recommended"]
    assert when.endswith("Z")
    assert h.kube.event_reasons("nc-r").count("RebalanceRecommended") == 1
    assert left(queue) == 0


async def test_the_time_to_replacement_runs_from_the_message_to_the_work_running_elsewhere(
    h: Harness, controller: InterruptionController, queue: tuple[Any, str]
) -> None:
    await launched(h, "nc-web", instance="i-0000000000000f0f1")
    await h.kube.patch(NODECLAIMS, "nc-web", {"status": {"nodeName": "node-web"}}, subresource="status")
    owner = {"ownerReferences": [{"kind": "ReplicaSet", "name": "web", "uid": "rs-web", "controller": True}]}
    await h.bind_pod("web-1", "node-web", metadata=owner)
    await h.cached("Pod", "default/web-1")
    await h.eventually(lambda: h.cluster.claim_views()["nc-web"].node_name == "node-web", what="node name cached")
    labels = {"kind": "spot_interruption"}
    before = REGISTRY.get_sample_value("joiner_interruption_replacement_seconds_count", labels) or 0.0
    send(queue, spot_warning("i-0000000000000f0f1"))
    assert await controller.poll_once() == 1
    assert [d.wanted for d in controller.displaced] == [(("rs-web", 1),)]
    assert controller.check_replacements() == 1  # web-1 is still on the interrupted node
    await h.bind_pod("web-2", "node-other", metadata=owner)
    await h.cached("Pod", "default/web-2")
    assert controller.check_replacements() == 0
    assert REGISTRY.get_sample_value("joiner_interruption_replacement_seconds_count", labels) == before + 1


async def test_malformed_messages_are_dropped_and_counted_and_the_rest_handled(
    h: Harness, controller: InterruptionController, queue: tuple[Any, str]
) -> None:
    await launched(h, "nc-ok", instance="i-00000000000000e05")
    before = MESSAGES.labels("malformed")._value.get()
    send(queue, "not json", json.dumps({"detail-type": "EC2 Spot Instance Interruption Warning"}))
    send(queue, ec2_event("EC2 Spot Instance Interruption Warning", "no-instance"))
    send(queue, spot_warning("i-00000000000000e05"))
    for _ in range(5):
        await controller.poll_once()
    await h.settle()
    assert MESSAGES.labels("malformed")._value.get() == before + 3
    assert h.claim("nc-ok") is None
    assert left(queue) == 0


async def test_a_message_whose_handling_fails_stays_in_the_queue(
    h: Harness, controller: InterruptionController, queue: tuple[Any, str]
) -> None:
    await launched(h, "nc-retry", instance="i-00000000000000f06")
    failing = [True]

    def refuse(verb: str, plural: str, name: str) -> None:
        if failing[0] and verb == "delete" and plural == "nodeclaims":
            raise RuntimeError("apiserver unavailable")

    h.kube.on_call = refuse
    send(queue, spot_warning("i-00000000000000f06"))
    assert await controller.poll_once() == 0
    assert left(queue) == 1
    failing[0] = False
    assert await controller.poll_once() == 1
    await h.settle()
    assert h.claim("nc-retry") is None
    assert left(queue) == 0


def test_parse_every_kind() -> None:
    assert [n.kind for n in parse(spot_warning("i-1"))] == ["spot_interruption"]
    assert [(n.kind, n.instance_id) for n in parse(health_event("i-1", "i-2"))] == [
        ("scheduled_change", "i-1"),
        ("scheduled_change", "i-2"),
    ]
    assert parse(ec2_event("EC2 Instance State-change Notification", "i-1", state="pending")) == []
    assert parse(json.dumps({"source": "aws.s3", "detail-type": "Object Created", "detail": {}})) == []
    with pytest.raises(MalformedMessage):
        parse("[]")


async def test_kwok_nodeclaims_annotated_with_an_interruption_go_through_the_same_handler(h: Harness) -> None:
    import asyncio

    from controller.interruption.kwok import AnnotationInterruptions

    class NoQueue:
        async def receive(self) -> list[Any]:
            return []

        async def delete(self, message: Any) -> None:
            return None

    simulated = AnnotationInterruptions(InterruptionController(h.ctx, source=NoQueue()))
    h.start(simulated)
    for name in ("nc-kwok", "nc-calm"):
        await h.create_claim(name, instance_types=["cpu-4"])
        labels = {"node.kubernetes.io/instance-type": "cpu-4", "topology.kubernetes.io/zone": "zone-a"}
        labels["joiner.sh/capacity-type"] = "spot"
        await h.kube.patch(NODECLAIMS, name, {"metadata": {"labels": labels}})
        await h.kube.patch(NODECLAIMS, name, {"status": {"providerID": f"kwok://{name}"}}, subresource="status")
    await h.kube.patch(NODECLAIMS, "nc-kwok", {"metadata": {"annotations": {"joiner.sh/interruption": "spot"}}})
    await h.eventually(lambda: h.claim("nc-kwok") is None, what="the interrupted NodeClaim deleted")
    await asyncio.sleep(0)
    assert h.claim("nc-calm") is not None
    assert OfferingId("cpu-4", "zone-a", "spot") in h.ctx.unavailable.current()


async def test_the_sqs_source_reports_when_a_message_was_sent(api: AWSApi, queue: tuple[Any, str]) -> None:
    send(queue, spot_warning("i-0000000000000abcd"))
    source = SQSSource(api=api, queue_url=queue[1], wait_seconds=0)
    (message,) = await source.receive()
    assert message.sent_at is not None
    assert json.loads(message.body)["detail"]["instance-id"] == "i-0000000000000abcd"
    await source.delete(message)
    assert left(queue) == 0
