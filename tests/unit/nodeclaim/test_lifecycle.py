"""The lifecycle controller end to end on the in-memory apiserver with the real kwok provider."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from api.v1.labels import (
    FINALIZER_TERMINATION,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
    TAINT_PLANNED,
    TAINT_UNREGISTERED,
)
from controller.cloudprovider.types import OfferingId
from controller.kube.resources import NODES
from controller.metrics import REGISTRY
from controller.nodeclaim.lifecycle import LifecycleController
from controller.state.deletion import ANNOTATION_TERMINATION_REASON
from tests.unit.harness import Harness, kwok_provider


@pytest.fixture
async def world(harness: Harness) -> Harness:
    harness.start(LifecycleController(harness.ctx))
    await harness.settle()
    return harness


def deleted(h: Harness, name: str) -> bool:
    claim = h.claim(name)
    return claim is None or bool(claim["metadata"].get("deletionTimestamp"))


async def expect_initialized(h: Harness, name: str) -> None:
    await h.eventually(lambda: h.condition_status(name, "Initialized") == "True", f"{name} Initialized")


async def test_a_claim_goes_from_launch_to_ready(world: Harness) -> None:
    h = world
    await h.create_nodeclass()
    await h.create_claim("nc-1", instance_types=["gpu-1"], requests={"cpu": "1", "nvidia.com/gpu": "1"})
    await h.eventually(lambda: h.condition_status("nc-1", "Registered") == "True", "registered")

    claim = h.claim("nc-1")
    assert claim is not None
    assert FINALIZER_TERMINATION in claim["metadata"]["finalizers"]
    labels = claim["metadata"]["labels"]
    assert (labels[LABEL_INSTANCE_TYPE], labels[LABEL_ZONE], labels[LABEL_CAPACITY_TYPE]) == ("gpu-1", "zone-b", "spot")
    assert labels["joiner.sh/gpu-name"] == "L4"
    status = claim["status"]
    assert status["providerID"] == "kwok://nc-1"
    assert status["nodeName"] == "nc-1"
    assert status["allocatable"]["nvidia.com/gpu"] == "1"
    assert status["imageID"].startswith("kwok://image/")
    node = h.node("nc-1")
    assert node is not None
    assert all(t["key"] != TAINT_UNREGISTERED for t in node["spec"].get("taints") or [])
    assert node["metadata"]["labels"][LABEL_NODEPOOL] == "default"
    assert FINALIZER_TERMINATION in node["metadata"]["finalizers"]
    assert h.condition_status("nc-1", "Initialized") == "False"  # kwok has not made it Ready yet
    assert h.condition("nc-1", "Initialized")["reason"] == "NodeNotReady"  # type: ignore[index]
    assert status["reason"] == "NodeNotReady"  # the STATUS column: why it is not Ready

    await h.make_ready("nc-1")
    await expect_initialized(h, "nc-1")
    assert h.condition_status("nc-1", "Ready") == "True"
    assert (h.claim("nc-1") or {})["status"]["reason"] == "Ready"
    launched = h.condition("nc-1", "Launched")
    assert launched is not None
    assert launched["message"] == "gpu-1 (spot) in zone-b at $0.3500/h"
    assert h.kube.event_reasons("nc-1") == []  # the happy path is in conditions and logs, not Events


async def test_startup_taints_hold_initialization_until_removed(world: Harness) -> None:
    h = world
    await h.create_nodeclass()
    await h.create_claim("nc-1", instance_types=["cpu-4"], startup_taints=[{"key": "agent", "effect": "NoSchedule"}])
    await h.eventually(lambda: h.condition_status("nc-1", "Registered") == "True", "registered")
    await h.make_ready("nc-1")
    await h.eventually(
        lambda: (h.condition("nc-1", "Initialized") or {}).get("reason") == "StartupTaintsPresent", "startup taint seen"
    )
    node = h.node("nc-1")
    assert node is not None
    kept = [t for t in node["spec"]["taints"] if t["key"] != "agent"]
    await h.kube.patch(NODES, "nc-1", [{"op": "replace", "path": "/spec/taints", "value": kept}], patch_type="json")
    await expect_initialized(h, "nc-1")


async def test_insufficient_capacity_marks_offerings_and_deletes_the_claim(world: Harness) -> None:
    h = world
    await h.create_nodeclass(failures={"insufficientCapacity": [{"instanceType": "cpu-4"}]})
    await h.create_claim("nc-1", instance_types=["cpu-4"])
    await h.eventually(lambda: deleted(h, "nc-1"), "claim deleted")
    assert h.ctx.unavailable.is_unavailable(OfferingId("cpu-4", "zone-a", "spot"))
    assert h.ctx.unavailable.is_unavailable(OfferingId("cpu-4", "zone-b", "on-demand"))
    events = [e for e in h.kube.events("nc-1") if e["reason"] == "InsufficientCapacity"]
    assert events
    assert events[0]["type"] == "Warning"
    assert "provisioned again" in events[0]["message"]
    claim = h.claim("nc-1")
    assert claim is not None
    assert claim["metadata"]["annotations"][ANNOTATION_TERMINATION_REASON] == "InsufficientCapacity"


async def test_a_missing_nodeclass_is_a_condition_and_an_event_then_recovers(world: Harness) -> None:
    h = world
    await h.create_claim("nc-1", instance_types=["cpu-4"], nodeclass="later")
    await h.eventually(lambda: h.condition_status("nc-1", "Launched") == "False", "Launched=False")
    launched = h.condition("nc-1", "Launched")
    assert launched is not None
    assert launched["reason"] == "NodeClassNotReady"
    assert (h.claim("nc-1") or {})["status"]["reason"] == "NodeClassNotReady"
    assert "'later'" in launched["message"]
    assert "NodeClassNotReady" in h.kube.event_reasons("nc-1")
    await h.create_nodeclass("later")
    await h.eventually(lambda: h.condition_status("nc-1", "Launched") == "True", "launched once the class exists")


async def test_a_launch_that_keeps_failing_times_out_after_five_minutes(world: Harness) -> None:
    h = world
    before = REGISTRY.get_sample_value("joiner_nodeclaims_timed_out_total", {"nodepool": "default", "step": "Launch"})
    await h.create_claim("nc-1", instance_types=["cpu-4"], nodeclass="never")
    await h.eventually(lambda: h.condition_status("nc-1", "Launched") == "False", "Launched=False")
    await h.advance(299)
    assert not deleted(h, "nc-1")
    for _ in range(4):
        await h.advance(1)
    await h.eventually(lambda: deleted(h, "nc-1"), "deleted at the launch timeout")
    assert "LaunchTimedOut" in h.kube.event_reasons("nc-1")
    after = REGISTRY.get_sample_value("joiner_nodeclaims_timed_out_total", {"nodepool": "default", "step": "Launch"})
    assert (after or 0) == (before or 0) + 1


async def test_a_node_that_never_registers_times_out_after_fifteen_minutes(world: Harness) -> None:
    h = world
    await h.create_nodeclass(failures={"neverRegister": ["cpu-4"]})
    await h.create_claim("nc-1", instance_types=["cpu-4"])
    await h.eventually(lambda: h.condition_status("nc-1", "Launched") == "True", "launched")
    await h.advance(899)
    assert not deleted(h, "nc-1")
    await h.advance(1)
    await h.eventually(lambda: deleted(h, "nc-1"), "deleted at the registration timeout")
    event = next(e for e in h.kube.events("nc-1") if e["reason"] == "RegistrationTimedOut")
    assert event["type"] == "Warning"
    assert "Registration timed out after 15m" in event["message"]
    assert "kwok://nc-1" in event["message"]


async def test_the_gpu_that_never_appears_times_out_initialization(world: Harness) -> None:
    h = world
    await h.create_nodeclass(failures={"hideGPUs": ["gpu-1"]})
    await h.create_claim("nc-1", instance_types=["gpu-1"], requests={"cpu": "1", "nvidia.com/gpu": "1"})
    await h.eventually(lambda: h.condition_status("nc-1", "Registered") == "True", "registered")
    await h.make_ready("nc-1")
    await h.eventually(
        lambda: (h.condition("nc-1", "Initialized") or {}).get("reason") == "ResourceNotRegistered", "GPU missing"
    )
    await h.advance(900)
    await h.eventually(lambda: deleted(h, "nc-1"), "deleted at the initialization timeout")
    event = next(e for e in h.kube.events("nc-1") if e["reason"] == "InitializationTimedOut")
    assert "nvidia.com/gpu" in event["message"]


async def test_a_never_ready_node_times_out_initialization(world: Harness) -> None:
    h = world
    await h.create_nodeclass(failures={"neverReady": ["cpu-4"]})
    await h.create_claim("nc-1", instance_types=["cpu-4"])
    await h.eventually(lambda: h.condition_status("nc-1", "Registered") == "True", "registered")
    node = h.node("nc-1")
    assert node is not None
    assert "kwok.x-k8s.io/node" not in node["metadata"]["annotations"]
    await h.advance(900)
    await h.eventually(lambda: deleted(h, "nc-1"), "deleted at the initialization timeout")
    assert "InitializationTimedOut" in h.kube.event_reasons("nc-1")


async def test_registration_delay_is_honoured_and_restart_safe(world: Harness) -> None:
    h = world
    await h.create_nodeclass(registrationDelay="2m")
    await h.create_claim("nc-1", instance_types=["cpu-4"])
    await h.eventually(lambda: h.condition_status("nc-1", "Launched") == "True", "launched")
    await h.advance(119)
    assert h.node("nc-1") is None
    await h.advance(1)
    await h.eventually(lambda: h.condition_status("nc-1", "Registered") == "True", "registered after 2m")


async def test_a_restarted_controller_finishes_what_the_last_one_started(harness: Harness) -> None:
    h = harness
    await h.create_nodeclass(registrationDelay="1m")
    first = LifecycleController(h.ctx)
    h.start(first)
    await h.create_claim("nc-1", instance_types=["cpu-4"])
    await h.eventually(lambda: h.condition_status("nc-1", "Launched") == "True", "launched")
    for task in list(h.tasks):  # the process dies: its provider and lifecycle with it
        if task.get_name() in ("KWOKCloudProvider", "LifecycleController"):
            task.cancel()
    await h.settle()
    cloud = kwok_provider(kube=h.kube, cluster=h.cluster, clock=h.clock, unavailable=h.ctx.unavailable)
    ctx = dataclasses.replace(h.ctx, cloud=cloud)
    h.start(cloud, LifecycleController(ctx))
    await h.advance(30)
    assert h.node("nc-1") is None
    await h.advance(30)
    await h.eventually(lambda: h.condition_status("nc-1", "Registered") == "True", "registered by the new process")
    await h.make_ready("nc-1")
    await expect_initialized(h, "nc-1")


async def pending_pods(h: Harness, *names: str, cpu: str = "100m") -> None:
    """Pending pods in the default namespace, in the cache."""
    from controller.kube.resources import PODS

    for pod in names:
        await h.kube.create(
            PODS,
            {
                "metadata": {"name": pod, "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]},
                "status": {"phase": "Pending"},
            },
        )
        await h.cached("Pod", f"default/{pod}")


async def two_planned_claims(h: Harness) -> None:
    """Reservations on; pending pods pa and pb (1 CPU each) planned on NodeClaims nc-a and nc-b, created."""
    h.ctx.planned.reserve = True
    await h.create_nodeclass()
    await pending_pods(h, "pa", "pb", cpu="1")
    h.ctx.planned.publish({"default/pa": "nc-a", "default/pb": "nc-b"})
    for claim in ("nc-a", "nc-b"):
        await h.create_claim(claim, instance_types=["cpu-4"])


async def test_the_planned_nodes_open_together_once_every_planned_pod_is_nominated(world: Harness) -> None:
    """Each planned Node stays closed while a pod planned on it, or on another planned Node not open
    yet, is not nominated; when the first opens the others open with it, not at their next look
    (kube-scheduler tries every pending pod when a Node opens, and clears the nomination of each
    pod whose Node is still closed)."""
    from controller.kube.resources import PODS

    h = world
    await h.create_nodeclass()
    await pending_pods(h, "pa", "pb")
    h.ctx.planned.publish({"default/pa": "nc-a", "default/pb": "nc-b"})
    # nc-b comes up a little after nc-a, so each looks again at its own moments
    await h.create_claim("nc-a", instance_types=["cpu-4"])
    await h.eventually(lambda: h.condition_status("nc-a", "Registered") == "True", "nc-a registered")
    await h.advance(0.1)
    await h.create_claim("nc-b", instance_types=["cpu-4"])
    await h.eventually(lambda: h.condition_status("nc-b", "Registered") == "True", "nc-b registered")

    def closed(node: str) -> bool:
        return any(t["key"] == TAINT_UNREGISTERED for t in (h.node(node) or {}).get("spec", {}).get("taints") or [])

    assert closed("nc-a")
    assert closed("nc-b")
    for pod, node in (("pa", "nc-a"), ("pb", "nc-b")):
        await h.kube.patch(
            PODS, pod, {"status": {"nominatedNodeName": node}}, namespace="default", subresource="status"
        )
        await h.cached("Pod", f"default/{pod}")
    opened: dict[str, float] = {}
    for _ in range(20):
        await h.advance(0.025)
        await h.settle()
        for node in ("nc-a", "nc-b"):
            if not closed(node):
                opened.setdefault(node, h.clock.monotonic())
    assert set(opened) == {"nc-a", "nc-b"}
    assert opened["nc-a"] == opened["nc-b"], f"opened at {opened}"


async def test_a_reserved_node_opens_at_once_and_is_anyones_once_its_planned_pods_are_bound(world: Harness) -> None:
    """With reservations on, a Node planned for pending pods opens as soon as it registers and its
    pods are known (even while the rest of the plan is being written), with the
    `joiner.sh/planned=<NodeClaim>` taint in place of the unregistered one: no waiting for
    nominations. The taint goes when the last pod planned there binds (its own event, not a poll)."""
    from controller.kube.resources import PODS

    h = world
    h.ctx.planned.reserve = True
    await h.create_nodeclass()
    await pending_pods(h, "pa", "pb")
    # the provisioner is still writing its plan: nc-a's pods are published as nc-a is written, nc-b's
    # are not known yet
    h.ctx.planned.begin()
    h.ctx.planned.add("nc-a", ["default/pa", "default/pb"])
    await h.create_claim("nc-a", instance_types=["cpu-4"])
    await h.create_claim("nc-b", instance_types=["cpu-4"])
    await h.eventually(lambda: h.condition_status("nc-a", "Registered") == "True", "nc-a registered")
    await h.eventually(lambda: h.condition_status("nc-b", "Registered") == "True", "nc-b registered")

    def taints(node: str = "nc-a") -> list[tuple[str, str | None]]:
        return [(t["key"], t.get("value")) for t in (h.node(node) or {}).get("spec", {}).get("taints") or []]

    await h.eventually(lambda: taints() == [(TAINT_PLANNED, "nc-a")], "opened reserved to its pods")
    assert taints("nc-b") == [(TAINT_UNREGISTERED, None)], "pods not known yet: closed"
    h.ctx.planned.publish({"default/pa": "nc-a", "default/pb": "nc-a"})  # nc-b: bought for no pending pod
    await h.advance(0.2)
    await h.eventually(lambda: taints("nc-b") == [], "nc-b opened to everyone")
    for pod in ("pa", "pb"):
        await h.kube.patch(PODS, pod, {"spec": {"nodeName": "nc-a"}}, namespace="default")
        await h.cached("Pod", f"default/{pod}")
        await h.settle()
        if pod == "pa":
            assert taints() == [(TAINT_PLANNED, "nc-a")], "one planned pod still pending"
    await h.eventually(lambda: taints() == [], "the reservation ended with the last bind")


def reserved_to_its_pods(h: Harness, node: str) -> bool:
    return any(t["key"] == TAINT_PLANNED for t in (h.node(node) or {}).get("spec", {}).get("taints") or [])


async def bind_and_wait(h: Harness, pod: str, node: str) -> None:
    """kube-scheduler binds the pod; the lifecycle looks again at its 2 s rechecks, three times."""
    from controller.kube.resources import PODS

    await h.kube.patch(PODS, pod, {"spec": {"nodeName": node}}, namespace="default")
    await h.cached("Pod", f"default/{pod}")
    for _ in range(3):
        await h.advance(2.0)
        await h.settle()


async def test_a_reserved_nodes_room_left_over_stays_reserved_while_a_pod_planned_elsewhere_would_fit_it(
    world: Harness,
) -> None:
    """nc-a's own pod bound; a pod planned on nc-b is still pending and would fit what nc-a has left.
    Opened to everyone, nc-a's room would take it (measured: CPU pods of the GPU race bound in the
    CPUs left over on GPU machines, and their own CPU machine was left part empty). nc-a stays
    reserved until that pod binds on its own Node."""
    from controller.kube.resources import PODS

    h = world
    await two_planned_claims(h)
    for claim in ("nc-a", "nc-b"):

        def registered(name: str = claim) -> bool:
            return h.condition_status(name, "Registered") == "True"

        await h.eventually(registered, f"{claim} registered")

    reserved = functools.partial(reserved_to_its_pods, h)

    await h.eventually(lambda: reserved("nc-a") and reserved("nc-b"), "both opened reserved")
    await bind_and_wait(h, "pa", "nc-a")
    assert reserved("nc-a"), "pb, planned on nc-b and pending, would fit nc-a's room left over"
    await h.kube.patch(PODS, "pb", {"spec": {"nodeName": "nc-b"}}, namespace="default")
    await h.cached("Pod", "default/pb")
    await h.advance(2.0)
    await h.eventually(lambda: not reserved("nc-a") and not reserved("nc-b"), "both reservations ended")


@pytest.mark.parametrize("pb_binds", [True, False])
async def test_a_reserved_node_whose_pods_are_bound_stays_reserved_for_a_while_as_long_as_others_wait(
    world: Harness, pb_binds: bool
) -> None:
    """nc-a's own pod bound; pb, planned on nc-b, is still pending and would not fit nc-a's room left
    over. Taking nc-a's taint off would make it a Node every pending pod tolerates: kube-scheduler
    would try pb (and every other pod its taints refused) again, fail, and write each one's status
    in its scheduling loop. So nc-a stays reserved until pb binds, or RESERVE_HOLD_SECONDS at most."""
    from controller.kube.resources import PODS
    from controller.nodeclaim.lifecycle import RESERVE_HOLD_SECONDS

    h = world
    h.ctx.planned.reserve = True
    await h.create_nodeclass()
    await pending_pods(h, "pa", cpu="1")
    await pending_pods(h, "pb", cpu="3500m")
    h.ctx.planned.publish({"default/pa": "nc-a", "default/pb": "nc-b"})
    for claim in ("nc-a", "nc-b"):
        await h.create_claim(claim, instance_types=["cpu-4"])

    reserved = functools.partial(reserved_to_its_pods, h)

    await h.eventually(lambda: reserved("nc-a") and reserved("nc-b"), "both opened reserved")
    for node in ("nc-a", "nc-b"):
        await h.make_ready(node)
    await bind_and_wait(h, "pa", "nc-a")
    assert reserved("nc-a"), "pb is still waiting"
    if pb_binds:
        await h.kube.patch(PODS, "pb", {"spec": {"nodeName": "nc-b"}}, namespace="default")
        await h.cached("Pod", "default/pb")
        await h.advance(2.0)
        await h.eventually(lambda: not reserved("nc-a") and not reserved("nc-b"), "both reservations ended")
    else:
        await h.advance(RESERVE_HOLD_SECONDS)
        await h.eventually(lambda: not reserved("nc-a"), "nc-a's reservation ended after the hold")
        assert reserved("nc-b"), "nc-b is still reserved to pb"


async def test_nodes_whose_pods_could_not_be_given_the_toleration_are_not_held_reserved(world: Harness) -> None:
    """An admission policy refused both pods' tolerations: they are nominated instead. Neither Node
    may stay reserved for them, or waiting for the other's pods, which can enter neither."""
    h = world
    await two_planned_claims(h)
    h.ctx.planned.untolerated.add("default/pa")  # refused after nc-a's Node opened reserved

    def taints(node: str) -> list[str]:
        return [t["key"] for t in (h.node(node) or {}).get("spec", {}).get("taints") or []]

    await h.eventually(lambda: TAINT_PLANNED in taints("nc-b"), "nc-b opened reserved to pb")
    h.ctx.planned.untolerated.add("default/pb")
    for _ in range(3):
        await h.advance(2.0)
        await h.settle()
    assert taints("nc-a") == []
    assert taints("nc-b") == []


