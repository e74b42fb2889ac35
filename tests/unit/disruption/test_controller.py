"""The disruption controller against the in-memory apiserver: what a user sees on NodeClaims,
Nodes and Events, and in which order things happen."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from controller.clock import format_time
from controller.cloudprovider.types import OfferingId
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.disruption import metrics
from controller.disruption.controller import (
    ANNOTATION_REPLACEMENT_FOR,
    POD_EVENT_RECORD_SECONDS,
    DisruptionController,
    coalesced,
)
from controller.kube.resources import KWOKNODECLASSES, NODECLAIMS, NODEPOOLS, PODS
from controller.nodeclaim.lifecycle import LifecycleController
from controller.state.deletion import ANNOTATION_TERMINATION_REASON
from controller.state.patches import ConditionUpdate
from controller.state.views import NodeClaimView
from tests.unit.disruption.world import World


def _metric(counter: object, *labels: str) -> float:
    return float(counter.labels(*labels)._value.get())  # type: ignore[attr-defined]


async def test_an_empty_node_is_deleted_after_the_validation_delay(world: World) -> None:
    await world.nodepool()
    await world.node("busy")
    await world.pod("web-1", "busy")
    await world.node("idle")
    before = _metric(metrics.DECISIONS, "default", "Empty", "delete")

    decision = await world.controller.reconcile()
    [command] = decision.commands
    assert command.candidates == ("idle",)
    await world.settle()
    assert world.claim("idle") is not None  # validation waits first
    await world.advance(5)
    assert world.claim("idle") is None
    assert world.claim("busy") is not None
    assert "Disrupting" in world.kube.event_reasons("idle")
    assert _metric(metrics.DECISIONS, "default", "Empty", "delete") == before + 1


async def test_a_node_is_replaced_by_a_cheaper_one_only_once_the_replacement_is_initialized(world: World) -> None:
    await world.nodepool()
    await world.node("pricey")  # cpu-4 on-demand, 0.20/h
    await world.pod("web-1", "pricey")
    await world.advance(31)  # consolidateAfter since the pod landed

    [command] = (await world.controller.reconcile()).commands
    assert command.action == "replace"
    assert command.replacements[0].choice.capacity_type == "spot"  # cpu-4 spot, 0.08/h
    await world.advance(5)
    [replacement] = [c for c in world.claims().values() if c["metadata"]["name"] != "pricey"]
    assert replacement["metadata"]["annotations"][ANNOTATION_REPLACEMENT_FOR] == "pricey"
    assert world.condition("pricey", "DisruptionReason")["reason"] == "Underutilized"  # type: ignore[index]
    await world.advance(10)
    assert world.claim("pricey") is not None  # nothing is drained before the replacement is up

    labels = {
        "joiner.sh/nodepool": "default",
        "node.kubernetes.io/instance-type": "cpu-4",
        "topology.kubernetes.io/zone": "zone-a",
        "joiner.sh/capacity-type": "spot",
    }
    await world.make_node(replacement, instance_type="cpu-4", labels=labels)
    await world.advance(1)
    assert world.claim("pricey") is None
    assert world.claim(replacement["metadata"]["name"]) is not None
    assert "DisruptionReplacement" in world.kube.event_reasons(replacement["metadata"]["name"])
    assert world.kube.events("pricey")  # the NodeClaim and
    assert "Disrupting" in [e["reason"] for e in world.kube.events("pricey") if e["involvedObject"]["kind"] == "Node"]


async def test_if_a_replacement_fails_nothing_is_drained(world: World) -> None:
    await world.nodepool()
    await world.node("pricey")
    await world.pod("web-1", "pricey")
    await world.advance(31)
    await world.controller.reconcile()
    await world.advance(5)
    [replacement] = [n for n in world.claims() if n != "pricey"]
    await world.kube.delete(NODECLAIMS, replacement)  # e.g. the launch timed out
    await world.advance(1)
    claim = world.claim("pricey")
    assert claim is not None
    assert not claim["metadata"].get("deletionTimestamp")
    assert "DisruptionAborted" in world.kube.event_reasons("pricey")
    reason = world.condition("pricey", "DisruptionReason")
    assert reason is not None
    assert (reason["status"], reason["reason"]) == ("False", "Aborted")
    assert not world.controller.active


async def test_pods_arriving_during_validation_cancel_an_emptiness(world: World) -> None:
    await world.nodepool()
    await world.node("idle")
    await world.node("other")
    await world.pod("web-1", "other")
    await world.controller.reconcile()
    await world.pod("late-1", "idle")
    await world.advance(5)
    assert world.claim("idle") is not None
    assert not world.controller.active


async def test_do_not_disrupt_and_pdbs_keep_nodes_and_say_why(world: World) -> None:
    await world.nodepool()
    await world.node("keep")
    await world.pod("special-1", "keep", annotations={"karpenter.sh/do-not-disrupt": "true"})
    await world.node("guarded")
    await world.pod("db-1", "guarded")
    await world.pdb("db", app="db", allowed=0)
    await world.node("roomy")
    await world.pod("web-1", "roomy")
    await world.advance(31)
    decision = await world.controller.reconcile()
    assert all({"keep", "guarded"}.isdisjoint(c.candidates) for c in decision.commands)
    messages = [e["message"] for e in world.kube.events("keep")]
    assert any("do-not-disrupt" in m for m in messages), messages
    assert any("PodDisruptionBudget" in e["message"] for e in world.kube.events("guarded"))


async def test_an_expired_node_is_replaced(world: World) -> None:
    await world.nodepool()
    await world.node("old", expire_after="1h")
    await world.pod("web-1", "old", cpu="3")
    await world.advance(3601)
    [command] = (await world.controller.reconcile()).commands
    assert (command.reason, command.action) == ("Expired", "replace")


async def test_a_template_change_marks_nodeclaims_drifted(world: World) -> None:
    await world.nodepool()
    await world.node("n1")
    await world.pod("web-1", "n1", cpu="3")
    await world.controller.reconcile()
    assert world.condition("n1", "Drifted") is None
    await world.kube.patch(NODEPOOLS, "default", {"spec": {"template": {"metadata": {"labels": {"team": "ml"}}}}})
    await world.h.cached("NodePool", "default")
    for task in list(world.controller.running):
        task.cancel()
    world.controller.active.clear()
    decision = await world.controller.reconcile()
    drifted = world.condition("n1", "Drifted")
    assert drifted is not None
    assert drifted["status"] == "True"
    assert "spec.template changed" in drifted["message"]
    assert [c.reason for c in decision.commands] == ["Drifted"]


async def test_consolidatable_follows_pod_events_and_last_pod_event_time_is_recorded(world: World) -> None:
    await world.nodepool()
    await world.node("n1")
    await world.pod("web-1", "n1")
    await world.node("n2")
    await world.pod("web-2", "n2", cpu="3")
    await world.controller.reconcile()
    assert world.condition("n1", "Consolidatable")["status"] == "False"  # type: ignore[index]
    await world.advance(31)
    await world.controller.reconcile()
    assert world.condition("n1", "Consolidatable")["status"] == "True"  # type: ignore[index]
    for task in list(world.controller.running):
        task.cancel()
    world.controller.active.clear()
    await world.pod("web-3", "n1")  # a pod lands: n1 is not stable any more
    await world.controller.reconcile()
    cond = world.condition("n1", "Consolidatable")
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("False", "PodsChanged")
    claim = world.claim("n1")
    assert claim is not None
    assert claim["status"]["lastPodEventTime"]
    assert world.claim("n2") is not None
    assert ANNOTATION_TERMINATION_REASON not in (world.claim("n2") or {})["metadata"].get("annotations", {})


async def test_a_quiet_cluster_gets_no_status_writes(world: World) -> None:
    await world.nodepool()
    await world.node("n1")
    await world.advance(0.25)  # pod events between whole seconds: the status field only holds seconds
    await world.pod("web-1", "n1")
    await world.controller.reconcile()
    await world.settle()
    claim = world.claim("n1")
    assert claim is not None
    assert claim["status"]["lastPodEventTime"]
    world.kube.calls.clear()
    for _ in range(3):
        await world.controller.reconcile()
        await world.settle()
    assert [c for c in world.kube.calls if c[0] != "get" and c[1] == "nodeclaims"] == []


async def test_pods_landing_one_after_another_move_last_pod_event_time_at_most_once_a_minute(world: World) -> None:
    """A burst binds pods to a node over minutes: each new pod is not a NodeClaim status write."""
    await world.nodepool()
    await world.node("n1")
    await world.pod("web-1", "n1")
    await world.controller.reconcile()
    await world.settle()
    first = (world.claim("n1") or {})["status"]["lastPodEventTime"]
    writes = []
    for i in range(2, 6):  # a pod every 10 s: the condition stays False/PodsChanged
        await world.advance(10)
        world.kube.calls.clear()
        await world.pod(f"web-{i}", "n1")
        await world.controller.reconcile()
        await world.settle()
        writes += [c for c in world.kube.calls if c[0] != "get" and c[1] == "nodeclaims"]
    assert writes == []
    assert (world.claim("n1") or {})["status"]["lastPodEventTime"] == first
    await world.advance(25)  # the recorded time is a minute old: the next pod event is written
    await world.pod("web-9", "n1")
    await world.controller.reconcile()
    await world.settle()
    assert (world.claim("n1") or {})["status"]["lastPodEventTime"] > first
    cond = world.condition("n1", "Consolidatable")
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("False", "PodsChanged")


def test_only_a_moved_time_or_message_waits() -> None:
    now = datetime(2026, 11, 26, tzinfo=UTC)
    raw = {
        "metadata": {"name": "n1"},
        "status": {
            "conditions": [{"type": "Consolidatable", "status": "False", "reason": "PodsChanged", "message": "a"}]
        },
    }
    claim = NodeClaimView.of(raw)
    later = now + timedelta(seconds=10)
    moved = [ConditionUpdate("Consolidatable", "False", "PodsChanged", "b")]
    flipped = [ConditionUpdate("Consolidatable", "True", "Consolidatable", "c")]
    assert coalesced(claim, [], seen=later, recorded=now)
    assert coalesced(claim, moved, seen=later, recorded=now)
    assert not coalesced(claim, flipped, seen=later, recorded=now)
    assert not coalesced(claim, [ConditionUpdate("Drifted", "True", "Drifted", "x")], seen=later, recorded=now)
    assert not coalesced(claim, moved, seen=now + timedelta(seconds=POD_EVENT_RECORD_SECONDS), recorded=now)
    assert not coalesced(claim, moved, seen=later, recorded=None)  # never recorded: written at once
    assert not coalesced(claim, moved, seen=now, recorded=now)  # no newer pod event: not ours to hold


async def test_a_restart_mid_replace_protects_the_replacement_and_clears_the_stale_mark(world: World) -> None:
    """Commands live in memory; the objects say what was under way. After a restart the replacement
    is not mistaken for an empty node, and the old NodeClaim is not left marked as being disrupted."""
    await world.nodepool()
    await world.node("pricey")
    await world.pod("web-1", "pricey")
    await world.advance(31)
    [command] = (await world.controller.reconcile()).commands
    assert command.action == "replace"
    await world.advance(5)
    [replacement] = [n for n in world.claims() if n != "pricey"]
    assert world.condition("pricey", "DisruptionReason")["status"] == "True"  # type: ignore[index]
    for task in list(world.controller.running):  # the process dies mid-command
        task.cancel()
    await world.settle()

    restarted = DisruptionController(world.h.ctx, offload=False)
    await restarted.recover()
    await world.settle()
    mark = world.condition("pricey", "DisruptionReason")
    assert mark is not None
    assert (mark["status"], mark["reason"]) == ("False", "Interrupted")
    assert replacement in restarted.protected
    # a pass right away does not take the replacement (no pod yet) for an empty node
    decision = await restarted.reconcile()
    assert all(replacement not in c.candidates for c in decision.commands)
    await world.settle()
    assert world.claim(replacement) is not None


async def test_a_replacement_is_bought_as_the_pools_tier_mix_wants(world: World) -> None:
    await world.nodepool()
    await world.kube.patch(NODEPOOLS, "default", {"spec": {"capacity": {"tierMix": {"onDemand": 100}}}})
    await world.settle()
    await world.node("oversized", instance_type="gpu-8")  # 98/h on demand for one small pod
    await world.pod("web-1", "oversized")
    await world.advance(31)
    [command] = (await world.controller.reconcile()).commands
    [replacement] = command.replacements
    # spot cpu-4 (0.08/h) is the cheapest, but the pool wants all of its capacity on demand
    assert (replacement.choice.instance_type, replacement.choice.capacity_type) == ("cpu-4", "on-demand")
    assert command.new_price == replacement.price


async def _launched_after_a_refusal(world: World) -> dict[str, Any]:
    """NodeClaim "pricey" launched and registered on on-demand after cpu-4/zone-a/spot refused it."""
    h = world.h
    h.start(LifecycleController(h.ctx))
    refused = {"instanceType": "cpu-4", "zone": "zone-a", "capacityType": "spot"}
    await h.kube.patch(KWOKNODECLASSES, "default", {"spec": {"failures": {"insufficientCapacity": [refused]}}})
    await h.cached("KWOKNodeClass", "default")
    await world.nodepool()
    await h.create_claim("pricey", instance_types=["cpu-4"])
    await h.eventually(lambda: h.condition_status("pricey", "Registered") == "True", "launched and registered")
    claim = world.claim("pricey")
    assert claim is not None
    return claim


async def test_a_machine_bought_on_a_fallback_is_not_replaced_by_the_offering_that_just_refused_it(
    world: World,
) -> None:
    """The cause of the empty L4 node in the seed-7 chaos run with fault rates: the cheapest offering
    answered "no capacity" to one NodeClaim, its launch fell back to a dearer offering, and ten seconds
    after the node was Initialized consolidation decided to replace it with that very offering (a
    13th NodeClaim, empty until the old node is drained). The offering that refused a launch is
    unavailable for the TTL, as CreateFleet's errors make it in the aws provider: no replace meanwhile."""
    h = world.h
    claim = await _launched_after_a_refusal(world)
    assert claim["metadata"]["labels"]["joiner.sh/capacity-type"] == "on-demand", "fell back from spot"
    assert OfferingId("cpu-4", "zone-a", "spot") in h.ctx.unavailable.current()
    await h.make_ready("pricey")
    await h.eventually(lambda: h.condition_status("pricey", "Initialized") == "True", "initialized")
    await world.pod("web-1", "pricey")
    # the refusal was a one-off: the offering would launch now, but it is avoided for the TTL
    await h.kube.patch(KWOKNODECLASSES, "default", {"spec": {"failures": None}})
    await h.cached("KWOKNodeClass", "default")
    await world.advance(31)  # consolidateAfter since the pod landed
    decision = await world.controller.reconcile()
    assert [c for c in decision.commands if c.action == "replace"] == [], decision.commands
    await world.advance(150)  # past the 3 min the refused offering is unavailable: a replace saves money
    [command] = (await world.controller.reconcile()).commands
    assert command.action == "replace"
    assert command.replacements[0].choice.capacity_type == "spot"


