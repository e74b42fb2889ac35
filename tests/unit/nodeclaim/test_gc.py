"""Garbage collection: instances without NodeClaims, NodeClaims without Nodes."""

from __future__ import annotations

from typing import Any

from api.v1.labels import ANNOTATION_KWOK_NODE, LABEL_INSTANCE_TYPE
from controller.cloudprovider.kwok.node import ANNOTATION_LAUNCHED_BY, LAUNCHED_BY_KWOK
from controller.cloudprovider.types import Instance
from controller.kube.resources import NODES
from controller.nodeclaim.gc import GarbageCollector, claims_without_node, orphaned_instances
from controller.nodeclaim.lifecycle import LifecycleController
from controller.state.views import NodeClaimView
from tests.unit.harness import Harness

Obj = dict[str, Any]


def inst(pid: str, claim: str, state: str = "running") -> Instance:
    return Instance(provider_id=pid, nodeclaim=claim, instance_type="t", zone="z", capacity_type="spot", state=state)


def claim_obj(name: str, pid: str | None = None, **extra: Any) -> Obj:
    status: Obj = {"providerID": pid} if pid else {}
    status.update(extra)
    return {"metadata": {"name": name}, "status": status}


def test_an_instance_is_orphaned_only_when_no_claim_accounts_for_it() -> None:
    claims = {
        "a": claim_obj("a", "kwok://a"),
        "b": claim_obj("b"),  # launching: status not written yet
        "c": claim_obj("c", "kwok://c-other"),
    }
    instances = [
        inst("kwok://a", "a"),
        inst("kwok://b", "b"),
        inst("kwok://c", "c"),
        inst("kwok://x", "x"),
        inst("kwok://y", "y", state="terminating"),
    ]
    views = {name: NodeClaimView.of(claim) for name, claim in claims.items()}
    assert [i.provider_id for i in orphaned_instances(instances=instances, claims=views)] == ["kwok://c", "kwok://x"]


def test_a_registered_claim_without_node_is_a_candidate() -> None:
    reg = {"type": "Registered", "status": "True"}
    claims = {
        "a": claim_obj("a", "p", conditions=[reg]),
        "b": claim_obj("b", "q", conditions=[reg]),
        "c": claim_obj("c"),
    }
    views = {name: NodeClaimView.of(claim) for name, claim in claims.items()}
    assert [c.name for c in claims_without_node(claims=views, has_node={"a": True, "b": False})] == ["b"]


async def _orphan_node(h: Harness, name: str, *, ours: bool = True) -> None:
    """A Node the kwok provider launched (`ours`) whose NodeClaim is gone, or one someone else made."""
    annotations = {ANNOTATION_KWOK_NODE: "fake"}
    if ours:
        annotations[ANNOTATION_LAUNCHED_BY] = LAUNCHED_BY_KWOK
    await h.kube.create(
        NODES,
        {
            "metadata": {
                "name": name,
                "labels": {LABEL_INSTANCE_TYPE: "cpu-4"},
                "annotations": annotations,
                "finalizers": ["joiner.sh/termination"],
            },
            "spec": {"providerID": f"kwok://{name}"},
        },
    )
    await h.cached("Node", name)


async def test_a_kwok_node_without_a_claim_is_collected_after_the_grace_period(harness: Harness) -> None:
    h = harness
    gc = GarbageCollector(h.ctx, grace_seconds=30)
    await _orphan_node(h, "stray")
    await gc.collect()
    await h.advance(29)
    await gc.collect()
    node = h.node("stray")
    assert node is not None
    assert not node["metadata"].get("deletionTimestamp")
    await h.advance(1)
    await gc.collect()
    node = h.node("stray")
    assert node is not None
    assert node["metadata"].get("deletionTimestamp")


async def test_a_kwok_node_joiner_did_not_launch_is_never_collected(harness: Harness) -> None:
    h = harness
    gc = GarbageCollector(h.ctx, grace_seconds=30)
    await _orphan_node(h, "someone-elses", ours=False)
    await gc.collect()
    await h.advance(120)
    await gc.collect()
    node = h.node("someone-elses")
    assert node is not None
    assert not node["metadata"].get("deletionTimestamp")


async def test_an_orphan_that_gets_its_claim_back_is_spared(harness: Harness) -> None:
    h = harness
    gc = GarbageCollector(h.ctx, grace_seconds=30)
    await _orphan_node(h, "nc-1")
    await gc.collect()
    await h.create_claim("nc-1", instance_types=["cpu-4"])  # e.g. its launch was still being recorded
    await h.advance(60)
    await gc.collect()
    node = h.node("nc-1")
    assert node is not None
    assert not node["metadata"].get("deletionTimestamp")


async def test_a_claim_whose_node_vanished_is_deleted(harness: Harness) -> None:
    h = harness
    h.start(LifecycleController(h.ctx))
    gc = GarbageCollector(h.ctx, grace_seconds=30)
    await h.create_nodeclass()
    await h.create_claim("nc-1", instance_types=["cpu-4"])
    await h.eventually(lambda: h.condition_status("nc-1", "Registered") == "True", "registered")
    await h.kube.patch(NODES, "nc-1", {"metadata": {"finalizers": None}})  # force-removed by someone
    await h.kube.delete(NODES, "nc-1")
    await h.cached("Node", "nc-1")
    await gc.collect()
    await h.advance(30)
    await gc.collect()
    claim = h.claim("nc-1")
    assert claim is not None
    assert claim["metadata"].get("deletionTimestamp")
    assert "NodeVanished" in h.kube.event_reasons("nc-1")


async def test_run_collects_on_its_interval(harness: Harness) -> None:
    h = harness
    gc = GarbageCollector(h.ctx, grace_seconds=30)
    h.start(gc)
    await _orphan_node(h, "stray")
    await h.advance(60)
    await h.advance(60)
    node = h.node("stray")
    assert node is not None
    assert node["metadata"].get("deletionTimestamp")