async def test_after_a_restart_a_reservation_holds_for_the_pending_pods_that_tolerate_it(world: Harness) -> None:
    """The plan lives in memory. A restarted joiner has not planned yet; the pods still pending with
    a reserved Node's toleration are the ones it was reserved to, and it stays reserved until they
    are bound."""
    from controller.kube.resources import PODS
    from controller.state.planned import PlannedPods

    h = world
    h.ctx.planned.reserve = True
    await h.create_nodeclass()
    await pending_pods(h, "pa")
    h.ctx.planned.begin()
    h.ctx.planned.add("nc-a", ["default/pa"])
    await h.create_claim("nc-a", instance_types=["cpu-4"])

    def reserved() -> bool:
        return any(t["key"] == TAINT_PLANNED for t in (h.node("nc-a") or {}).get("spec", {}).get("taints") or [])

    await h.eventually(reserved, "opened reserved")
    toleration = {"key": TAINT_PLANNED, "operator": "Equal", "value": "nc-a", "effect": "NoSchedule"}
    await h.kube.patch(PODS, "pa", {"spec": {"tolerations": [toleration]}}, namespace="default")
    await h.cached("Pod", "default/pa")
    PlannedPods.__init__(h.ctx.planned, reserve=True)  # the plan in memory, as a new process has it
    for _ in range(3):
        await h.advance(2.0)
        await h.settle()
    assert reserved(), "pa, pending with nc-a's toleration, keeps it reserved"
    await h.kube.patch(PODS, "pa", {"spec": {"nodeName": "nc-a"}}, namespace="default")
    await h.cached("Pod", "default/pa")
    await h.advance(2.0)
    await h.eventually(lambda: not reserved(), "the reservation ended with the bind")