async def test_the_refusal_survives_a_controller_restart(world: World) -> None:
    """The third seed-13 run with fault rates: the controller was killed 3 s after such a fallback
    launch, and the restarted one (its unavailable offerings lived in memory) replaced the node with
    the offering that had refused it. The NodeClaim now records the refusal; a restarted controller
    keeps the offering unavailable for the rest of the TTL."""
    h = world.h
    claim = await _launched_after_a_refusal(world)
    recorded = json.loads(claim["metadata"]["annotations"]["joiner.sh/refused-offerings"])
    assert recorded["offerings"] == ["cpu-4/zone-a/spot"]
    await h.make_ready("pricey")
    await world.pod("web-1", "pricey")
    await h.kube.patch(KWOKNODECLASSES, "default", {"spec": {"failures": None}})
    await h.cached("KWOKNodeClass", "default")
    await world.advance(31)

    # the process dies: a new one starts with an empty memory of unavailable offerings
    fresh = UnavailableOfferings(clock=h.clock, ttl_seconds=h.ctx.settings.unavailable_offering_ttl_seconds)
    restarted = dataclasses.replace(h.ctx, unavailable=fresh)
    assert LifecycleController(restarted).remember_refusals() == 1
    assert OfferingId("cpu-4", "zone-a", "spot") in fresh.current()
    decision = await DisruptionController(restarted, offload=False).reconcile()
    assert [c for c in decision.commands if c.action == "replace"] == [], decision.commands
    await world.advance(150)  # the TTL, counted from the launch, has passed
    assert OfferingId("cpu-4", "zone-a", "spot") not in fresh.current()
    assert LifecycleController(restarted).remember_refusals() == 0, "an old refusal is not remembered"


async def test_a_pod_bound_a_moment_ago_with_young_pods_pending_is_a_backlog(world: World) -> None:
    await world.nodepool()
    await world.node("n1")
    await world.node("n2")
    await world.pod("web-1", "n1")  # kube-scheduler binds
    waiting = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "500m"}}}]}
    await world.kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-2", "namespace": "default", "creationTimestamp": format_time(world.clock.now())},
            "spec": waiting,
        },
        namespace="default",
    )
    await world.h.cached("Pod", "default/web-2")
    snap = await world.controller.snapshot()
    assert snap.scheduler_backlog
    await world.advance(16)  # kube-scheduler bound nothing since
    snap = await world.controller.snapshot()
    assert not snap.scheduler_backlog
