"""The one NodeClaim writer: it writes only under its lock, counts what it just created until the
cache has shown it, says each creation once (metric and log line, with the reason), and reports
a refused write instead of raising."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from api.v1 import labels as wk
from controller.cloudprovider.catalog import load_catalog
from controller.kube.client import InvalidError, TransportError
from controller.kube.resources import NODECLAIMS, Resource
from controller.metrics import REGISTRY
from controller.scheduling import NodePoolTemplate, Pod, Resources, solve
from controller.state.manifest import nodeclaim_manifest
from controller.state.writer import WRITE_CONCURRENCY, CreateReason, NewClaim, NodeClaimWriter
from tests.unit.fakeapi import FakeKube
from tests.unit.harness import Harness

Obj = dict[str, Any]


def _pool(name: str) -> Obj:
    return {
        "apiVersion": wk.API_VERSION,
        "kind": "NodePool",
        "metadata": {"name": name, "uid": f"u-{name}"},
        "spec": {"template": {"spec": {"nodeClassRef": {"name": "default"}}}},
    }


def planned(pool: str, *, count: int = 1, gang: str | None = None) -> list[NewClaim]:
    """``count`` machines solves bought in NodePool ``pool``, with their manifests."""
    out: list[NewClaim] = []
    for i in range(count):
        pod = Pod(name=f"p{i}", requests=Resources.parse({"cpu": "3"}), gang=gang)
        [node] = solve(pods=[pod], node_pools=[NodePoolTemplate(name=pool, instance_types=load_catalog())]).new_nodes
        out.append(NewClaim(node, nodeclaim_manifest(node, _pool(pool))))
    return out


def created_total(pool: str, reason: str) -> float:
    return REGISTRY.get_sample_value("joiner_nodeclaims_created_total", {"nodepool": pool, "reason": reason}) or 0.0


def price_total(pool: str) -> float:
    return REGISTRY.get_sample_value("joiner_provisioner_price_per_hour_created_total", {"nodepool": pool}) or 0.0


async def test_nothing_is_written_without_the_lock(harness: Harness) -> None:
    with pytest.raises(RuntimeError, match="lock"):
        await harness.ctx.writer.create(planned("nolock"), reason="provisioning")
    assert harness.kube.objects(NODECLAIMS) == {}


async def test_a_created_nodeclaim_is_counted_logged_and_in_flight_until_the_cache_shows_it(harness: Harness) -> None:
    h = harness
    writer = h.ctx.writer
    [request] = planned("w-prov")
    h.kube.lag(NODECLAIMS)
    with capture_logs() as logs:
        async with writer.lock:
            [written] = await writer.create([request], reason="provisioning", note="x")
    assert written.claim is not None
    assert written.error is None
    assert not written.existed
    name = written.name
    assert name.startswith("w-prov-")
    assert h.kube.obj(NODECLAIMS, name) is not None
    assert created_total("w-prov", "provisioning") == 1
    assert price_total("w-prov") == pytest.approx(request.node.choice.price)
    [line] = [e for e in logs if e["event"] == "nodeclaim.created"]
    assert line["reason"] == "provisioning"
    assert line["nodeclaim"] == name
    assert line["nodepool"] == "w-prov"
    assert line["instance_type"] == request.node.choice.instance_type
    assert line["price_per_hour"] == request.node.choice.price
    assert line["note"] == "x"
    # the cache has not seen it yet: every decision counts it through the writer
    assert name not in h.cluster.claim_views()
    assert [c.name for c in writer.in_flight()] == [name]
    assert writer.just_created(name) is not None
    # the view of a claim created here is made once, not on every look (a burst looks very often)
    assert writer.in_flight()[0] is writer.in_flight()[0] is writer.just_created(name)
    h.kube.catch_up(NODECLAIMS)
    await h.cached("NodeClaim", name)
    assert writer.in_flight() == []


async def test_a_nodeclaim_deleted_before_a_decision_looked_is_not_counted_once_the_cache_saw_it(
    harness: Harness,
) -> None:
    h = harness
    writer = h.ctx.writer
    async with writer.lock:
        [written] = await writer.create(planned("w-gone"), reason="gang")
    await h.cached("NodeClaim", written.name)
    await h.kube.delete(NODECLAIMS, written.name)
    await h.cached("NodeClaim", written.name)  # gone from the cache as well
    assert writer.in_flight() == []


@pytest.mark.parametrize(
    ("reason", "label", "priced"),
    [
        ("gang", "gang", True),
        ("consolidation", "disruption", False),
        ("drift", "disruption", False),
        ("expiration", "disruption", False),
    ],
)
async def test_the_metric_keeps_its_reason_values_and_prices_only_what_was_bought_for_pods(
    harness: Harness, reason: CreateReason, label: str, priced: bool
) -> None:
    pool = f"w-{reason}"
    requests = planned(pool, gang="ml.train" if reason == "gang" else None)
    with capture_logs() as logs:
        async with harness.ctx.writer.lock:
            await harness.ctx.writer.create(requests, reason=reason)
    assert created_total(pool, label) == 1
    assert price_total(pool) == (pytest.approx(requests[0].node.choice.price) if priced else 0.0)
    [line] = [e for e in logs if e["event"] == "nodeclaim.created"]
    assert line["reason"] == reason
    assert line["gang"] == ("ml.train" if reason == "gang" else None)


class RefusingKube(FakeKube):
    """An apiserver that refuses NodeClaims whose spec carries ``bad`` (an admission webhook would)."""

    async def create(self, res: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        if (obj.get("spec") or {}).get("bad"):
            raise InvalidError(422, "Invalid", "spec.bad: not allowed")
        return await super().create(res, obj, namespace=namespace)


class SlowKube(FakeKube):
    """An apiserver that takes a few turns of the event loop per create, counting how many overlap."""

    busy = 0
    most = 0

    async def create(self, res: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        self.busy += 1
        self.most = max(self.most, self.busy)
        for _ in range(3):
            await asyncio.sleep(0)
        self.busy -= 1
        return await super().create(res, obj, namespace=namespace)


async def test_a_refused_write_is_reported_not_counted_and_not_in_flight(harness: Harness) -> None:
    kube = RefusingKube(clock=harness.clock)
    writer = NodeClaimWriter(client=kube, cluster=harness.cluster, clock=harness.clock)
    refused, accepted = planned("w-refused", count=2)
    refused.manifest["spec"]["bad"] = True
    with capture_logs() as logs:
        async with writer.lock:
            first, second = await writer.create([refused, accepted], reason="provisioning")
    assert first.claim is None
    assert first.error is not None
    assert "spec.bad" in first.error
    assert second.claim is not None  # one refusal does not stop the others
    assert created_total("w-refused", "provisioning") == 1
    assert [c.name for c in writer.in_flight()] == [second.name]
    [line] = [e for e in logs if e["event"] == "nodeclaim.create_failed"]
    assert line["reason"] == "provisioning"
    assert line["nodepool"] == "w-refused"


async def test_a_named_nodeclaim_that_exists_already_is_not_created_or_counted_twice(harness: Harness) -> None:
    h = harness
    writer = h.ctx.writer
    [request] = planned("w-again")
    request.manifest["metadata"]["name"] = "w-again-fixed"
    async with writer.lock:
        [first] = await writer.create([request], reason="gang")
    async with writer.lock:  # a retry after a crash writes the same name again
        [again] = await writer.create([request], reason="gang")
    assert first.claim is not None
    assert not first.existed
    assert again.existed
    assert again.claim is not None
    assert again.error is None
    assert again.name == "w-again-fixed"
    assert created_total("w-again", "gang") == 1
    assert list(h.kube.objects(NODECLAIMS)) == ["w-again-fixed"]


async def test_writes_go_a_few_dozen_at_a_time_and_come_back_in_order(harness: Harness) -> None:
    kube = SlowKube(clock=harness.clock)
    writer = NodeClaimWriter(client=kube, cluster=harness.cluster, clock=harness.clock)
    requests = planned("w-many", count=120)
    async with writer.lock:
        written = await writer.create(requests, reason="provisioning")
    assert [w.request for w in written] == requests
    assert all(w.claim is not None for w in written)
    assert len(kube.objects(NODECLAIMS)) == 120
    assert kube.most == WRITE_CONCURRENCY == 48


class FlakyKube(FakeKube):
    """An apiserver whose answers get lost: the first ``lost`` creates are committed and then the
    connection breaks (a restarting apiserver does that), the next ``down`` ones never arrive."""

    lost = 0
    down = 0
    unreadable = 0  # reads that get no answer either

    async def get(self, res: Resource, name: str, *, namespace: str | None = None) -> Obj:
        if self.unreadable:
            self.unreadable -= 1
            raise TransportError(f"GET {res.plural}/{name}: ServerDisconnectedError")
        return await super().get(res, name, namespace=namespace)

    async def create(self, res: Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        if self.down and not self.lost:
            self.down -= 1
            self._record("create", res, str((obj.get("metadata") or {}).get("name")))
            raise TransportError("POST nodeclaims: ClientConnectorError: connection refused")
        created = await super().create(res, obj, namespace=namespace)
        if self.lost:
            self.lost -= 1
            raise TransportError("POST nodeclaims: ServerDisconnectedError: Server disconnected")
        return created


def flaky(h: Harness, *, lost: int = 0, down: int = 0, unreadable: int = 0) -> tuple[FlakyKube, NodeClaimWriter]:
    """A writer over an apiserver that loses ``lost`` answers, ``down`` requests and ``unreadable`` reads."""
    kube = FlakyKube(clock=h.clock)
    kube.lost, kube.down, kube.unreadable = lost, down, unreadable
    return kube, NodeClaimWriter(client=kube, cluster=h.cluster, clock=h.clock)


async def _written_while_time_passes(h: Harness, writer: NodeClaimWriter, requests: list[NewClaim]) -> list[Any]:
    async with writer.lock:
        task = asyncio.create_task(writer.create(requests, reason="provisioning"))
        for _ in range(200):
            if task.done():
                break
            await h.clock.advance(1.0)
        return await task


async def test_a_create_whose_answer_was_lost_is_sent_again_under_its_name_and_bought_once(harness: Harness) -> None:
    h = harness
    kube, writer = flaky(h, lost=1)
    [request] = planned("w-lost")
    assert "generateName" in request.manifest["metadata"]
    with capture_logs() as logs:
        [written] = await _written_while_time_passes(h, writer, [request])
    # one machine: the second try under the same name met the first try's NodeClaim and took it
    [name] = kube.objects(NODECLAIMS)
    assert written.claim is not None
    assert written.error is None
    assert written.name == name
    assert name.startswith("w-lost-")
    assert [c for c in kube.calls if c[0] == "create"] == [("create", "nodeclaims", name)] * 2
    assert created_total("w-lost", "provisioning") == 1
    assert [c.name for c in writer.in_flight()] == [name]
    [retry] = [e for e in logs if e["event"] == "nodeclaim.create_retry"]
    assert "Server disconnected" in retry["error"]
    [line] = [e for e in logs if e["event"] == "nodeclaim.created"]
    assert line["nodeclaim"] == name
    assert line["tries"] == 2


async def test_a_create_that_never_arrived_is_sent_again_and_written_once(harness: Harness) -> None:
    h = harness
    kube, writer = flaky(h, down=3)
    [written] = await _written_while_time_passes(h, writer, planned("w-down"))
    assert written.claim is not None
    assert list(kube.objects(NODECLAIMS)) == [written.name]
    assert len([c for c in kube.calls if c[0] == "create"]) == 4
    assert created_total("w-down", "provisioning") == 1


async def test_a_chosen_name_someone_else_has_is_not_taken_for_ours(harness: Harness) -> None:
    h = harness
    names = iter(["taken", "taken", "fresh"])
    writer = NodeClaimWriter(client=h.kube, cluster=h.cluster, clock=h.clock, suffix=lambda: next(names))
    [first] = planned("w-clash")
    async with writer.lock:
        [mine] = await writer.create([first], reason="provisioning")
    assert mine.name == "w-clash-taken"
    # a NodeClaim of that name that the cache has not shown: the apiserver says 409, and it is not ours
    h.kube.lag(NODECLAIMS)
    names = iter(["taken", "fresh"])
    other = NodeClaimWriter(client=h.kube, cluster=h.cluster, clock=h.clock, suffix=lambda: next(names))
    [second] = planned("w-clash")
    async with other.lock:
        [written] = await other.create([second], reason="provisioning")
    assert written.name == "w-clash-fresh"
    assert not written.existed
    assert sorted(h.kube.objects(NODECLAIMS)) == ["w-clash-fresh", "w-clash-taken"]
    assert created_total("w-clash", "provisioning") == 2


async def test_no_answer_for_a_minute_is_a_failure_counted_in_flight_so_nothing_is_bought_twice(
    harness: Harness,
) -> None:
    h = harness
    kube, writer = flaky(h, down=10_000)
    with capture_logs() as logs:
        [written] = await _written_while_time_passes(h, writer, planned("w-away"))
    assert written.claim is None
    assert written.error is not None
    assert "it may exist" in written.error
    assert kube.objects(NODECLAIMS) == {}
    assert created_total("w-away", "provisioning") == 0
    # it may have been written: decisions count it until the cache shows it or a minute passes
    [maybe] = writer.in_flight()
    assert maybe.name == written.name
    assert [e["event"] for e in logs if e["event"].startswith("nodeclaim.create_")][-1] == "nodeclaim.create_failed"
    await h.clock.advance(61)
    assert writer.in_flight() == []


async def test_a_named_nodeclaim_whose_answer_was_lost_is_taken_only_if_it_is_the_one_written(
    harness: Harness,
) -> None:
    h = harness
    kube, writer = flaky(h, lost=1)
    [request] = planned("w-gangname", gang="ml.train")
    request.manifest["metadata"]["name"] = "w-gangname-g1-0"
    [written] = await _written_while_time_passes(h, writer, [request])
    assert written.claim is not None
    assert not written.existed  # this write made it: it is counted as created, once
    assert created_total("w-gangname", "provisioning") == 1
    # another write of the same name with other annotations, its answer lost: not the one written
    kube.down = 1
    [other] = planned("w-gangname", gang="ml.train")
    other.manifest["metadata"]["name"] = "w-gangname-g1-0"
    other.manifest["metadata"]["annotations"][wk.ANNOTATION_PLANNED_PRICE] = "9.9999"
    [refused] = await _written_while_time_passes(h, writer, [other])
    assert refused.claim is None
    assert refused.error is not None
    assert "already exists" in refused.error


async def test_a_lost_answer_that_cannot_be_read_back_yet_keeps_its_name_until_it_can(harness: Harness) -> None:
    """409 after a lost answer, and the NodeClaim cannot be read yet: the writer tries the same name
    again (another name could buy the machine twice) until it can tell the NodeClaim is its own."""
    h = harness
    kube, writer = flaky(h, lost=1, unreadable=2)
    [written] = await _written_while_time_passes(h, writer, planned("w-unread"))
    [name] = kube.objects(NODECLAIMS)
    assert written.claim is not None
    assert written.name == name
    assert {c[2] for c in kube.calls if c[0] == "create"} == {name}
    assert created_total("w-unread", "provisioning") == 1