async def test_a_reservation_ended_by_its_pods_binding_before_the_node_is_ready_warns_of_nothing(
    world: Harness,
) -> None:
    """kube-scheduler binds to a Node that is not Ready yet (kwok or the kubelet marks it later): a
    reservation whose pods are all bound ends without the warning of a reservation given up. The
    warning is for a Node that stays uninitialized while its planned pods still wait."""
    from structlog.testing import capture_logs

    from controller.kube.resources import PODS
    from controller.nodeclaim.decide import RESERVE_UNINITIALIZED_SECONDS

    h = world
    h.ctx.planned.reserve = True
    await h.create_nodeclass()

    def reserved(node: str) -> bool:
        return any(t["key"] == TAINT_PLANNED for t in (h.node(node) or {}).get("spec", {}).get("taints") or [])

    with capture_logs() as logs:
        await pending_pods(h, "pa", cpu="1")
        h.ctx.planned.publish({"default/pa": "nc-a"})
        await h.create_claim("nc-a", instance_types=["cpu-4"])
        await h.eventually(lambda: reserved("nc-a"), "nc-a opened reserved, not Ready")
        await h.kube.patch(PODS, "pa", {"spec": {"nodeName": "nc-a"}}, namespace="default")
        await h.cached("Pod", "default/pa")
        await h.advance(2.0)
        await h.eventually(lambda: not reserved("nc-a"), "nc-a's reservation ended with its pod bound")
        # pb waits on nc-b, which never initializes: its reservation is given up, with the warning
        await pending_pods(h, "pb", cpu="1")
        h.ctx.planned.publish({"default/pb": "nc-b"})
        await h.create_claim("nc-b", instance_types=["cpu-4"])
        await h.eventually(lambda: reserved("nc-b"), "nc-b opened reserved, not Ready")
        await h.advance(RESERVE_UNINITIALIZED_SECONDS)
        await h.eventually(lambda: not reserved("nc-b"), "nc-b's reservation given up")
    ended = {(e["event"], e["nodeclaim"]) for e in logs if e["event"].startswith("nodeclaim.reservation_ended")}
    assert ended == {
        ("nodeclaim.reservation_ended", "nc-a"),
        ("nodeclaim.reservation_ended_uninitialized", "nc-b"),
    }
    assert h.condition_status("nc-a", "Initialized") == "False"


