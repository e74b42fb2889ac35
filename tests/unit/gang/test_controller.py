"""The gang controller end to end on the in-memory apiserver, with the real lifecycle, termination and
kwok provider: what a user of a gang sees, on a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

import pytest

from controller.gang.controller import GangController
from controller.gang.record import ADMITTED, PROVISIONING, ROLLED_BACK, Record, record_of
from controller.kube.resources import KWOKNODECLASSES, NODECLAIMS, NODEPOOLS, PODS
from controller.nodeclaim.lifecycle import LifecycleController
from controller.settings import Settings
from controller.state.views import PodView
from controller.termination.controller import TerminationController
from tests.unit import builders
from tests.unit.harness import Harness, make_harness

Obj = dict[str, Any]
GID = "ml.train"


@pytest.fixture
async def world(harness: Harness) -> Harness:
    harness.start(LifecycleController(harness.ctx), TerminationController(harness.ctx))
    await harness.create_nodeclass()
    await nodepool(harness)
    return harness


async def nodepool(
    h: Harness,
    name: str = "gpu",
    *,
    limits: dict[str, str] | None = None,
    instance_types: list[str] | None = None,
    weight: int | None = None,
    nodeclass: str = "default",
) -> None:
    spec: Obj = {"limits": limits} if limits else {}
    if weight is not None:
        spec["weight"] = weight
    template: Obj = {}
    if instance_types:
        template["requirements"] = [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": instance_types}
        ]
    await h.kube.create(NODEPOOLS, builders.nodepool(name, nodeclass=nodeclass, template=template, **spec))
    await h.cached("NodePool", name)


async def gang_pod(
    h: Harness,
    name: str,
    *,
    gang: str = "train",
    size: int = 3,
    gpus: int = 8,
    cpu: str = "1",
    node_selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    requests = {"memory": "1Gi", "nvidia.com/gpu": str(gpus)} if gpus else {"memory": "1Gi"}
    return await h.kube.create(
        PODS,
        builders.pod(
            name,
            namespace="ml",
            phase="Pending",
            labels={"joiner.sh/gang": gang},
            annotations={"joiner.sh/gang-size": str(size), **(annotations or {})},
            gates=["joiner.sh/gang"],
            cpu=cpu,
            requests=requests,
            spec={"nodeSelector": node_selector} if node_selector else None,
        ),
    )


def start_gangs(h: Harness) -> asyncio.Task[None]:
    controller = GangController(h.ctx)
    task = asyncio.create_task(controller.run(), name="gangs")
    h.tasks.append(task)
    return task


def pod(h: Harness, name: str) -> Obj:
    found = h.kube.obj(PODS, name, "ml")
    assert found is not None, name
    return found


def gated(h: Harness, name: str) -> bool:
    return any(g["name"] == "joiner.sh/gang" for g in pod(h, name)["spec"].get("schedulingGates") or [])


def gang_claims(h: Harness, gid: str = GID) -> dict[str, Obj]:
    return {n: c for n, c in h.kube.objects(NODECLAIMS).items() if c["metadata"]["labels"].get("joiner.sh/gang") == gid}


def record(h: Harness, name: str) -> Record:
    rec = record_of(PodView.of(pod(h, name)))
    assert rec is not None, f"{name} has no gang record"
    return rec


async def make_all_ready(h: Harness, names: list[str]) -> None:
    for name in names:
        await h.eventually(lambda n=name: h.condition_status(n, "Registered") == "True", f"{name} registered")  # type: ignore[misc]
        await h.make_ready(name)


def events(h: Harness, name: str) -> list[Obj]:
    return h.kube.events(name)


# --- the happy path -------------------------------------------------------------------------------


async def test_a_gang_gets_its_nodes_first_and_every_gate_is_removed_together(world: Harness) -> None:
    h = world
    for name in ("w0", "w1", "w2"):
        await gang_pod(h, name)
    start_gangs(h)
    await h.eventually(lambda: len(gang_claims(h)) == 3, "3 NodeClaims for the gang")
    claims = gang_claims(h)
    # every member names the attempt's NodeClaims and their planned offerings (a cloud that can buy a
    # gang in one all-or-nothing request, gcp's bulkInsert, reads it)
    members = {name: claim["metadata"]["annotations"]["joiner.sh/gang-offering"] for name, claim in claims.items()}
    for claim in claims.values():
        listed = dict(item.split("=") for item in claim["metadata"]["annotations"]["joiner.sh/gang-claims"].split(","))
        assert listed == members
        assert claim["metadata"]["annotations"]["joiner.sh/gang-name"] == "ml/train"
        assert {"key": "joiner.sh/gang", "value": GID, "effect": "NoSchedule"} in claim["spec"]["taints"]
        zone_reqs = [r for r in claim["spec"]["requirements"] if r["key"] == "topology.kubernetes.io/zone"]
        assert zone_reqs == [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]
    await h.eventually(lambda: all(record(h, n).phase == PROVISIONING for n in ("w0", "w1", "w2")), "records")
    for name in ("w0", "w1", "w2"):
        spec = pod(h, name)["spec"]
        assert spec["nodeSelector"] == {"joiner.sh/gang": GID}
        assert {"key": "joiner.sh/gang", "operator": "Equal", "value": GID, "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
    await h.eventually(lambda: "GangProvisioning" in [e["reason"] for e in events(h, "w2")], "an Event")

    names = sorted(claims)
    await make_all_ready(h, names[:2])
    await h.eventually(lambda: all(h.condition_status(n, "Initialized") == "True" for n in names[:2]), "2 ready")
    await h.settle(200)
    assert all(gated(h, n) for n in ("w0", "w1", "w2")), "no member starts while a node is missing"

    await make_all_ready(h, names[2:])
    await h.eventually(lambda: not any(gated(h, n) for n in ("w0", "w1", "w2")), "every gate removed")
    await h.eventually(lambda: all(h.condition_status(n, "GangAdmitted") == "True" for n in names), "claims marked")
    assert all(record(h, n).phase == ADMITTED for n in ("w0", "w1", "w2"))
    assert "GangAdmitted" in [e["reason"] for e in events(h, "w0")]
    # one patch per pod removed each gate: nothing else was needed
    ungates = [c for c in h.kube.calls if c[0] == "patch" and c[1] == "pods"]
    assert len(ungates) >= 6


async def test_nothing_is_bought_while_a_member_is_missing(world: Harness) -> None:
    h = world
    await gang_pod(h, "w0")
    await gang_pod(h, "w1")
    start_gangs(h)
    await h.settle(300)
    assert gang_claims(h) == {}
    await h.advance(61)
    await h.eventually(lambda: "GangWaitingForMembers" in [e["reason"] for e in events(h, "w0")], "an Event")
    message = next(e["message"] for e in events(h, "w0") if e["reason"] == "GangWaitingForMembers")
    assert "2 of 3 members" in message
    assert "1 more" in message
    assert gang_claims(h) == {}
    await gang_pod(h, "w2")
    await h.eventually(lambda: len(gang_claims(h)) == 3, "bought once complete")


async def test_a_gang_bigger_than_the_limit_buys_nothing_and_says_why(harness: Harness) -> None:
    h = harness
    h.start(LifecycleController(h.ctx), TerminationController(h.ctx))
    await h.create_nodeclass()
    await nodepool(h, limits={"nvidia.com/gpu": "16"})
    for name in ("w0", "w1", "w2"):
        await gang_pod(h, name)
    start_gangs(h)
    await h.eventually(lambda: "GangUnschedulable" in [e["reason"] for e in events(h, "w0")], "an Event")
    message = next(e["message"] for e in events(h, "w0") if e["reason"] == "GangUnschedulable")
    assert "24 nvidia.com/gpu" in message
    assert "nvidia.com/gpu: 16" in message
    assert "no NodeClaim was created" in message
    assert h.kube.objects(NODECLAIMS) == {}
    await h.eventually(
        lambda: any(
            c["type"] == "GangAdmitted" and c["reason"] == "Unschedulable"
            for c in pod(h, "w1")["status"].get("conditions") or []
        ),
        "a pod condition",
    )


async def test_two_gangs_over_a_limit_one_is_admitted_whole_the_other_waits_whole(harness: Harness) -> None:
    h = harness
    h.start(LifecycleController(h.ctx), TerminationController(h.ctx))
    await h.create_nodeclass()
    await nodepool(h, limits={"nvidia.com/gpu": "24"})
    for gang in ("a", "b"):
        for i in range(2):
            await gang_pod(h, f"{gang}{i}", gang=gang, size=2)
    start_gangs(h)
    await h.eventually(lambda: len(h.kube.objects(NODECLAIMS)) == 2, "one gang's NodeClaims")
    await h.settle(300)
    claims = h.kube.objects(NODECLAIMS)
    assert len(claims) == 2
    [winner] = {c["metadata"]["labels"]["joiner.sh/gang"] for c in claims.values()}
    loser = "b" if winner == "ml.a" else "a"
    await make_all_ready(h, sorted(claims))
    await h.eventually(lambda: not gated(h, f"{winner[3:]}0") and not gated(h, f"{winner[3:]}1"), "winner admitted")
    assert gated(h, f"{loser}0")
    assert gated(h, f"{loser}1")
    assert "GangWaitingForCapacity" in [e["reason"] for e in events(h, f"{loser}0")]
    assert len(h.kube.objects(NODECLAIMS)) == 2


# --- failures -------------------------------------------------------------------------------------


async def test_one_failed_member_rolls_back_every_nodeclaim_and_the_retry_succeeds(world: Harness) -> None:
    h = world
    await h.kube.patch(KWOKNODECLASSES, "default", {"spec": {"failures": {"insufficientCapacity": ["cpu-4"]}}})
    await h.cached("KWOKNodeClass", "default")
    await gang_pod(h, "w0")
    await gang_pod(h, "w1")
    await gang_pod(h, "launcher", gpus=0, node_selector={"node.kubernetes.io/instance-type": "cpu-4"})
    start_gangs(h)
    await h.eventually(
        lambda: record_of(PodView.of(pod(h, "w0"))) is not None and record(h, "w0").phase == ROLLED_BACK, "rolled back"
    )
    await h.eventually(lambda: gang_claims(h) == {}, "every NodeClaim of the attempt deleted")
    assert all(gated(h, n) for n in ("w0", "w1", "launcher"))
    rolled = record(h, "w0")
    assert rolled.rollbacks == 1
    assert "InsufficientCapacity" in rolled.last_failure
    assert "cpu-4/zone-a/spot" in rolled.avoiding(h.ctx.clock.now())
    [event] = [e for e in events(h, "w0") if e["reason"] == "GangRolledBack"]
    assert event["type"] == "Warning"
    assert "retrying now avoiding cpu-4/zone-a/spot" in event["message"], "nothing ran: no backoff"
    await h.eventually(
        lambda: any(
            c["type"] == "GangAdmitted" and c["reason"] == "RolledBack"
            for c in pod(h, "w0")["status"].get("conditions") or []
        ),
        "a pod condition",
    )

    # the fault is cleared; the retry comes after the backoff (and once the offering is no longer avoided)
    await h.kube.patch(KWOKNODECLASSES, "default", {"spec": {"failures": None}})
    await h.cached("KWOKNodeClass", "default")
    for _ in range(8):  # past the 30 s backoff and the 3 min the failed offering is avoided
        await h.advance(30)
    await h.eventually(lambda: len(gang_claims(h)) == 3, "a new attempt")
    names = sorted(gang_claims(h))
    await make_all_ready(h, names)
    await h.eventually(lambda: not any(gated(h, n) for n in ("w0", "w1", "launcher")), "admitted on retry")
    assert record(h, "w0").attempt == 2


async def test_a_member_refused_for_capacity_is_bought_again_alone_and_the_launched_nodes_are_kept(
    world: Harness,
) -> None:
    """The launcher's preferred NodePool (weight 100, cpu-4 only) has no capacity; the GPU members'
    machines launch. Only the launcher's NodeClaim is bought again (on the other NodePool, avoiding
    cpu-4 in the gang's zone); the GPU NodeClaims of the first plan are the ones admitted, and nothing
    is rolled back."""
    h = world
    await h.create_nodeclass("refusing", failures={"insufficientCapacity": ["cpu-4"]})
    await nodepool(h, "cheap", instance_types=["cpu-4"], weight=100, nodeclass="refusing")
    await gang_pod(h, "w0", cpu="95")  # fills an 8-GPU machine: the launcher needs its own
    await gang_pod(h, "w1", cpu="95")
    await gang_pod(h, "launcher", gpus=0, cpu="2")
    start_gangs(h)
    await h.eventually(lambda: len(gang_claims(h)) >= 3, "the first plan's NodeClaims")
    first = record(h, "w0")
    launcher_claim = next(
        n
        for n, c in gang_claims(h).items()
        if c["metadata"]["annotations"]["joiner.sh/gang-offering"].startswith("cpu-4/")
    )
    gpu_claims = sorted(n for n in first.nodeclaims if n != launcher_claim)
    assert len(gpu_claims) == 2

    await h.eventually(lambda: record(h, "w0").replans == 1, "the refused NodeClaim planned again")
    again = record(h, "w0")
    assert (again.phase, again.attempt, again.id, again.rollbacks) == (PROVISIONING, 1, first.id, 0)
    assert again.deadline == first.deadline, "the attempt keeps its deadline"
    assert set(gpu_claims) < set(again.nodeclaims)
    assert launcher_claim not in again.nodeclaims
    [replacement] = [n for n in again.nodeclaims if n not in gpu_claims]
    assert f"-g{first.id}r1-" in replacement
    now = h.ctx.clock.now()
    assert {"cpu-4/zone-a/spot", "cpu-4/zone-a/on-demand"} & set(again.avoiding(now))
    assert "InsufficientCapacity" in again.last_failure
    await h.eventually(lambda: any(e["reason"] == "GangReplanned" for e in events(h, "w0")), "told")
    [event] = [e for e in events(h, "w0") if e["reason"] == "GangReplanned"]
    assert event["type"] == "Normal"
    assert "cpu-4" in event["message"]
    assert "keeping the 2 that launched" in event["message"]
    assert all(gated(h, n) for n in ("w0", "w1", "launcher")), "nobody starts while a node is missing"

    await h.eventually(lambda: replacement in gang_claims(h), "the replacement NodeClaim")
    offering = gang_claims(h)[replacement]["metadata"]["annotations"]["joiner.sh/gang-offering"]
    assert not offering.startswith("cpu-4/zone-a/"), offering
    assert "/zone-a/" in offering, "the gang stays in one zone"
    await make_all_ready(h, [*gpu_claims, replacement])
    await h.eventually(lambda: not any(gated(h, n) for n in ("w0", "w1", "launcher")), "admitted")
    assert record(h, "w0").phase == ADMITTED
    assert sorted(gang_claims(h)) == sorted([*gpu_claims, replacement]), "the launched machines were kept"
    assert not [e for e in events(h, "w0") if e["reason"] == "GangRolledBack"]


async def test_a_refused_member_with_no_room_beside_the_launched_ones_rolls_the_attempt_back(world: Harness) -> None:
    """The launcher may only run on cpu-4, refused in the gang's zone: it cannot be bought again
    beside the GPU machines, so the attempt is rolled back whole and the Event says why."""
    h = world
    await h.kube.patch(KWOKNODECLASSES, "default", {"spec": {"failures": {"insufficientCapacity": ["cpu-4"]}}})
    await h.cached("KWOKNodeClass", "default")
    await gang_pod(h, "w0")
    await gang_pod(h, "w1")
    await gang_pod(h, "launcher", gpus=0, node_selector={"node.kubernetes.io/instance-type": "cpu-4"})
    start_gangs(h)
    await h.eventually(
        lambda: record_of(PodView.of(pod(h, "w0"))) is not None and record(h, "w0").phase == ROLLED_BACK, "rolled back"
    )
    assert record(h, "w0").replans == 0
    await h.eventually(lambda: any(e["reason"] == "GangRolledBack" for e in events(h, "w0")), "told")
    [event] = [e for e in events(h, "w0") if e["reason"] == "GangRolledBack"]
    assert "cannot be bought again beside the 2 that launched in zone-a" in event["message"]
    await h.eventually(lambda: gang_claims(h) == {}, "every NodeClaim of the attempt deleted")


async def test_the_deadline_rolls_back_a_gang_whose_node_never_becomes_ready(world: Harness) -> None:
    h = world
    for name in ("w0", "w1", "w2"):
        await gang_pod(h, name, annotations={"joiner.sh/gang-timeout": "2m"})
    start_gangs(h)
    await h.eventually(lambda: len(gang_claims(h)) == 3, "3 NodeClaims")
    names = sorted(gang_claims(h))
    await make_all_ready(h, names[:2])
    await h.advance(121)
    await h.eventually(lambda: record(h, "w0").phase == ROLLED_BACK, "rolled back at the deadline")
    assert "did not finish within 2m" in record(h, "w0").last_failure
    assert names[2] in record(h, "w0").last_failure
    await h.eventually(lambda: gang_claims(h) == {}, "every NodeClaim deleted")
    assert all(gated(h, n) for n in ("w0", "w1", "w2"))


# --- restart safety -------------------------------------------------------------------------------


async def test_a_restarted_controller_finishes_a_half_done_gang(world: Harness) -> None:
    h = world
    for name in ("w0", "w1", "w2"):
        await gang_pod(h, name)
    first = start_gangs(h)
    await h.eventually(lambda: len(gang_claims(h)) == 3, "3 NodeClaims")
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await first
    names = sorted(gang_claims(h))
    await make_all_ready(h, names)
    await h.settle(200)
    assert all(gated(h, n) for n in ("w0", "w1", "w2")), "nobody admits while the controller is down"
    start_gangs(h)
    await h.eventually(lambda: not any(gated(h, n) for n in ("w0", "w1", "w2")), "admitted after the restart")
    assert len(h.kube.objects(NODECLAIMS)) == 3


async def test_a_new_leader_first_finishes_an_admission_its_predecessor_left_half_done(world: Harness) -> None:
    """The leader died after removing the gate of w0 only. The next controller's first writes are the
    other members' gate removals, before it deletes a leftover NodeClaim of an earlier attempt or
    does anything else about the gang."""
    h = world
    for name in ("w0", "w1", "w2"):
        await gang_pod(h, name)
    first = start_gangs(h)
    await h.eventually(lambda: len(gang_claims(h)) == 3, "3 NodeClaims")
    await make_all_ready(h, sorted(gang_claims(h)))
    await h.eventually(lambda: not any(gated(h, n) for n in ("w0", "w1", "w2")), "admitted")
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await first
    # put w1 and w2 back where a leader that died between the patches leaves them: still gated,
    # with the attempt's Provisioning record (the Admitted one goes with the gate removal)
    adm = record(h, "w0")
    assert adm.phase == ADMITTED
    pin = Record(
        seq=adm.seq - 1,
        attempt=adm.attempt,
        id=adm.id,
        phase=PROVISIONING,
        nodeclaims=adm.nodeclaims,
        started=adm.started,
        deadline=h.ctx.clock.now() + timedelta(minutes=10),
        members=3,
    )
    for name in ("w1", "w2"):
        await h.kube.patch(
            PODS,
            name,
            {
                "metadata": {"annotations": {"joiner.sh/gang-state": pin.to_json()}},
                "spec": {"schedulingGates": [{"name": "joiner.sh/gang"}]},
            },
            namespace="ml",
        )
    leftover = {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": "gpu-gold-0",
            "labels": {"joiner.sh/gang": GID, "joiner.sh/nodepool": "gpu"},
            "annotations": {"joiner.sh/gang-attempt": "old", "joiner.sh/gang-name": "ml/train"},
        },
        "spec": {
            "nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"},
            "requirements": [],
            "resources": {"requests": {"cpu": "1"}},
        },
    }
    await h.kube.create(NODECLAIMS, leftover)
    for name in ("w1", "w2"):
        await h.cached("Pod", f"ml/{name}")
    await h.cached("NodeClaim", "gpu-gold-0")
    assert gated(h, "w1")
    assert gated(h, "w2")
    h.kube.calls.clear()
    start_gangs(h)
    await h.eventually(lambda: not gated(h, "w1") and not gated(h, "w2"), "the rest of the gang released")
    await h.eventually(lambda: "gpu-gold-0" not in gang_claims(h) or _deleting(h, "gpu-gold-0"), "leftover deleted")
    # the gang controller's writes (the lifecycle controller launches the leftover meanwhile)
    writes = [
        (verb, plural, name)
        for verb, plural, name in h.kube.calls
        if plural == "pods" or (plural == "nodeclaims" and verb == "delete")
    ]
    assert writes[:2] == [("patch", "pods", "w1"), ("patch", "pods", "w2")] or writes[:2] == [
        ("patch", "pods", "w2"),
        ("patch", "pods", "w1"),
    ], writes[:6]
    assert record(h, "w1").phase == ADMITTED
    assert record(h, "w1").id == adm.id


def _deleting(h: Harness, name: str) -> bool:
    obj = h.kube.obj(NODECLAIMS, name)
    return obj is None or bool(obj["metadata"].get("deletionTimestamp"))


async def test_a_crash_before_the_nodeclaims_were_created_is_retried_at_once(world: Harness) -> None:
    h = world
    rec = Record(seq=1, attempt=1, id="dead00", phase=PROVISIONING, nodeclaims=("gpu-gdead00-0", "gpu-gdead00-1"))
    for name in ("w0", "w1"):
        await gang_pod(h, name, size=2, annotations={"joiner.sh/gang-state": rec.to_json()})
    start_gangs(h)
    await h.eventually(lambda: len(gang_claims(h)) == 2, "a fresh attempt")
    assert record(h, "w0").attempt == 2
    assert record(h, "w0").rollbacks == 0, "an interrupted attempt costs no backoff"


async def test_nodeclaims_of_a_gang_whose_pods_are_gone_are_deleted(world: Harness) -> None:
    h = world
    for name in ("w0", "w1", "w2"):
        await gang_pod(h, name)
    first = start_gangs(h)
    await h.eventually(lambda: len(gang_claims(h)) == 3, "3 NodeClaims")
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await first
    for name in ("w0", "w1", "w2"):
        await h.kube.delete(PODS, name, namespace="ml")
    start_gangs(h)
    await h.eventually(lambda: h.kube.objects(NODECLAIMS) == {}, "no NodeClaim leaked")


# --- after admission ------------------------------------------------------------------------------


async def test_a_lost_member_restarts_the_whole_gang_by_default(world: Harness) -> None:
    h = world
    for name in ("w0", "w1", "w2"):
        await gang_pod(h, name)
    start_gangs(h)
    await h.eventually(lambda: len(gang_claims(h)) == 3, "3 NodeClaims")
    names = sorted(gang_claims(h))
    await make_all_ready(h, names)
    await h.eventually(lambda: all(h.condition_status(n, "GangAdmitted") == "True" for n in names), "admitted")
    await h.kube.delete(NODECLAIMS, names[0])
    await h.eventually(lambda: all(h.kube.obj(PODS, n, "ml") is None for n in ("w0", "w1", "w2")), "members deleted")
    remaining = [n for n in names[1:] if h.claim(n) is not None]
    await h.eventually(lambda: all(h.condition_status(n, "GangAdmitted") == "False" for n in remaining), "unmarked")


async def bind(h: Harness, pod_name: str, node: str) -> None:
    """What kube-scheduler does once the gate is gone."""
    await h.kube.patch(PODS, pod_name, {"spec": {"nodeName": node}, "status": {"phase": "Running"}}, namespace="ml")


async def test_replace_member_keeps_the_others_running_and_tops_the_gang_up(world: Harness) -> None:
    h = world
    policy = {"joiner.sh/gang-member-loss-policy": "replace-member"}
    for name in ("w0", "w1", "w2"):
        await gang_pod(h, name, annotations=policy)
    start_gangs(h)
    await h.eventually(lambda: len(gang_claims(h)) == 3, "3 NodeClaims")
    names = sorted(gang_claims(h))
    await make_all_ready(h, names)
    await h.eventually(lambda: not any(gated(h, n) for n in ("w0", "w1", "w2")), "admitted")
    for pod_name, node in zip(("w0", "w1", "w2"), names, strict=True):
        await bind(h, pod_name, node)
    await h.eventually(lambda: all(h.condition_status(n, "GangAdmitted") == "True" for n in names), "marked")

    # w0's node is lost; its workload controller replaces the pod (gated, like the template says)
    await h.kube.delete(NODECLAIMS, names[0])
    await h.eventually(lambda: "GangMemberLost" in [e["reason"] for e in events(h, "w1")], "an Event")
    if h.kube.obj(PODS, "w0", "ml") is not None:  # drained with its node already, or not yet
        await h.kube.delete(PODS, "w0", namespace="ml")
    await gang_pod(h, "w0-again", annotations=policy)
    await h.eventually(lambda: len([n for n in gang_claims(h) if n not in names]) == 1, "one new NodeClaim")
    [new] = [n for n in gang_claims(h) if n not in names]
    zone = [
        r["values"] for r in gang_claims(h)[new]["spec"]["requirements"] if r["key"] == "topology.kubernetes.io/zone"
    ]
    assert zone == [["zone-a"]], "the replacement goes where the gang runs"
    assert gated(h, "w0-again")
    await make_all_ready(h, [new])
    await h.eventually(lambda: not gated(h, "w0-again"), "the replacement is released")
    assert h.kube.obj(PODS, "w1", "ml") is not None
    assert h.kube.obj(PODS, "w2", "ml") is not None, "the running members were left alone"
    await h.eventually(lambda: h.condition_status(new, "GangAdmitted") == "True", "the new node is marked")


async def test_the_size_comes_from_the_podgroup_when_its_crd_exists(world: Harness) -> None:
    from controller.gang.podgroups import COSCHEDULING_PODGROUPS
    from controller.kube.resources import CRDS

    h = world
    await h.kube.create(CRDS, {"metadata": {"name": "podgroups.scheduling.x-k8s.io"}})
    await h.kube.create(
        COSCHEDULING_PODGROUPS, {"metadata": {"name": "pg", "namespace": "ml"}, "spec": {"minMember": 2}}
    )
    for name in ("p0", "p1"):
        created = await gang_pod(h, name, gang="unused", size=0)
        meta = created["metadata"]
        await h.kube.patch(
            PODS,
            name,
            {
                "metadata": {
                    "labels": {"joiner.sh/gang": None, "scheduling.x-k8s.io/pod-group": "pg"},
                    "annotations": {"joiner.sh/gang-size": None},
                }
            },
            namespace=meta["namespace"],
        )
    start_gangs(h)
    await h.eventually(lambda: len(gang_claims(h, "ml.pg")) == 2, "2 NodeClaims sized by minMember")


# --- what failed stays avoided ----------------------------------------------------------------------


async def test_offerings_that_never_register_stay_avoided_until_the_gang_runs_on_a_dearer_type() -> None:
    """The cheapest type of the launcher's pool never registers, in either capacity type; a dearer
    type would work. Every rollback adds what failed to what the gang avoids, the launch skips it too,
    and the third attempt is admitted on the dearer type instead of alternating between the two
    broken offerings forever."""
    settings = Settings(registration_timeout_seconds=60, gang_timeout_seconds=600, gang_backoff_seconds=5)
    h = await make_harness(settings)
    try:
        h.start(LifecycleController(h.ctx), TerminationController(h.ctx))
        await h.create_nodeclass(failures={"neverRegister": ["cpu-4"]})
        await nodepool(h)
        await gang_pod(h, "w0", cpu="95")  # fills an 8-GPU machine: the launcher needs its own
        await gang_pod(h, "w1", cpu="95")
        await gang_pod(h, "launcher", gpus=0, cpu="2")
        start_gangs(h)
        attempts: dict[str, str] = {}  # attempt id -> the launcher's offering, in order
        for _ in range(60):
            await h.advance(10)
            for name, claim in gang_claims(h).items():
                if (
                    h.condition_status(name, "Registered") == "True"
                    and h.condition_status(name, "Initialized") != "True"
                ):
                    await h.make_ready(name)
                offering = claim["metadata"]["annotations"]["joiner.sh/gang-offering"]
                attempt = claim["metadata"]["annotations"]["joiner.sh/gang-attempt"]
                if not offering.startswith("gpu-8/"):
                    attempts[attempt] = offering
            if not any(gated(h, n) for n in ("w0", "w1", "launcher")):
                break
        assert not any(gated(h, n) for n in ("w0", "w1", "launcher")), f"never admitted; attempts: {attempts}"
        assert list(attempts.values())[:2] == ["cpu-4/zone-a/spot", "cpu-4/zone-a/on-demand"], attempts
        assert list(attempts.values())[-1] == "gpu-1/zone-a/on-demand", attempts
        assert len(attempts) == 3, attempts
        assert record(h, "w0").avoid == (), "an admitted gang avoids nothing"
    finally:
        await h.close()


async def test_one_off_capacity_refusals_neither_grow_the_backoff_nor_exclude_an_offering_for_good(
    world: Harness,
) -> None:
    """Both zones refuse capacity, once. Each rollback retries at once, elsewhere (nothing ran, and
    the refused offerings are avoided), the backoff level stays 0, and once the unavailable-offering
    TTL (3 min) has passed since zone-a failed, the gang is planned on zone-a's cheap spot offering
    again instead of avoiding it until it is admitted."""
    h = world
    zone_a = {"instanceType": "cpu-4", "zone": "zone-a"}
    zone_b = {"instanceType": "cpu-4", "zone": "zone-b"}
    await h.kube.patch(KWOKNODECLASSES, "default", {"spec": {"failures": {"insufficientCapacity": [zone_a, zone_b]}}})
    await h.cached("KWOKNodeClass", "default")
    for name in ("w0", "w1"):
        await gang_pod(h, name, gpus=0, cpu="3", size=2, node_selector={"node.kubernetes.io/instance-type": "cpu-4"})
    start_gangs(h)
    failed_at = h.ctx.clock.now()
    await h.eventually(
        lambda: record_of(PodView.of(pod(h, "w0"))) is not None and record(h, "w0").rollbacks == 2,
        "zone-a's attempt and, at once, zone-b's rolled back",
    )
    second = record(h, "w0")
    assert h.ctx.clock.now() == failed_at, "no backoff between the two"
    assert second.level == 0, "a refusal of capacity does not raise the backoff level"
    assert second.retry_at == h.ctx.clock.now()
    assert set(second.avoiding(failed_at)) == {"cpu-4/zone-a/spot", "cpu-4/zone-b/on-demand"}
    assert all(a.until == failed_at + timedelta(minutes=3) for a in second.avoid)
    await h.eventually(
        lambda: any("retrying now" in e["message"] for e in events(h, "w0") if e["reason"] == "GangRolledBack"),
        "told: retrying now",
    )

    # the cloud has capacity again; until zone-a's TTL runs out every offering is avoided: the gang waits
    await h.kube.patch(KWOKNODECLASSES, "default", {"spec": {"failures": None}})
    await h.cached("KWOKNodeClass", "default")
    await h.advance(60)
    assert gang_claims(h) == {}, "every offering failed within the TTL: the gang waits for capacity"
    while (h.ctx.clock.now() - failed_at).total_seconds() < 181 + 30:
        await h.advance(10)
        if gang_claims(h):
            break
    await h.eventually(lambda: len(gang_claims(h)) == 2, "a third attempt once zone-a's TTL has passed")
    offerings = {c["metadata"]["annotations"]["joiner.sh/gang-offering"] for c in gang_claims(h).values()}
    assert offerings == {"cpu-4/zone-a/spot"}, "zone-a's spot offering is no longer avoided"
    assert (h.ctx.clock.now() - failed_at).total_seconds() >= 180
    await make_all_ready(h, sorted(gang_claims(h)))
    await h.eventually(lambda: not gated(h, "w0") and not gated(h, "w1"), "admitted")
