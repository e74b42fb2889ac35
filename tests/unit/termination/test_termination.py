"""Termination end to end on the in-memory apiserver: taint, evict (PDB-aware), delete, release."""

from __future__ import annotations

import pytest

from api.v1.labels import TAINT_DISRUPTED
from controller.kube.resources import NODECLAIMS, NODES, PODS
from controller.nodeclaim.lifecycle import LifecycleController
from controller.termination.controller import TerminationController
from tests.unit.harness import Harness


@pytest.fixture
async def world(harness: Harness) -> Harness:
    harness.start(LifecycleController(harness.ctx), TerminationController(harness.ctx))
    await harness.create_nodeclass()
    return harness


async def running_node(h: Harness, name: str, **claim_kw: object) -> None:
    await h.create_claim(name, instance_types=["cpu-4"], **claim_kw)  # type: ignore[arg-type]
    await h.eventually(lambda: h.condition_status(name, "Registered") == "True", f"{name} registered")
    await h.make_ready(name)
    await h.eventually(lambda: h.condition_status(name, "Initialized") == "True", f"{name} initialized")


def gone(h: Harness, name: str) -> bool:
    return h.claim(name) is None and h.node(name) is None


def pods_on(h: Harness, node: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in h.kube.objects(PODS).values() if p["spec"].get("nodeName") == node)


async def test_deleting_a_claim_drains_its_node_then_releases_it(world: Harness) -> None:
    h = world
    await running_node(h, "nc-1")
    await h.bind_pod("web-1", "nc-1")
    await h.bind_pod("web-2", "nc-1")
    await h.bind_pod("ds-1", "nc-1", metadata={"ownerReferences": [{"kind": "DaemonSet", "name": "ds", "uid": "d"}]})
    await h.cached("Pod", "default/ds-1")
    await h.kube.delete(NODECLAIMS, "nc-1")
    await h.eventually(lambda: gone(h, "nc-1"), "NodeClaim and Node gone")
    assert pods_on(h, "nc-1") == ["ds-1"]  # daemonset pods go with the Node (pod GC), never evicted
    assert {"Terminating", "Terminated"} <= set(h.kube.event_reasons("nc-1"))
    assert "Evicted" in h.kube.event_reasons("web-1")
    evictions = sorted(name for verb, _, name in h.kube.calls if verb == "evict")
    assert evictions == ["web-1", "web-2"]
    taint_patches = [c for c in h.kube.calls if c == ("patch", "nodes", "nc-1")]
    assert taint_patches  # tainted (and finalizer released) through patches


async def test_the_node_is_tainted_and_the_claim_waits_for_a_pdb(world: Harness) -> None:
    h = world
    await running_node(h, "nc-1")
    await h.bind_pod("db-0", "nc-1")
    h.kube.blocked_evictions.add(("default", "db-0"))
    await h.cached("Pod", "default/db-0")
    await h.kube.delete(NODECLAIMS, "nc-1")
    await h.eventually(lambda: h.condition_status("nc-1", "Drained") == "False", "drain started")
    await h.eventually(
        lambda: (h.condition("nc-1", "Drained") or {}).get("reason") == "EvictionBlocked", "blocked by the PDB"
    )
    node = h.node("nc-1")
    assert node is not None
    assert any(t["key"] == TAINT_DISRUPTED for t in node["spec"]["taints"])
    await h.advance(600)
    assert h.claim("nc-1") is not None
    assert pods_on(h, "nc-1") == ["db-0"]
    assert "EvictionBlocked" in h.kube.event_reasons("db-0")
    drained = h.condition("nc-1", "Drained")
    assert drained is not None
    assert "default/db-0" in drained["message"]

    h.kube.blocked_evictions.clear()  # the PDB allows it now
    await h.advance(5)
    await h.eventually(lambda: gone(h, "nc-1"), "terminated once the PDB allows")


async def test_the_termination_grace_period_overrides_a_pdb(world: Harness) -> None:
    h = world
    await running_node(h, "nc-1", termination_grace_period="10m")
    await h.bind_pod("db-0", "nc-1")
    h.kube.blocked_evictions.add(("default", "db-0"))
    await h.cached("Pod", "default/db-0")
    await h.kube.delete(NODECLAIMS, "nc-1")
    await h.eventually(
        lambda: (h.condition("nc-1", "Drained") or {}).get("reason") == "EvictionBlocked", "blocked by the PDB"
    )
    await h.advance(590)
    assert pods_on(h, "nc-1") == ["db-0"]
    for _ in range(3):
        await h.advance(5)
    await h.eventually(lambda: gone(h, "nc-1"), "terminated after the grace period")
    assert ("delete", "pods", "db-0") in h.kube.calls