async def test_a_planned_node_with_room_for_another_nodes_pods_opens_after_that_node(world: Harness) -> None:
    """Once every planned pod is nominated, a Node whose free room would fit a pod still waiting for
    another planned Node stays closed until that pod's Node is open and the pod nominated there (or
    bound): a pod tried while its own Node is closed binds in any room it fits."""
    from controller.kube.resources import PODS

    h = world
    await h.create_nodeclass()
    # cpu-4 leaves 3900m: nc-full's two 1900m pods leave it 100m, nc-roomy's 1 CPU leaves 2900m,
    # where one of nc-full's pods would fit
    for pod, cpu in (("a1", "1900m"), ("a2", "1900m"), ("b", "1")):
        await h.kube.create(
            PODS,
            {
                "metadata": {"name": pod, "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]},
                "status": {"phase": "Pending"},
            },
        )
        await h.cached("Pod", f"default/{pod}")
    h.ctx.planned.publish({"default/a1": "nc-full", "default/a2": "nc-full", "default/b": "nc-roomy"})
    for claim in ("nc-full", "nc-roomy"):
        await h.create_claim(claim, instance_types=["cpu-4"])
        await h.eventually(lambda c=claim: h.condition_status(c, "Registered") == "True", f"{claim} registered")  # type: ignore[misc]

    def closed(node: str) -> bool:
        return any(t["key"] == TAINT_UNREGISTERED for t in (h.node(node) or {}).get("spec", {}).get("taints") or [])

    async def nominate(pod: str, node: str) -> None:
        await h.kube.patch(
            PODS, pod, {"status": {"nominatedNodeName": node}}, namespace="default", subresource="status"
        )
        await h.cached("Pod", f"default/{pod}")

    async def wait(seconds: float) -> None:
        for _ in range(int(seconds / 0.05)):
            await h.advance(0.05)
            await h.settle()

    for pod, node in (("a1", "nc-full"), ("a2", "nc-full"), ("b", "nc-roomy")):
        await nominate(pod, node)
    await wait(0.3)
    assert not closed("nc-full")
    assert closed("nc-roomy"), "opened while nc-full's pods were still waiting for nc-full"
    # kube-scheduler tried a1 before nc-full's opening reached it, and cleared its nomination: until
    # it is nominated again or bound, nc-roomy's room would take it
    await h.kube.patch(PODS, "a1", {"status": {"nominatedNodeName": None}}, namespace="default", subresource="status")
    await h.cached("Pod", "default/a1")
    await wait(1.0)
    assert closed("nc-roomy")
    await h.kube.patch(PODS, "a1", {"spec": {"nodeName": "nc-full"}}, namespace="default")
    await h.cached("Pod", "default/a1")
    await wait(0.5)
    assert not closed("nc-roomy")
