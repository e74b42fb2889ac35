"""Telling kube-scheduler the plan: status.nominatedNodeName of each planned pod follows the
provisioner's plan, from the moment the planned Node exists."""

from __future__ import annotations

from typing import Any

import pytest

from controller.kube.client import ApiError
from controller.kube.resources import NODECLAIMS, NODES, PODS, Resource
from controller.provisioning.provisioner import Provisioner
from controller.settings import Settings
from tests.unit.harness import Harness
from tests.unit.provisioning.world import claims, default_world, pending, register

Obj = dict[str, Any]


def nominated(h: Harness, pod: str) -> str | None:
    obj = h.kube.obj(PODS, pod, "default")
    assert obj is not None
    value = (obj.get("status") or {}).get("nominatedNodeName")
    return str(value) if value else None


async def up(h: Harness, claim: Obj) -> None:
    """The claim's machine joined and is Initialized (what the lifecycle controller records)."""
    await register(h, claim)
    await initialize(h, claim)


async def initialize(h: Harness, claim: Obj) -> None:
    name = claim["metadata"]["name"]
    cond = {
        "type": "Initialized",
        "status": "True",
        "reason": "Initialized",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    await h.kube.patch(NODECLAIMS, name, {"status": {"conditions": [cond]}}, subresource="status")
    await h.cached("NodeClaim", name)


async def scheduler_clears(h: Harness, pod: str) -> None:
    """What kube-scheduler does when it tries the pod and no node takes it yet."""
    await h.kube.patch(PODS, pod, {"status": {"nominatedNodeName": None}}, namespace="default", subresource="status")
    await h.cached("Pod", f"default/{pod}")


async def two_pods_planned(h: Harness) -> tuple[Provisioner, Obj]:
    """The nominator running, pods "a" and "b" (1.5 CPU each) pending and planned on one NodeClaim."""
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    await pending(h, "a", "1500m")
    await pending(h, "b", "1500m")
    await provisioner.reconcile()
    [claim] = claims(h)
    return provisioner, claim


async def test_pods_are_nominated_to_their_planned_node_as_soon_as_it_exists(h: Harness) -> None:
    _provisioner, claim = await two_pods_planned(h)
    await h.cached("NodeClaim", claim["metadata"]["name"])
    await h.settle()
    # no Node yet: nothing the scheduler could hold room on
    assert nominated(h, "a") is None
    assert nominated(h, "b") is None
    # the Node joined: nominated before it opens to kube-scheduler (the lifecycle keeps it closed
    # until then), so kube-scheduler keeps their room from the first moment it may use the Node
    await register(h, claim)
    node = claim["metadata"]["name"]
    await h.eventually(lambda: nominated(h, "a") == node and nominated(h, "b") == node, "both pods nominated")


async def test_a_nomination_the_scheduler_cleared_is_set_again_while_the_plan_holds(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    await pending(h, "a", "1500m")
    await provisioner.reconcile()
    [claim] = claims(h)
    await up(h, claim)
    node = claim["metadata"]["name"]
    await h.eventually(lambda: nominated(h, "a") == node, "pod nominated")
    await scheduler_clears(h, "a")
    await h.eventually(lambda: nominated(h, "a") == node, "pod nominated again")


async def test_a_released_nomination_is_cleared_and_the_pod_follows_the_new_plan(h: Harness) -> None:
    provisioner, first = await two_pods_planned(h)
    await up(h, first)
    first_node = first["metadata"]["name"]
    await h.eventually(lambda: nominated(h, "b") == first_node, "b nominated")
    # a pod joiner never planned for took the room: "b" is planned again, on a new NodeClaim
    await h.bind_pod(
        "stranger",
        first_node,
        spec={"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "2"}}}]},
    )
    await h.cached("Pod", "default/stranger")
    await provisioner.reconcile()
    await h.eventually(lambda: nominated(h, "b") is None, "the stale nomination cleared")
    assert nominated(h, "a") == first_node
    [second] = [c for c in claims(h) if c["metadata"]["name"] != first_node]
    await up(h, second)
    await h.eventually(lambda: nominated(h, "b") == second["metadata"]["name"], "b nominated to its new node")


async def test_a_nomination_written_by_someone_else_is_left_alone(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    await pending(h, "a", "1500m")
    # the scheduler's preemption nominated it to a node joiner does not know
    await h.kube.patch(
        PODS, "a", {"status": {"nominatedNodeName": "elsewhere"}}, namespace="default", subresource="status"
    )
    await h.cached("Pod", "default/a")
    provisioner.nominator.sync()
    await h.settle()
    assert nominated(h, "a") == "elsewhere"
    assert not [c for c in h.kube.calls if c[0] == "patch/status" and c[1] == "pods" and c[2] == "a"][1:]


async def test_bound_pods_are_not_written(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    await pending(h, "a", "1500m")
    await provisioner.reconcile()
    [claim] = claims(h)
    node = claim["metadata"]["name"]
    await h.kube.patch(PODS, "a", {"spec": {"nodeName": node}}, namespace="default")
    await h.cached("Pod", "default/a")
    h.kube.calls.clear()
    await up(h, claim)
    await h.settle()
    assert not [c for c in h.kube.calls if c[0] == "patch/status" and c[1] == "pods"]


async def test_a_cluster_that_refuses_the_field_turns_nominations_off_and_provisioning_goes_on(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    real_patch = h.kube.patch

    async def refuse(res: Resource, name: str, patch: Any, **kwargs: Any) -> Obj:
        if res is PODS and kwargs.get("subresource") == "status":
            raise ApiError(403, "Forbidden", 'pods "a" is forbidden: cannot patch resource "pods/status"')
        return await real_patch(res, name, patch, **kwargs)

    h.kube.patch = refuse  # type: ignore[method-assign]
    await pending(h, "a", "1500m")
    await provisioner.reconcile()
    [claim] = claims(h)
    await up(h, claim)
    await h.eventually(lambda: not provisioner.nominator.enabled, "nominations turned off")
    h.kube.patch = real_patch  # type: ignore[method-assign]
    assert nominated(h, "a") is None
    await pending(h, "b", "3")
    plan = await provisioner.reconcile()
    assert plan is not None
    assert len(claims(h)) == 2


async def test_nominations_can_be_switched_off() -> None:
    h = await default_world(Settings(nominate=False))
    try:
        provisioner = Provisioner(h.ctx)
        h.start(provisioner.nominator)
        await pending(h, "a", "1500m")
        await provisioner.reconcile()
        [claim] = claims(h)
        await up(h, claim)
        await h.settle()
        assert nominated(h, "a") is None
        assert h.kube.obj(NODECLAIMS, claim["metadata"]["name"]) is not None
    finally:
        await h.close()


async def test_a_pod_bound_just_before_its_nomination_does_not_turn_nominations_off(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    real_patch = h.kube.patch
    raced: list[str] = []

    async def bound_meanwhile(res: Resource, name: str, patch: Any, **kwargs: Any) -> Obj:
        if res is PODS and kwargs.get("subresource") == "status" and name == "a" and not raced:
            raced.append(name)  # what the apiserver answers when kube-scheduler bound the pod first
            raise ApiError(
                422,
                "Invalid",
                f'Pod "{name}" is invalid: status.nominatedNodeName: Forbidden: '
                "may not be set on pods that are already bound to a node",
            )
        return await real_patch(res, name, patch, **kwargs)

    h.kube.patch = bound_meanwhile  # type: ignore[method-assign]
    await pending(h, "a", "1500m")
    await pending(h, "b", "1500m")
    await provisioner.reconcile()
    [claim] = claims(h)
    await up(h, claim)
    await h.eventually(lambda: nominated(h, "b") is not None, "b nominated")
    assert raced == ["a"]
    assert provisioner.nominator.enabled


async def test_a_nomination_cleared_on_an_open_node_that_no_longer_has_room_for_the_pod_is_left_to_the_provisioner(
    h: Harness,
) -> None:
    """Other pods took the pod's room on its open planned Node, and kube-scheduler cleared the field
    when it tried the pod there. Set again, it would be cleared again at once, many times a second;
    it stays clear, and the provisioner plans the pod again. A pod that still fits is set again."""
    provisioner, claim = await two_pods_planned(h)
    await up(h, claim)  # a Node without the unregistered taint: open to kube-scheduler
    node = claim["metadata"]["name"]
    await h.eventually(lambda: nominated(h, "a") == node and nominated(h, "b") == node, "both nominated")
    # a pod joiner never planned took 2 of the 3.9 CPUs: "b" still fits beside it, "a" then does not
    await h.bind_pod(
        "stranger",
        node,
        spec={"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "2"}}}]},
    )
    await h.cached("Pod", "default/stranger")
    await scheduler_clears(h, "b")
    await h.eventually(lambda: nominated(h, "b") == node, "b, which fits, nominated again")
    await h.kube.patch(PODS, "b", {"spec": {"nodeName": node}}, namespace="default")  # kube-scheduler bound it
    await h.cached("Pod", "default/b")
    await scheduler_clears(h, "a")
    await h.settle()
    await h.advance(1.0)
    assert nominated(h, "a") is None, "set again where it does not fit"
    await provisioner.reconcile()  # released: planned on a new NodeClaim
    [second] = [c for c in claims(h) if c["metadata"]["name"] != node]
    await up(h, second)
    await h.eventually(lambda: nominated(h, "a") == second["metadata"]["name"], "a nominated to its new node")


# --- reservations: the planned Node's taint, and its toleration on the pods planned there ----------


def tolerations(h: Harness, pod: str) -> list[Obj]:
    obj = h.kube.obj(PODS, pod, "default")
    assert obj is not None
    return list((obj.get("spec") or {}).get("tolerations") or [])


def reservation(claim: str) -> Obj:
    return {"key": "joiner.sh/planned", "operator": "Equal", "value": claim, "effect": "NoSchedule"}


async def reserved_node(h: Harness, claim: Obj) -> None:
    """The claim's Node joins closed (`joiner.sh/unregistered`), and the lifecycle opens it reserved
    to the pods planned there (the `joiner.sh/planned` taint in its place)."""
    await register(h, claim, taints=[{"key": "joiner.sh/unregistered", "effect": "NoSchedule"}])
    await h.settle()
    name = claim["metadata"]["name"]
    taint = {"key": "joiner.sh/planned", "value": name, "effect": "NoSchedule"}
    await h.kube.patch(NODES, name, {"spec": {"taints": [taint]}})
    await h.cached("Node", name)


async def test_pods_planned_on_a_reserved_node_are_given_the_toleration_of_its_reservation_once_it_would_take_them(
    h: Harness,
) -> None:
    """Each planned pod tolerates the `joiner.sh/planned=<NodeClaim>` taint its Node opens with, once,
    and no nomination: only these pods can take that room, whatever order kube-scheduler tries pods
    and Nodes in. The toleration is written once the Node would take the pod, not before: writing it
    makes kube-scheduler try the pod at once, and a try that fails (no Node yet, the Node still
    closed, or `node.kubernetes.io/not-ready` on it) writes the pod's status inside kube-scheduler's
    scheduling loop before it tries the next pod."""
    await pending(h, "c", "100m")
    gpu = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    await h.kube.patch(PODS, "c", {"spec": {"tolerations": [gpu]}}, namespace="default")
    await h.cached("Pod", "default/c")
    h.kube.calls.clear()
    _provisioner, claim = await two_pods_planned(h)
    name = claim["metadata"]["name"]
    want = reservation(name)
    await h.settle()
    await h.advance(1.0)
    assert all(want not in tolerations(h, p) for p in ("a", "b", "c")), "no Node yet"
    await register(h, claim, taints=[{"key": "joiner.sh/unregistered", "effect": "NoSchedule"}])
    await h.settle()
    assert all(want not in tolerations(h, p) for p in ("a", "b", "c")), "the Node is still closed"
    # the lifecycle opens it reserved while kube-controller-manager still has it not-ready
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    planned = {"key": "joiner.sh/planned", "value": name, "effect": "NoSchedule"}
    await h.kube.patch(NODES, name, {"spec": {"taints": [planned, not_ready]}})
    await h.cached("Node", name)
    await h.settle()
    assert all(want not in tolerations(h, p) for p in ("a", "b", "c")), "not-ready keeps the pods off"
    await h.kube.patch(NODES, name, {"spec": {"taints": [planned]}})
    await h.cached("Node", name)
    await h.eventually(
        lambda: all(want in tolerations(h, p) for p in ("a", "b", "c")), "the planned pods tolerate the reservation"
    )
    assert tolerations(h, "c")[0]["key"] == "gpu", "the pod's own tolerations are kept"
    await h.settle()
    await h.advance(1.0)
    for pod in ("a", "b", "c"):
        assert tolerations(h, pod).count(want) == 1
        assert nominated(h, pod) is None
    writes = [c for c in h.kube.calls if c[1] == "pods" and c[0].startswith("patch")]
    assert sorted(writes) == [("patch", "pods", "a"), ("patch", "pods", "b"), ("patch", "pods", "c")]


async def test_a_reserved_node_that_is_not_ready_yet_gets_its_pods_tolerations_once_it_is(h: Harness) -> None:
    """A Node opened reserved before its kubelet reported Ready (and before any not-ready taint): a
    pod bound there would wait for the kubelet anyway, so the toleration waits for Ready."""
    _provisioner, claim = await two_pods_planned(h)
    name = claim["metadata"]["name"]
    await register(h, claim, taints=[{"key": "joiner.sh/unregistered", "effect": "NoSchedule"}], ready=False)
    await h.settle()
    planned = {"key": "joiner.sh/planned", "value": name, "effect": "NoSchedule"}
    await h.kube.patch(NODES, name, {"spec": {"taints": [planned]}})
    await h.cached("Node", name)
    await h.settle()
    await h.advance(1.0)
    assert all(reservation(name) not in tolerations(h, p) for p in ("a", "b")), "not while the Node is not Ready"
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    await h.kube.patch(NODES, name, {"status": ready}, subresource="status")
    await h.cached("Node", name)
    await h.eventually(
        lambda: all(reservation(name) in tolerations(h, p) for p in ("a", "b")), "tolerated once the Node is Ready"
    )


async def test_a_pod_that_tolerates_its_reserved_nodes_other_taints_is_given_the_toleration_while_they_are_on(
    h: Harness,
) -> None:
    """A taint the pod tolerates does not keep it off: a pod of a tainted NodePool that tolerates the
    pool's taint is given the reservation's toleration while that taint is on the Node."""
    await pending(h, "a", "1500m")
    gpu = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    await h.kube.patch(PODS, "a", {"spec": {"tolerations": [gpu]}}, namespace="default")
    await h.cached("Pod", "default/a")
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    await provisioner.reconcile()
    [claim] = claims(h)
    name = claim["metadata"]["name"]
    await register(h, claim, taints=[{"key": "joiner.sh/unregistered", "effect": "NoSchedule"}])
    await h.settle()
    planned = {"key": "joiner.sh/planned", "value": name, "effect": "NoSchedule"}
    await h.kube.patch(NODES, name, {"spec": {"taints": [planned, {"key": "gpu", "effect": "NoSchedule"}]}})
    await h.cached("Node", name)
    await h.eventually(lambda: reservation(name) in tolerations(h, "a"), "a tolerates the reservation")


async def test_a_pod_whose_toleration_is_refused_is_nominated_instead_and_not_waited_for(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    real_patch = h.kube.patch

    async def policy(res: Resource, name: str, patch: Any, **kwargs: Any) -> Obj:
        if res is PODS and name == "a" and kwargs.get("subresource") is None:
            # what an admission webhook that forbids new tolerations answers
            raise ApiError(400, "BadRequest", 'admission webhook "tolerations.example.com" denied the request')
        return await real_patch(res, name, patch, **kwargs)

    h.kube.patch = policy  # type: ignore[method-assign]
    await pending(h, "a", "1500m")
    await pending(h, "b", "1500m")
    await provisioner.reconcile()
    [claim] = claims(h)
    name = claim["metadata"]["name"]
    await reserved_node(h, claim)
    await h.eventually(lambda: "default/a" in h.ctx.planned.untolerated, "a's toleration refused")
    await h.eventually(lambda: reservation(name) in tolerations(h, "b"), "b tolerates the reservation")
    assert h.ctx.planned.reserve, "one pod's refusal leaves the others reserved"
    await h.eventually(lambda: nominated(h, "a") == name, "a nominated to its planned Node")
    assert tolerations(h, "a") == []


async def test_rbac_that_does_not_let_joiner_patch_pods_turns_reservations_off_and_nominations_tell_the_plan(
    h: Harness,
) -> None:
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    real_patch = h.kube.patch

    async def rbac(res: Resource, name: str, patch: Any, **kwargs: Any) -> Obj:
        if res is PODS and kwargs.get("subresource") is None:
            raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: User "joiner" cannot patch resource "pods"')
        return await real_patch(res, name, patch, **kwargs)

    h.kube.patch = rbac  # type: ignore[method-assign]
    assert h.ctx.planned.reserve
    await pending(h, "a", "1500m")
    await provisioner.reconcile()
    [claim] = claims(h)
    await reserved_node(h, claim)
    await h.eventually(lambda: not h.ctx.planned.reserve, "reservations turned off")
    assert provisioner.nominator.enabled
    await h.eventually(lambda: nominated(h, "a") == claim["metadata"]["name"], "a nominated")


async def test_reservations_can_be_switched_off_alone() -> None:
    h = await default_world(Settings(reserve=False))
    try:
        _provisioner, claim = await two_pods_planned(h)
        assert not h.ctx.planned.reserve
        await register(h, claim)
        name = claim["metadata"]["name"]
        await h.eventually(lambda: nominated(h, "a") == name and nominated(h, "b") == name, "both nominated")
        assert tolerations(h, "a") == []
        assert tolerations(h, "b") == []
    finally:
        await h.close()


async def test_each_nodeclaims_pods_are_published_before_the_next_is_written(
    h: Harness,
) -> None:
    """A plan of many NodeClaims takes seconds to write (156 for a GPU burst took 6 s on a 2-core
    cluster); each one's Node may open reserved to its pods, and its pods be given the toleration
    once it does, without waiting for the rest of the plan."""
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    real_create = h.kube.create
    seen: list[tuple[bool, dict[str, tuple[str, ...]]]] = []

    async def create(res: Resource, obj: Obj, **kwargs: Any) -> Obj:
        if res is NODECLAIMS:
            await h.settle()  # the nominator's workers run between two writes, as on a real apiserver
            known = {claim: h.ctx.planned.on(claim) for claim in h.ctx.planned.claims()}
            seen.append((h.ctx.planned.writing, known))
        return await real_create(res, obj, **kwargs)

    h.kube.create = create  # type: ignore[method-assign]
    for pod in ("a", "b", "c"):
        await pending(h, pod, "3")  # one cpu-4 machine each
    await provisioner.reconcile()
    assert len(claims(h)) == 3
    assert [writing for writing, _known in seen] == [True, True, True]
    assert [sum(len(keys) for keys in known.values()) for _writing, known in seen] == [0, 1, 2]
    first = next(iter(seen[1][1]))
    [pod] = seen[1][1][first]
    [claim] = [c for c in claims(h) if c["metadata"]["name"] == first]
    await reserved_node(h, claim)
    await h.eventually(lambda: reservation(first) in tolerations(h, pod.split("/")[1]), "tolerated once it opened")


LOG_AGENT: Obj = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "log-agent", "namespace": "kube-system"},
    "spec": {"template": {"metadata": {"labels": {"app": "log-agent"}}, "spec": {"containers": [{"name": "c"}]}}},
}


async def test_a_node_that_registers_with_what_it_was_bought_for_stays_reserved_though_a_daemonset_waits(
    h: Harness,
) -> None:
    """A log agent without a toleration of `joiner.sh/planned` is kept off the Node while it is
    reserved; its Node registered with everything its NodeClaim asked for, so nothing the agent would
    bring is needed to take the planned pods: the pods keep their toleration, and are not nominated."""
    from controller.kube.resources import DAEMONSETS

    await h.kube.create(DAEMONSETS, LOG_AGENT)
    await h.cached("DaemonSet", "kube-system/log-agent")
    _provisioner, claim = await two_pods_planned(h)
    name = claim["metadata"]["name"]
    await reserved_node(h, claim)
    await h.eventually(
        lambda: reservation(name) in tolerations(h, "a") and reservation(name) in tolerations(h, "b"), "tolerated"
    )
    await h.advance(1.0)
    assert h.ctx.planned.reservable(
        h.ctx.cluster.claim_views()[name], h.ctx.cluster.daemonsets, h.ctx.cluster.node_views()[name]
    )
    assert reservation(name) in tolerations(h, "a")
    assert nominated(h, "a") is None
    assert nominated(h, "b") is None


async def test_a_node_that_registers_without_its_gpus_while_a_daemonset_is_kept_off_is_not_reserved(
    h: Harness,
) -> None:
    """The Node came up without the GPU its NodeClaim asked for (a device plugin registers it), and a
    DaemonSet that would run there does not tolerate `joiner.sh/planned`: it may be that plugin, which
    a reservation would keep off for good. The Node is not reserved; its pod is nominated."""
    from controller.kube.resources import DAEMONSETS

    await h.kube.create(DAEMONSETS, LOG_AGENT)
    await h.cached("DaemonSet", "kube-system/log-agent")
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    gpu_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    await h.kube.create(PODS, gpu_pod)
    await h.cached("Pod", "default/g")
    await provisioner.reconcile()
    [claim] = claims(h)
    name = claim["metadata"]["name"]
    assert claim["spec"]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    await register(h, claim)  # a Node with CPUs and memory, no nvidia.com/gpu in its allocatable yet
    await h.settle()
    assert not h.ctx.planned.reservable(
        h.ctx.cluster.claim_views()[name], h.ctx.cluster.daemonsets, h.ctx.cluster.node_views()[name]
    )
    # the device plugin registers the GPU: the pod fits, and is nominated (the Node stays unreserved)
    allocatable = {"cpu": "7900m", "memory": "31Gi", "pods": "58", "nvidia.com/gpu": "1"}
    await h.kube.patch(NODES, name, {"status": {"allocatable": allocatable}}, subresource="status")
    await h.cached("Node", name)
    await initialize(h, claim)  # what the lifecycle records then
    await h.eventually(lambda: nominated(h, "g") == name, "nominated once the GPU is registered")
    assert not h.ctx.planned.reservable(
        h.ctx.cluster.claim_views()[name], h.ctx.cluster.daemonsets, h.ctx.cluster.node_views()[name]
    )


@pytest.mark.parametrize("started", ["before the pods came", "after the pods came"])
async def test_tolerations_are_written_in_the_order_kube_scheduler_tries_the_pods(h: Harness, started: str) -> None:
    """kube-scheduler tries pending pods by priority, then the ones it has had longest; a try of a
    pod not tolerating its planned Node's reservation yet fails (and costs a status write before
    its next try). So the tolerations go in that order, not in the plan's."""
    provisioner = Provisioner(h.ctx)
    if started == "before the pods came":
        h.start(provisioner.nominator)
    for name in ("e", "d", "c", "b", "a"):  # created in this order; the plan lists them otherwise
        await pending(h, name, "100m")
    await h.kube.patch(PODS, "c", {"spec": {"priority": 1000}}, namespace="default")
    await h.cached("Pod", "default/c")
    h.kube.calls.clear()
    if started == "after the pods came":
        h.start(provisioner.nominator)
    await provisioner.reconcile()
    [claim] = claims(h)
    want = reservation(claim["metadata"]["name"])
    await reserved_node(h, claim)  # its pods are all looked at again when it opens
    await h.eventually(
        lambda: all(want in tolerations(h, p) for p in "abcde"), "the planned pods tolerate the reservation"
    )
    writes = [c[2] for c in h.kube.calls if c[1] == "pods" and c[0].startswith("patch")]
    assert writes == ["c", "e", "d", "b", "a"]


async def test_the_pods_a_held_crossed_spread_counts_are_told_once_its_own_pods_are_bound(h: Harness) -> None:
    """A plan whose zonal spreads cross: x (labelled a) spreads over the b pods, y and z (labelled b)
    over the a pods. The spread over a counts one pod (x), the one over b two: x is held while y and
    z, the held spread's own pods, are told; once both are bound, x is told, without the half-second
    look (the fake clock stands still)."""
    from controller.scheduling import label_selector

    def crossed(name: str, label: str, over: str) -> Obj:
        spread = {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"my-label": over}},
        }
        return {
            "metadata": {"name": name, "namespace": "default", "labels": {"my-label": label}},
            "spec": {
                "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
                "topologySpreadConstraints": [spread],
            },
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        }

    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)
    for name, label, over in (("x", "a", "b"), ("y", "b", "a"), ("z", "b", "a")):
        await h.kube.create(PODS, crossed(name, label, over))
        await h.cached("Pod", f"default/{name}")
    await provisioner.reconcile()
    pacer = provisioner.pacer
    assert pacer is not None
    assert [r.selector for r in pacer.breaks] == [label_selector({"my-label": "a"})]
    claim_of = provisioner.places.nominations

    def told(name: str) -> bool:
        return reservation(claim_of[f"default/{name}"]) in tolerations(h, name)

    for claim in claims(h):
        await reserved_node(h, claim)
    await h.eventually(lambda: told("y") and told("z"), "the held spread's own pods told")
    await h.settle()
    assert not told("x"), "the pod it counts is held"
    for name in ("y", "z"):
        await h.kube.patch(PODS, name, {"spec": {"nodeName": claim_of[f"default/{name}"]}}, namespace="default")
        await h.cached("Pod", f"default/{name}")
        if name == "y":
            await h.settle()
            assert not told("x"), "held while one of the spread's own pods waits"
    await h.eventually(lambda: told("x"), "x told once y and z are bound")