async def test_pods_that_take_time_to_stop_are_waited_for(world: Harness) -> None:
    h = world
    h.kube.graceful_pod_deletion = True
    await running_node(h, "nc-1")
    await h.bind_pod("web-1", "nc-1")
    await h.cached("Pod", "default/web-1")
    await h.kube.delete(NODECLAIMS, "nc-1")
    await h.eventually(lambda: ("evict", "pods", "web-1") in h.kube.calls, "evicted")
    await h.advance(30)
    assert h.claim("nc-1") is not None
    assert h.node("nc-1") is not None
    h.kube.finish_pod_deletions()
    await h.eventually(lambda: gone(h, "nc-1"), "terminated once the pod stopped")


async def test_kubectl_delete_node_terminates_the_claim_gracefully(world: Harness) -> None:
    h = world
    await running_node(h, "nc-1")
    await h.bind_pod("web-1", "nc-1")
    await h.cached("Pod", "default/web-1")
    await h.kube.delete(NODES, "nc-1")
    await h.eventually(lambda: gone(h, "nc-1"), "Node and NodeClaim gone")
    assert ("evict", "pods", "web-1") in h.kube.calls
    assert "NodeDeleted" in h.kube.event_reasons("nc-1")


async def test_a_claim_deleted_before_its_node_registered_is_released(world: Harness) -> None:
    h = world
    await h.create_nodeclass("slow", registrationDelay="10m")
    await h.create_claim("nc-1", instance_types=["cpu-4"], nodeclass="slow")
    await h.eventually(lambda: h.condition_status("nc-1", "Launched") == "True", "launched")
    await h.kube.delete(NODECLAIMS, "nc-1")
    await h.eventually(lambda: h.claim("nc-1") is None, "released")
    await h.advance(600)
    assert h.node("nc-1") is None  # the delayed Node is never created for a deleted claim
    assert h.condition_status("nc-1", "Drained") is None


async def test_a_node_with_our_finalizer_but_no_claim_is_let_go(world: Harness) -> None:
    h = world
    await h.kube.create(
        NODES, {"metadata": {"name": "stray", "finalizers": ["joiner.sh/termination"]}, "spec": {"providerID": "x://1"}}
    )
    await h.cached("Node", "stray")
    await h.kube.delete(NODES, "stray")
    await h.eventually(lambda: h.node("stray") is None, "finalizer removed")


async def test_pods_leave_by_eviction_priority_and_a_bad_value_gets_an_event(world: Harness) -> None:
    h = world
    await running_node(h, "nc-1")
    ann = "joiner.sh/eviction-priority"
    await h.bind_pod("db", "nc-1", metadata={"annotations": {ann: "high"}})
    await h.bind_pod("web", "nc-1")
    await h.bind_pod("batch", "nc-1", metadata={"annotations": {ann: "low"}})
    await h.bind_pod("odd", "nc-1", metadata={"annotations": {ann: "urgent"}})
    for name in ("db", "web", "batch", "odd"):
        await h.cached("Pod", f"default/{name}")
    await h.kube.delete(NODECLAIMS, "nc-1")
    await h.eventually(lambda: gone(h, "nc-1"), "NodeClaim and Node gone")
    evictions = [name for verb, _, name in h.kube.calls if verb == "evict"]
    assert evictions.index("batch") < min(evictions.index("web"), evictions.index("odd"))
    assert max(evictions.index("web"), evictions.index("odd")) < evictions.index("db")
    assert "InvalidEvictionPriority" in h.kube.event_reasons("odd")
    assert "InvalidEvictionPriority" not in h.kube.event_reasons("web")


async def test_a_node_deleted_while_its_claim_is_going_is_let_go_once_the_claim_is_gone(harness: Harness) -> None:
    """A gang rolled back a moment after a machine registered: the provider deleted the Node (our
    finalizer holds it) while its NodeClaim was still terminating, and the Node's reconcile handed it
    to the claim's. When the claim then goes, nothing else changes on the Node: the claim's DELETED
    event must bring the Node back, or it stays Terminating forever (seen on the KWOK cluster)."""
    h = harness
    h.start(TerminationController(h.ctx))
    claim = {
        "metadata": {"name": "nc-1", "finalizers": ["example.com/hold"]},  # not ours: its own path ends at once
        "spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}},
        "status": {"providerID": "kwok://nc-1"},
    }
    await h.kube.create(NODECLAIMS, claim)
    await h.kube.create(
        NODES,
        {"metadata": {"name": "nc-1", "finalizers": ["joiner.sh/termination"]}, "spec": {"providerID": "kwok://nc-1"}},
    )
    await h.cached("NodeClaim", "nc-1")
    await h.cached("Node", "nc-1")
    await h.kube.delete(NODECLAIMS, "nc-1")
    await h.kube.delete(NODES, "nc-1")
    await h.advance(5)
    node = h.node("nc-1")
    assert node is not None
    assert node["metadata"]["finalizers"] == ["joiner.sh/termination"]  # its claim still owns it
    await h.kube.patch(NODECLAIMS, "nc-1", [{"op": "remove", "path": "/metadata/finalizers/0"}], patch_type="json")
    assert h.claim("nc-1") is None
    await h.eventually(lambda: h.node("nc-1") is None, "the Node let go once its NodeClaim is gone")
