"""The provisioner against the in-memory apiserver: what it buys for pending pods, what it holds for
pods already planned, and what makes it look again."""

from __future__ import annotations

import asyncio
from typing import Any

from api.v1.labels import (
    LABEL_CAPACITY_TYPE,
    LABEL_ZONE,
    TAINT_PLANNED,
    TAINT_UNREGISTERED,
)
from controller.clock import format_time
from controller.cloudprovider.types import OfferingId
from controller.kube.resources import NODECLAIMS, NODEPOOLS, NODES, PODS, REPLICASETS
from controller.provisioning.nodepool_status import NodePoolStatusController
from controller.provisioning.provisioner import Provisioner
from controller.settings import Settings
from controller.state.views import ControllerRef
from tests.unit.harness import Harness, make_harness
from tests.unit.provisioning.world import claims, container, default_world, pending, register

Obj = dict[str, Any]


async def test_pending_pods_get_one_nodeclaim_and_are_not_bought_for_twice(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    await pending(h, "a", "1500m")
    await pending(h, "b", "1500m")
    plan = await provisioner.reconcile()
    assert plan is not None
    assert len(plan.new_nodes) == 1
    [claim] = claims(h)
    assert claim["metadata"]["annotations"]["joiner.sh/planned-instance-type"] == "cpu-4"
    await h.cached("NodeClaim", claim["metadata"]["name"])
    # the pods are still pending while the machine comes up: they keep their place on it
    assert await provisioner.reconcile() is None
    assert len(claims(h)) == 1


async def test_a_nominated_pod_whose_room_was_taken_is_provisioned_again_at_once(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    await pending(h, "a", "1500m")
    await pending(h, "b", "1500m")
    await provisioner.reconcile()
    [claim] = claims(h)
    await register(h, claim)
    # kube-scheduler bound a pod joiner never planned for to the new node, and "b" no longer fits
    await h.bind_pod("stranger", claim["metadata"]["name"], spec={"containers": [container("2")]})
    await h.cached("Pod", "default/stranger")
    plan = await provisioner.reconcile()
    assert plan is not None
    assert [n.pods for n in plan.new_nodes] == [("default/b",)]
    assert plan.existing_placements == {}
    assert len(claims(h)) == 2


async def test_a_restarted_provisioner_keeps_the_places_its_tolerations_tell(h: Harness) -> None:
    """The plan goes with the process; the pods keep the tolerations of their planned NodeClaims'
    reservations, so a new process's first decision puts each where its toleration says, not where a
    fresh solve would deal it (a pod tolerating its old Node could take another's room there)."""
    before = Provisioner(h.ctx)
    for name in ("a", "b", "c"):
        await pending(h, name, "3")  # one cpu-4 machine each
    await before.reconcile()
    first = dict(before.places.nominations)
    assert sorted(first) == ["default/a", "default/b", "default/c"]
    assert len(set(first.values())) == 3
    for claim in claims(h):
        await h.cached("NodeClaim", claim["metadata"]["name"])
    # the places the process that died gave: dealt round, none where a fresh solve puts it
    given = {
        "default/a": first["default/b"],
        "default/b": first["default/c"],
        "default/c": first["default/a"],
    }
    for key, claim_name in given.items():
        toleration = {"key": TAINT_PLANNED, "operator": "Equal", "value": claim_name, "effect": "NoSchedule"}
        await h.kube.patch(PODS, key.split("/")[1], {"spec": {"tolerations": [toleration]}}, namespace="default")
        await h.cached("Pod", key)
    restarted = Provisioner(h.ctx)
    assert await restarted.reconcile() is None  # nothing to buy: each pod has its place
    assert restarted.places.nominations == given
    assert len(claims(h)) == 3
    # once only: a later decision does not read the tolerations again
    assert restarted.places.adopt({}) == 0


async def test_nodepool_status_writes_do_not_start_a_batch_but_spec_changes_do(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    pool = h.cluster.nodepools()["default"]
    status_write = {**pool, "metadata": {**pool["metadata"], "resourceVersion": "999"}, "status": {"nodes": 3}}
    provisioner._on_capacity_change("MODIFIED", status_write, pool)
    assert not provisioner.batcher._trigger.is_set()
    spec_change = {**pool, "metadata": {**pool["metadata"], "generation": 2}}
    provisioner._on_capacity_change("MODIFIED", spec_change, pool)
    assert provisioner.batcher._trigger.is_set()


async def test_the_batch_waits_while_pods_kube_scheduler_has_not_tried_keep_arriving(h: Harness) -> None:
    """The burst is arriving while untried pods keep coming (the ReplicaSet controller's steps, a
    second or two apart); once they stop for three seconds the batch may close, however far behind
    kube-scheduler is: the untried ones are planned in it."""
    from controller.provisioning.provisioner import ARRIVAL_GAP_SECONDS

    provisioner = Provisioner(h.ctx)
    h.ctx.cluster.subscribe_views("Pod", provisioner._on_pod)
    assert not provisioner._scheduler_has_untried_pods()

    async def arrives(name: str) -> None:
        pod: Obj = {"metadata": {"name": name, "namespace": "default"}, "spec": {"containers": [container("1")]}}
        await h.kube.create(PODS, {**pod, "status": {"phase": "Pending"}})
        await h.cached("Pod", f"default/{name}")

    await arrives("first")
    assert provisioner._scheduler_has_untried_pods()
    await h.advance(2.0)  # the next step of the burst, two seconds later
    assert provisioner._scheduler_has_untried_pods()
    await arrives("second")
    await h.advance(ARRIVAL_GAP_SECONDS - 0.5)
    assert provisioner._scheduler_has_untried_pods()
    await h.advance(1.0)  # nothing new for longer than the gap: the burst is in; both untried still
    assert not provisioner._scheduler_has_untried_pods()
    assert all(v.awaits_scheduler for v in h.cluster.pod_views())


async def _replicaset(h: Harness, name: str, replicas: int) -> ControllerRef:
    await h.kube.create(
        REPLICASETS,
        {"metadata": {"name": name, "namespace": "default"}, "spec": {"replicas": replicas, "template": {}}},
    )
    await h.cached("ReplicaSet", f"default/{name}")
    return ControllerRef(
        "ReplicaSet", "default", name, h.cluster.store("ReplicaSet")[f"default/{name}"]["metadata"]["uid"]
    )


async def _made_by(h: Harness, owner: ControllerRef, name: str) -> None:
    ref = {"apiVersion": "apps/v1", "kind": owner.kind, "name": owner.name, "uid": owner.uid, "controller": True}
    pod: Obj = {
        "metadata": {"name": name, "namespace": "default", "ownerReferences": [ref]},
        "spec": {"containers": [container("1")]},
        "status": {"phase": "Pending"},
    }
    await h.kube.create(PODS, pod)
    await h.cached("Pod", f"default/{name}")


async def test_the_batch_may_close_as_soon_as_every_workload_of_the_burst_holds_all_its_pods(h: Harness) -> None:
    """The ReplicaSet says how many pods are coming: once the last is in, nothing is arriving after
    the idle second (not the 3 s gap), and its pods kube-scheduler has not tried are planned at once
    rather than after the untried wait."""
    provisioner = Provisioner(h.ctx)
    h.ctx.cluster.subscribe_views("Pod", provisioner._on_pod)
    web = await _replicaset(h, "web-1", 3)
    batch = await _replicaset(h, "batch-1", 1)
    await _made_by(h, web, "web-1-a")
    await _made_by(h, web, "web-1-b")
    assert provisioner._scheduler_has_untried_pods()
    now = h.clock.now()
    assert not any(provisioner._provisionable(p, now) for p in h.cluster.pod_views())  # fresh, burst not in
    await _made_by(h, batch, "batch-1-a")
    assert provisioner._scheduler_has_untried_pods()  # web-1 still lacks one
    await _made_by(h, web, "web-1-c")
    # all in: planned at once, and nothing is arriving once the idle second passed (not the gap)
    now = h.clock.now()
    assert all(provisioner._provisionable(p, now) for p in h.cluster.pod_views())
    assert provisioner._scheduler_has_untried_pods()  # a workload applied with it may come next
    await h.advance(h.ctx.settings.batch_idle_seconds)
    assert not provisioner._scheduler_has_untried_pods()
    now = h.clock.now()
    assert all(provisioner._provisionable(p, now) for p in h.cluster.pod_views())
    plan = await provisioner.reconcile()
    assert plan is not None
    assert sorted(p for n in plan.new_nodes for p in n.pods) == [
        "default/batch-1-a",
        "default/web-1-a",
        "default/web-1-b",
        "default/web-1-c",
    ]


async def test_a_workload_made_with_none_of_its_pods_in_yet_keeps_the_batch_open_up_to_the_gap(h: Harness) -> None:
    """A Deployment applied with another: its ReplicaSet exists before its first pod. One whose pods
    never come (a quota refuses them) holds no batch longer than a quiet gap."""
    from controller.provisioning.provisioner import ARRIVAL_GAP_SECONDS

    provisioner = Provisioner(h.ctx)
    for kind, listener in provisioner._workload_listeners.items():
        h.ctx.cluster.subscribe(kind, listener)
    await _replicaset(h, "web-1", 2)
    assert provisioner._scheduler_has_untried_pods()
    await h.advance(ARRIVAL_GAP_SECONDS - 0.5)
    assert provisioner._scheduler_has_untried_pods()
    await h.advance(1.0)
    assert not provisioner._scheduler_has_untried_pods()
    # a status write is not a new size; scaling up is
    rs = h.cluster.store("ReplicaSet")["default/web-1"]
    await h.kube.patch(REPLICASETS, "web-1", {"status": {"replicas": 0}}, namespace="default", subresource="status")
    await h.cached("ReplicaSet", "default/web-1")
    assert not provisioner._scheduler_has_untried_pods()
    await h.kube.patch(REPLICASETS, "web-1", {"spec": {"replicas": 5}}, namespace="default")
    await h.cached("ReplicaSet", "default/web-1")
    assert h.cluster.store("ReplicaSet")["default/web-1"]["metadata"].get("generation") != rs["metadata"].get(
        "generation"
    )
    assert provisioner._scheduler_has_untried_pods()


async def test_fresh_untried_pods_a_batch_could_not_plan_get_their_timer_again(h: Harness) -> None:
    """The untried timer does not hold an open batch open (it only opens one); a pod too fresh for
    the batch that closed gets the timer again, and is planned when it fires."""
    provisioner = Provisioner(h.ctx)
    h.ctx.cluster.subscribe_views("Pod", provisioner._on_pod)
    fresh: Obj = {"metadata": {"name": "fresh", "namespace": "default"}, "spec": {"containers": [container("1")]}}
    await h.kube.create(PODS, {**fresh, "status": {"phase": "Pending"}})
    await h.cached("Pod", "default/fresh")
    timer = provisioner._untried_timer
    assert timer is not None
    timer.cancel()  # as if it had fired into an open batch, which closed before the pod was old enough
    await h.settle()
    assert await provisioner.reconcile() is None
    provisioner._rearm_untried()
    assert provisioner._untried_timer is not timer
    assert not provisioner.batcher._trigger.is_set()
    await h.advance(h.ctx.settings.plan_untried_after_seconds or 0.0)
    await h.advance(0.1)
    assert provisioner.batcher._trigger.is_set()
    plan = await provisioner.reconcile()
    assert plan is not None
    assert [n.pods for n in plan.new_nodes] == [("default/fresh",)]


async def test_without_planning_untried_pods_the_batch_waits_for_kube_scheduler_up_to_a_window() -> None:
    h = await make_harness(Settings(plan_untried_after_seconds=None))
    try:
        provisioner = Provisioner(h.ctx)
        fresh: Obj = {"metadata": {"name": "fresh", "namespace": "default"}, "spec": {"containers": [container("1")]}}
        await h.kube.create(PODS, {**fresh, "status": {"phase": "Pending"}})
        await h.cached("Pod", "default/fresh")
        await h.advance(h.ctx.settings.batch_max_seconds - 1)
        assert provisioner._scheduler_has_untried_pods()
        # a pod nobody tries for longer than a batch window (another scheduler's) does not hold batches open
        await h.advance(3)
        assert not provisioner._scheduler_has_untried_pods()
    finally:
        await h.close()


async def test_pods_get_a_nominated_event_unless_they_were_bound_first(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    await pending(h, "slow", "1")
    await pending(h, "fast", "1")
    await provisioner.reconcile()  # the Events go out in the background, after the NodeClaims
    await h.kube.patch(PODS, "fast", {"spec": {"nodeName": "somewhere"}}, namespace="default")
    await h.cached("Pod", "default/fast")
    await h.settle()
    assert "Nominated" in h.kube.event_reasons("slow")
    assert "Nominated" not in h.kube.event_reasons("fast")


async def test_nominated_events_are_limited_to_a_few_a_second_as_karpenter_limits_them(h: Harness) -> None:
    """A large decision writes a "Nominated" Event for the first pods at once and a few a second after
    that, not one per pod: the nominations kube-scheduler reads share the apiserver with them."""
    from controller.provisioning.provisioner import NOMINATED_EVENTS_BURST, NOMINATED_EVENTS_PER_SECOND

    provisioner = Provisioner(h.ctx)
    names = [f"p{i:02}" for i in range(30)]
    for name in names:
        await pending(h, name, "100m")
    await provisioner.reconcile()
    await h.settle()
    told = [n for n in names if "Nominated" in h.kube.event_reasons(n)]
    assert len(told) == NOMINATED_EVENTS_BURST
    # the next decision, two seconds later, may tell as many pods as the rate refilled meanwhile
    await h.advance(2.0)
    late = [f"late-{i:02}" for i in range(15)]
    for name in late:
        await pending(h, name, "1500m")  # none fits the NodeClaim in flight: all on new ones
    await provisioner.reconcile()
    await h.settle()
    told_late = [n for n in late if "Nominated" in h.kube.event_reasons(n)]
    assert len(told_late) == int(2.0 * NOMINATED_EVENTS_PER_SECOND)


async def test_a_burst_of_launches_updates_the_nodepool_status_once(h: Harness) -> None:
    status = NodePoolStatusController(h.ctx)
    h.start(status)
    await h.advance(1.5)
    h.kube.calls.clear()
    for i in range(5):
        claim = await h.create_claim(f"default-{i}")
        capacity = {"cpu": "4", "memory": "16Gi"}
        await h.kube.patch(
            NODECLAIMS, claim["metadata"]["name"], {"status": {"capacity": capacity}}, subresource="status"
        )
    await h.advance(1.5)
    writes = [c for c in h.kube.calls if c[1] == "nodepools" and c[0] != "get"]
    assert len(writes) == 1
    pool = h.kube.obj(NODEPOOLS, "default")
    assert pool is not None
    assert pool["status"]["resources"]["cpu"] == "20"


async def _set_tier_mix(h: Harness, **mix: int) -> None:
    await h.kube.patch(NODEPOOLS, "default", {"spec": {"capacity": {"tierMix": mix}}})
    await h.settle()


def _capacity_type(claim: Obj) -> list[str]:
    [req] = [r for r in claim["spec"]["requirements"] if r["key"] == LABEL_CAPACITY_TYPE]
    return list(req["values"])


async def test_a_tier_mix_splits_a_burst_across_capacity_types(h: Harness) -> None:
    await _set_tier_mix(h, spot=50, onDemand=50)
    for i in range(4):
        await pending(h, f"p{i}", "3500m")  # one cpu-4 each
    plan = await Provisioner(h.ctx).reconcile()
    assert plan is not None
    assert sorted(n.choice.capacity_type for n in plan.new_nodes) == ["on-demand", "on-demand", "spot", "spot"]
    assert sorted(_capacity_type(c)[0] for c in claims(h)) == ["on-demand", "on-demand", "spot", "spot"]
    assert all(len(_capacity_type(c)) == 1 for c in claims(h))  # each NodeClaim can only be bought one way


async def test_a_bent_tier_mix_is_told_on_the_nodepool(h: Harness) -> None:
    await _set_tier_mix(h, spot=100)
    await pending(h, "needs-od", "3500m")
    await h.kube.patch(
        PODS, "needs-od", {"spec": {"nodeSelector": {LABEL_CAPACITY_TYPE: "on-demand"}}}, namespace="default"
    )
    await h.cached("Pod", "default/needs-od")
    plan = await Provisioner(h.ctx).reconcile()
    assert plan is not None
    [claim] = claims(h)
    assert _capacity_type(claim) == ["on-demand"]
    [event] = [e for e in h.kube.events("default") if e["reason"] == "TierMixBent"]
    assert "bought as on-demand where the tier mix wanted spot" in event["message"]
    assert event["type"] == "Warning"


async def untried(h: Harness, name: str, cpu: str, *, scheduler: str | None = None) -> Obj:
    """A pod kube-scheduler has not tried yet (no PodScheduled condition): a scheduler backlog."""
    spec: Obj = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    obj = await h.kube.create(
        PODS,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec},
    )
    await h.cached("Pod", f"default/{name}")
    return obj


async def test_pods_kube_scheduler_has_not_reached_are_planned_once_they_waited(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    await untried(h, "backlogged", "1500m")
    await untried(h, "elsewhere", "1500m", scheduler="my-scheduler")  # not kube-scheduler's: never ours
    assert await provisioner.reconcile() is None  # just created: kube-scheduler may still get to it
    await h.advance(2.5)
    plan = await provisioner.reconcile()
    assert plan is not None
    [node] = plan.new_nodes
    assert node.pods == ("default/backlogged",)
    assert len(claims(h)) == 1


async def test_an_untried_pod_that_fits_existing_capacity_buys_nothing(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    await pending(h, "first", "1500m")
    await provisioner.reconcile()
    [claim] = claims(h)
    await h.cached("NodeClaim", claim["metadata"]["name"])
    await untried(h, "second", "1500m")  # fits beside the first on the cpu-4 in flight
    await h.advance(2.5)
    plan = await provisioner.reconcile()
    assert plan is not None
    assert plan.new_nodes == ()
    assert len(claims(h)) == 1


async def test_planning_untried_pods_can_be_switched_off() -> None:
    harness = await default_world(Settings(plan_untried_after_seconds=None))
    try:
        await untried(harness, "backlogged", "1500m")
        await harness.advance(30)
        assert await Provisioner(harness.ctx).reconcile() is None
        assert claims(harness) == []
    finally:
        await harness.close()


async def _planned_and_initialized(h: Harness, provisioner: Provisioner, pods: int) -> Obj:
    """``pods`` small pending pods, one NodeClaim bought for them, its Node up and Initialized now."""
    for i in range(pods):
        await pending(h, f"p{i}", "100m")
    await provisioner.reconcile()
    [claim] = claims(h)
    await register(h, claim)
    name = claim["metadata"]["name"]
    now = format_time(h.clock.now())
    initialized = {"type": "Initialized", "status": "True", "reason": "Initialized", "lastTransitionTime": now}
    await h.kube.patch(NODECLAIMS, name, {"status": {"conditions": [initialized]}}, subresource="status")
    await h.eventually(lambda: h.cluster.claim_views()[name].initialized, what="Initialized in the cache")
    return claim


async def _binds(h: Harness, node: str, count: int, *, prefix: str = "other") -> None:
    """kube-scheduler binding other pods: pending first, then bound."""
    for i in range(count):
        await pending(h, f"{prefix}-{i}", "10m")
    for i in range(count):
        key = f"default/{prefix}-{i}"
        await h.kube.patch(PODS, f"{prefix}-{i}", {"spec": {"nodeName": node}}, namespace="default")

        def bound(key: str = key) -> bool:
            view = h.cluster.pod_view(key)
            return view is not None and bool(view.node_name)

        await h.eventually(bound, what="bound in the cache")


async def test_planned_pods_keep_their_place_while_kube_scheduler_works_through_a_backlog(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    h.ctx.cluster.subscribe_views("Pod", provisioner._on_pod)
    claim = await _planned_and_initialized(h, provisioner, 30)
    await h.advance(25)
    await _binds(h, "elsewhere", 3)  # kube-scheduler is working through pods
    assert provisioner.places.nomination_grace() == 600.0
    assert await provisioner.reconcile() is None  # held: nothing solved again, nothing bought
    assert len(claims(h)) == 1
    assert claim["metadata"]["name"] in set(provisioner.places.nominations.values())
    await h.advance(16)  # and then it stops binding: the usual 10 s apply again
    assert provisioner.places.nomination_grace() == 10.0
    plan = await provisioner.reconcile()
    assert plan is not None
    assert plan.new_nodes == ()


async def test_planned_pods_kube_scheduler_stopped_binding_on_open_nodes_are_solved_again_after_five_seconds(
    h: Harness,
) -> None:
    """A backlog keeps the places only while kube-scheduler works through it: once it has bound nothing
    for 5 s, with every planned Node open and Initialized and every pod told that long, it has tried
    the pods there and refused them (crossed spreads), and they are planned again from what is bound."""
    provisioner = Provisioner(h.ctx)
    h.ctx.cluster.subscribe_views("Pod", provisioner._on_pod)
    claim = await _planned_and_initialized(h, provisioner, 30)
    await h.advance(25)
    await _binds(h, "elsewhere", 3)
    await h.advance(4)  # a pause of 4 s: still working through the backlog
    assert not provisioner.places.stalled()
    assert provisioner.places.nomination_grace() == 600.0
    assert await provisioner.reconcile() is None
    provisioner.places.told()  # a toleration written now: kube-scheduler has not had this pod in front of it
    await h.advance(4)
    assert not provisioner.places.stalled()
    await h.advance(2)  # 6 s since anything was bound or told
    assert provisioner.places.stalled()
    assert provisioner.places.nomination_grace() == 10.0
    plan = await provisioner.reconcile()
    assert plan is not None
    assert plan.new_nodes == ()  # the node they wait on still has their room: nothing bought
    assert [c["metadata"]["name"] for c in claims(h)] == [claim["metadata"]["name"]]


async def test_a_planned_node_opened_a_moment_ago_is_not_a_stall(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    h.ctx.cluster.subscribe_views("Pod", provisioner._on_pod)
    await _binds(h, "elsewhere", 3)
    await h.advance(6)
    await _planned_and_initialized(h, provisioner, 30)  # Initialized now, nothing bound for 6 s
    assert not provisioner.places.stalled()  # kube-scheduler has not had its pods there yet
    await h.advance(4)
    assert not provisioner.places.stalled()
    await h.advance(2)
    assert provisioner.places.stalled()
    assert provisioner.places.nomination_grace() == 10.0


async def test_without_a_backlog_planned_pods_are_solved_again_after_ten_seconds(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    h.ctx.cluster.subscribe_views("Pod", provisioner._on_pod)
    await _planned_and_initialized(h, provisioner, 30)
    await h.advance(25)
    assert provisioner.places.nomination_grace() == 10.0  # kube-scheduler binds nothing: no pace to wait for
    plan = await provisioner.reconcile()
    assert plan is not None
    assert plan.new_nodes == ()  # solved again onto the node they wait on: nothing bought
    assert len(claims(h)) == 1


async def test_the_grace_of_planned_pods_counts_from_when_their_node_opened_not_from_initialized(h: Harness) -> None:
    """A planned Node stays closed until its pods are nominated (a loaded apiserver took longer than
    the grace): its pods keep their place while it is closed, and for the grace after it opened."""
    provisioner = Provisioner(h.ctx)
    h.ctx.cluster.subscribe_views("Node", provisioner.places.on_node)
    claim = await _planned_and_initialized(h, provisioner, 30)
    name = claim["metadata"]["name"]
    closed = [{"key": TAINT_UNREGISTERED, "effect": "NoSchedule", "value": "true"}]
    await h.kube.patch(NODES, name, {"spec": {"taints": closed}})
    await h.eventually(lambda: h.cluster.node_views()[name].has_taint(TAINT_UNREGISTERED), what="closed in the cache")
    await h.advance(25)  # Initialized 25 s ago, still closed: held
    assert await provisioner.reconcile() is None
    assert name in set(provisioner.places.nominations.values())
    await h.kube.patch(NODES, name, {"spec": {"taints": []}})
    await h.eventually(lambda: not h.cluster.node_views()[name].has_taint(TAINT_UNREGISTERED), what="open")
    await h.advance(8)  # open for 8 s: still within the grace
    assert await provisioner.reconcile() is None
    await h.advance(3)  # 11 s open and still not bound: solved again (onto the node they wait on)
    plan = await provisioner.reconcile()
    assert plan is not None
    assert plan.new_nodes == ()


async def test_a_backlog_longer_than_ten_minutes_at_kube_schedulers_pace_keeps_its_places_longer(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    h.ctx.cluster.subscribe_views("Pod", provisioner._on_pod)
    claim = await _planned_and_initialized(h, provisioner, 30)
    await _binds(h, "elsewhere", 1)  # one pod in 15 s: 30 planned pods take 450 s at that pace
    assert provisioner.places.nomination_grace() == 900.0  # twice that
    await h.advance(700)  # past the 10 min: still kube-scheduler's backlog, nothing solved again
    await _binds(h, "elsewhere-too", 1, prefix="later")
    assert await provisioner.reconcile() is None
    assert claim["metadata"]["name"] in set(provisioner.places.nominations.values())
    for i in range(30, 400):  # a backlog that would take hours at this pace is held at most an hour
        provisioner.places.nominations[f"default/more-{i}"] = claim["metadata"]["name"]
    assert provisioner.places.nomination_grace() == 3600.0


async def test_a_limit_of_zero_is_named_in_the_pods_event_and_the_nodepools_status(h: Harness) -> None:
    h.start(NodePoolStatusController(h.ctx))
    await h.kube.patch(NODEPOOLS, "default", {"spec": {"limits": {"cpu": "0"}}})
    await h.settle()
    provisioner = Provisioner(h.ctx)
    await pending(h, "web", "1")
    plan = await provisioner.reconcile()
    assert plan is not None
    assert plan.new_nodes == ()
    await asyncio.gather(*provisioner._event_tasks)
    [event] = [e for e in h.kube.events("web") if e["reason"] == "FailedProvisioning"]
    why = "all available instance types exceed limits for nodepool (cpu limit is 0)"
    assert event["message"] == f'nodepool "default": {why}'

    def refused() -> dict[str, Any] | None:
        pool = h.kube.obj(NODEPOOLS, "default") or {}
        conditions = {c["type"]: c for c in (pool.get("status") or {}).get("conditions") or []}
        return conditions.get("PodsRefused")

    await h.advance(1.5)
    assert refused() == {**(refused() or {}), "status": "True", "message": f"1 pod pending: {why}"}
    assert (h.kube.obj(NODEPOOLS, "default") or {})["status"]["reason"] == "LimitsReached"
    await h.kube.delete(PODS, "web", namespace="default")
    await h.settle()
    assert await provisioner.reconcile() is None
    await h.advance(1.5)
    assert (refused() or {}).get("status") == "False"


async def test_offerings_the_cloud_refused_are_named_in_the_pods_event(h: Harness) -> None:
    for zone, capacity_type in (("zone-a", "on-demand"), ("zone-b", "on-demand"), ("zone-a", "spot")):
        h.ctx.unavailable.mark(OfferingId("cpu-4", zone, capacity_type))
    for zone, capacity_type in (("zone-a", "on-demand"), ("zone-a", "spot"), ("zone-b", "spot")):
        h.ctx.unavailable.mark(OfferingId("gpu-1", zone, capacity_type))
    h.ctx.unavailable.mark(OfferingId("gpu-8", "zone-a", "on-demand"))
    provisioner = Provisioner(h.ctx)
    await pending(h, "web", "1")
    plan = await provisioner.reconcile()
    assert plan is not None
    assert plan.new_nodes == ()
    await asyncio.gather(*provisioner._event_tasks)
    [event] = [e for e in h.kube.events("web") if e["reason"] == "FailedProvisioning"]
    assert event["message"] == (
        'nodepool "default": every instance type that could host it is unavailable: the cloud refused its '
        "offerings for insufficient capacity (cpu-4, gpu-1, gpu-8); they are tried again when the refusal expires"
    )


async def test_a_zone_spread_is_written_and_dealt_in_the_order_kube_scheduler_binds_it(h: Harness) -> None:
    """kube-scheduler binds a spread's pods one at a time, oldest first, and refuses a bind that puts
    a zone more than maxSkew ahead. So the NodeClaims are written zone by zone in turn, and the
    pods, in the order they were created, are planned round the zones (the first ones of a zone on
    its first NodeClaim written), not zone after zone as the solver opened them."""
    provisioner = Provisioner(h.ctx)
    h.start(provisioner.nominator)  # it keeps the order the pods came in
    names = [f"web-{i}" for i in range(8)]
    spread = {
        "maxSkew": 1,
        "topologyKey": LABEL_ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    for name in reversed(names):  # created web-7 first: the plan's names say nothing of the order
        await h.kube.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
                "spec": {"containers": [container("1500m")], "topologySpreadConstraints": [spread]},
                "status": {
                    "phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                },
            },
        )
        await h.cached("Pod", f"default/{name}")
    h.kube.calls.clear()
    plan = await provisioner.reconcile()
    assert plan is not None
    zone_of = {c["metadata"]["name"]: c["metadata"]["annotations"]["joiner.sh/planned-zone"] for c in claims(h)}
    order = [name for verb, plural, name in h.kube.calls if verb == "create" and plural == "nodeclaims"]
    assert len(order) == 3
    assert {zone_of[c] for c in order[:2]} == {"zone-a", "zone-b"}
    created_first = list(reversed(names))
    planned = [provisioner.places.nominations[f"default/{name}"] for name in created_first]
    zones = [zone_of[claim] for claim in planned]
    assert zones in (["zone-a", "zone-b"] * 4, ["zone-b", "zone-a"] * 4)
    # in the zone of two NodeClaims, the two pods created first on the one written first
    first, second = [c for c in order if zone_of[c] == zone_of[order[0]]]
    assert [c for c in planned if c in (first, second)] == [first, first, second, second]
