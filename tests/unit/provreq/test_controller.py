"""The ProvisioningRequest controller on the in-memory apiserver, with the real lifecycle, termination
and kwok provider, on a fake clock: what Kueue (the asker) and a user of kubectl see."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from controller.kube.resources import (
    KWOKNODECLASSES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
    PODTEMPLATES,
    PROVISIONING_REQUESTS,
    PVCS,
    PVS,
)
from controller.nodeclaim.lifecycle import LifecycleController
from controller.provisioning.provisioner import Provisioner
from controller.provreq.booker import Booker
from controller.provreq.controller import ProvisioningRequestController
from controller.provreq.decide import Knobs
from controller.provreq.manifest import LABEL_REQUEST_UID
from controller.provreq.reader import RequestReader
from controller.provreq.request import ProvisioningRequest
from controller.settings import Settings
from controller.state.cluster import WATCHED
from controller.termination.controller import TerminationController
from tests.unit.harness import Harness, make_harness

Obj = dict[str, Any]
NS = "team"
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK = "check-capacity.autoscaling.x-k8s.io"


@pytest.fixture
async def world() -> AsyncIterator[Harness]:
    h = await make_harness(
        Settings(provisioning_request_booking_seconds=600.0),
        watched=(*WATCHED, PROVISIONING_REQUESTS, PODTEMPLATES),
    )
    h.start(LifecycleController(h.ctx), TerminationController(h.ctx))
    await h.create_nodeclass()
    await h.kube.create(
        NODEPOOLS,
        {
            "apiVersion": "joiner.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "gpu"},
            "spec": {
                "template": {
                    "spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}}
                }
            },
        },
    )
    await h.cached("NodePool", "gpu")
    try:
        yield h
    finally:
        await h.close()


def start(h: Harness) -> None:
    h.tasks.append(asyncio.create_task(ProvisioningRequestController(h.ctx).run(), name="provreq"))


async def template(h: Harness, name: str, *, gpus: int = 1, cpu: str = "1", claim: str | None = None) -> None:
    requests = {"cpu": cpu, "memory": "1Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    spec: Obj = {"containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}]}
    if claim:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    await h.kube.create(
        PODTEMPLATES,
        {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": name, "namespace": NS},
            "template": {"metadata": {"labels": {"app": "train"}}, "spec": spec},
        },
        namespace=NS,
    )


async def request(
    h: Harness, name: str, *, sets: list[tuple[str, int]], klass: str = ATOMIC, params: dict[str, str] | None = None
) -> Obj:
    obj: Obj = {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "provisioningClassName": klass,
            "podSets": [{"podTemplateRef": {"name": t}, "count": n} for t, n in sets],
        },
    }
    if params:
        obj["spec"]["parameters"] = params
    return await h.kube.create(PROVISIONING_REQUESTS, obj, namespace=NS)


def pr(h: Harness, name: str) -> Obj:
    found = h.kube.obj(PROVISIONING_REQUESTS, name, NS)
    assert found is not None
    return found


def cond(h: Harness, name: str, ctype: str) -> Obj | None:
    found = h.kube.obj(PROVISIONING_REQUESTS, name, NS)
    for c in ((found or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return None


def is_true(h: Harness, name: str, ctype: str) -> bool:
    c = cond(h, name, ctype)
    return c is not None and c["status"] == "True"


def claims_of(h: Harness, name: str) -> dict[str, Obj]:
    uid = pr(h, name)["metadata"]["uid"]
    return {
        n: c
        for n, c in h.kube.objects(NODECLAIMS).items()
        if c["metadata"]["labels"].get(LABEL_REQUEST_UID) == uid and not c["metadata"].get("deletionTimestamp")
    }


def reasons(h: Harness, name: str) -> list[str]:
    return [e["reason"] for e in h.kube.events(name)]


async def ready(h: Harness, names: list[str]) -> None:
    for n in names:
        await h.eventually(lambda n=n: h.condition_status(n, "Registered") == "True", f"{n} registered")  # type: ignore[misc]
        await h.make_ready(n)
    await h.eventually(lambda: all(h.condition_status(n, "Initialized") == "True" for n in names), "initialized")


async def consumer(h: Harness, name: str, request_name: str, *, gpus: int = 1) -> Obj:
    return await h.kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {"app": "train"},
                "annotations": {
                    "autoscaling.x-k8s.io/consume-provisioning-request": request_name,
                    "autoscaling.x-k8s.io/provisioning-class-name": ATOMIC,
                },
            },
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "x",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}},
                    }
                ]
            },
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        },
        namespace=NS,
    )


# --- atomic ---------------------------------------------------------------------------------------


async def test_an_atomic_request_is_provisioned_only_when_every_node_is_initialized(world: Harness) -> None:
    h = world
    await template(h, "ppt-job-main", gpus=1)
    await request(h, "job", sets=[("ppt-job-main", 4)])
    start(h)
    await h.eventually(lambda: len(claims_of(h, "job")) == 4, "4 NodeClaims, one per 1-GPU pod")
    await h.eventually(lambda: cond(h, "job", "Provisioned") is not None, "the request says what it buys")
    assert is_true(h, "job", "Accepted")
    provisioned = cond(h, "job", "Provisioned")
    assert provisioned is not None
    assert provisioned["status"] == "False"
    assert "Provisioned when every node is Initialized" in provisioned["message"]
    claims = claims_of(h, "job")
    for c in claims.values():
        assert c["metadata"]["annotations"]["joiner.sh/provisioning-request"] == f"{NS}/job"
        assert "joiner.sh/gang" not in c["metadata"]["labels"]
        assert not [t for t in c["spec"].get("taints") or [] if t["key"] == "joiner.sh/gang"]
        assert not [r for r in c["spec"]["requirements"] if r["key"] == "joiner.sh/gang"], "nor its label"
        zones = [r["values"] for r in c["spec"]["requirements"] if r["key"] == "topology.kubernetes.io/zone"]
        assert zones == [["zone-a"]] or zones == [["zone-b"]]
    assert len({str(c["spec"]["requirements"]) for c in claims.values()}) == 1, "one zone for the whole request"
    assert "Provisioning" in reasons(h, "job")

    names = sorted(claims)
    await ready(h, names[:3])
    await h.settle(200)
    assert not is_true(h, "job", "Provisioned"), "not while a node is missing"
    await ready(h, names[3:])
    await h.eventually(lambda: is_true(h, "job", "Provisioned"), "Provisioned=True")
    provisioned = cond(h, "job", "Provisioned")
    assert provisioned is not None
    assert provisioned["reason"] == "CapacityIsProvisioned"
    assert "Provisioned" in reasons(h, "job")
    await h.eventually(lambda: h.ctx.bookings.get(f"{NS}/job") is not None, "the capacity is booked")
    booking = h.ctx.bookings.get(f"{NS}/job")
    assert booking is not None
    assert booking.nodes == frozenset(names)
    assert sum(len(p) for p in booking.held.values()) == 4, "room held for the four pods to come"


async def test_a_request_whose_pods_read_a_zonal_volume_is_bought_in_its_zone(world: Harness) -> None:
    h = world
    zone = "zone-a"
    await h.kube.create(
        PVS,
        {
            "metadata": {"name": "dataset"},
            "spec": {
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}
                                ]
                            }
                        ]
                    }
                }
            },
        },
    )
    await h.kube.create(
        PVCS,
        {
            "metadata": {"name": "dataset", "namespace": NS, "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"volumeName": "dataset"},
        },
        namespace=NS,
    )
    await h.cached("PersistentVolume", "dataset")
    await h.cached("PersistentVolumeClaim", f"{NS}/dataset")
    await template(h, "ppt-job-main", gpus=1, claim="dataset")
    await request(h, "job", sets=[("ppt-job-main", 2)])
    start(h)
    await h.eventually(lambda: len(claims_of(h, "job")) == 2, "2 NodeClaims")
    for c in claims_of(h, "job").values():
        zones = [r["values"] for r in c["spec"]["requirements"] if r["key"] == "topology.kubernetes.io/zone"]
        assert zones == [[zone]]


async def test_arriving_pods_are_nominated_onto_the_booked_nodes_and_not_planned_again(world: Harness) -> None:
    h = world
    await template(h, "ppt-job-main", gpus=1)
    await request(h, "job", sets=[("ppt-job-main", 2)])
    start(h)
    await h.eventually(lambda: len(claims_of(h, "job")) == 2, "2 NodeClaims")
    names = sorted(claims_of(h, "job"))
    await ready(h, names)
    await h.eventually(
        lambda: is_true(h, "job", "Provisioned") and h.ctx.bookings.get(f"{NS}/job") is not None, "booked"
    )
    h.start(Provisioner(h.ctx))
    for n in ("job-0", "job-1"):
        await consumer(h, n, "job")

    def nominated() -> set[str]:
        return {
            str((h.kube.obj(PODS, n, NS) or {}).get("status", {}).get("nominatedNodeName")) for n in ("job-0", "job-1")
        }

    await h.eventually(lambda: nominated() == set(names), "each pod nominated onto a booked node")
    for _ in range(4):
        await h.advance(5)
    assert len(h.kube.objects(NODECLAIMS)) == 2, "the provisioner bought nothing for the request's pods"


async def test_the_booking_expires_when_the_pods_do_not_come(world: Harness) -> None:
    h = world
    await template(h, "ppt-job-main", gpus=1)
    await request(h, "job", sets=[("ppt-job-main", 1)])
    start(h)
    await h.eventually(lambda: len(claims_of(h, "job")) == 1, "1 NodeClaim")
    await ready(h, sorted(claims_of(h, "job")))
    await h.eventually(lambda: is_true(h, "job", "Provisioned"), "provisioned")
    await h.eventually(
        lambda: is_true(h, "job", "Provisioned") and h.ctx.bookings.get(f"{NS}/job") is not None, "booked"
    )
    for _ in range(11):
        await h.advance(60)
    await h.eventually(lambda: is_true(h, "job", "BookingExpired"), "BookingExpired=True")
    expired = cond(h, "job", "BookingExpired")
    assert expired is not None
    assert expired["reason"] == "CapacityReservationTimeExpired"
    assert h.ctx.bookings.get(f"{NS}/job") is None
    assert "BookingExpired" in reasons(h, "job")


async def spare_nodes(h: Harness, names: list[str]) -> None:
    """Initialized 1-GPU nodes with nothing on them (bought for someone else, now free)."""
    for n in names:
        await h.create_claim(n, instance_types=["gpu-1"], requests={"cpu": "1", "nvidia.com/gpu": "1"})
    await ready(h, names)


async def test_an_atomic_request_that_fits_on_free_nodes_books_them_and_buys_nothing(world: Harness) -> None:
    h = world
    await spare_nodes(h, ["spare-0", "spare-1"])
    await template(h, "ppt-job-main", gpus=1)
    await request(h, "job", sets=[("ppt-job-main", 2)])
    start(h)
    await h.eventually(lambda: is_true(h, "job", "Provisioned"), "Provisioned=True at once")
    provisioned = cond(h, "job", "Provisioned")
    assert provisioned is not None
    assert provisioned["reason"] == "CapacityIsFound", "cluster-autoscaler's answer when no scale-up is needed"
    assert is_true(h, "job", "Accepted")
    assert sorted(h.kube.objects(NODECLAIMS)) == ["spare-0", "spare-1"], "nothing bought"
    assert claims_of(h, "job") == {}
    await h.eventually(lambda: h.ctx.bookings.get(f"{NS}/job") is not None, "the free room is booked")
    booking = h.ctx.bookings.get(f"{NS}/job")
    assert booking is not None
    assert booking.nodes == frozenset({"spare-0", "spare-1"})
    assert sum(len(p) for p in booking.held.values()) == 2
    assert "Provisioned" in reasons(h, "job")

    # the booked room is not offered to a second request: it buys its own machine
    await request(h, "other", sets=[("ppt-job-main", 1)])
    await h.eventually(lambda: len(claims_of(h, "other")) == 1, "the second request buys")
    assert not is_true(h, "other", "Provisioned")

    # Kueue's pods arrive: nominated onto the booked nodes, the provisioner buys nothing for them
    h.start(Provisioner(h.ctx))
    for n in ("job-0", "job-1"):
        await consumer(h, n, "job")

    def nominated() -> set[str]:
        return {
            str((h.kube.obj(PODS, n, NS) or {}).get("status", {}).get("nominatedNodeName")) for n in ("job-0", "job-1")
        }

    await h.eventually(lambda: nominated() == {"spare-0", "spare-1"}, "each pod nominated onto a free node")
    for _ in range(4):
        await h.advance(5)
    assert len(h.kube.objects(NODECLAIMS)) == 3, "only the second request's machine was bought"


async def test_an_atomic_request_partly_fitting_on_free_nodes_buys_only_the_rest(world: Harness) -> None:
    h = world
    await spare_nodes(h, ["spare-0"])
    zone = h.kube.obj(NODES, "spare-0")["metadata"]["labels"]["topology.kubernetes.io/zone"]  # type: ignore[index]
    await template(h, "ppt-job-main", gpus=1)
    await request(h, "job", sets=[("ppt-job-main", 3)])
    start(h)
    await h.eventually(lambda: len(claims_of(h, "job")) == 2, "2 NodeClaims for the 2 pods the free node cannot hold")
    for _ in range(3):
        await h.advance(1)
    assert len(claims_of(h, "job")) == 2, "not 3"
    claims = claims_of(h, "job")
    assert all(zone in str(c["spec"]["requirements"]) for c in claims.values()), "one zone with the free node"
    booking = h.ctx.bookings.get(f"{NS}/job")
    assert booking is not None, "the free room is held while the machines come up"
    assert "spare-0" in booking.nodes
    assert len(booking.held["spare-0"]) == 1, "one pod of the three on the free node"
    assert not is_true(h, "job", "Provisioned")
    await ready(h, sorted(claims))
    await h.eventually(lambda: is_true(h, "job", "Provisioned"), "Provisioned=True once both are Initialized")
    provisioned = cond(h, "job", "Provisioned")
    assert provisioned is not None
    assert provisioned["reason"] == "CapacityIsProvisioned"

    def booked_nodes() -> frozenset[str]:
        b = h.ctx.bookings.get(f"{NS}/job")
        return frozenset() if b is None else b.nodes

    await h.eventually(lambda: booked_nodes() == frozenset({"spare-0", *claims}), "own machines and the free node")
    b = h.ctx.bookings.get(f"{NS}/job")
    assert b is not None
    assert sum(len(p) for p in b.held.values()) == 3


async def other_pod(h: Harness, name: str) -> Obj:
    """A pending 1-GPU pod that has nothing to do with any request."""
    return await h.kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "x",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}},
                    }
                ]
            },
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        },
        namespace="default",
    )


async def one_machine_coming_up(h: Harness) -> str:
    """An atomic request of one 1-GPU pod, its one NodeClaim bought and held while it comes up."""
    await template(h, "ppt-job-main", gpus=1)
    await request(h, "job", sets=[("ppt-job-main", 1)])
    start(h)
    await h.eventually(lambda: len(claims_of(h, "job")) == 1, "1 NodeClaim")
    [mine] = sorted(claims_of(h, "job"))
    await h.eventually(lambda: h.ctx.bookings.get(f"{NS}/job") is not None, "held while it comes up")
    return mine


async def test_the_machines_of_an_attempt_are_held_for_the_request_while_they_come_up_and_after_a_restart(
    world: Harness,
) -> None:
    """The request's NodeClaims carry no taint (Kueue's pods tolerate nothing of joiner's): while they
    come up, only the booking keeps the provisioner from planning other pods into their room -- and
    a restarted controller, whose bookings are in memory, holds it again from the attempt's record."""
    h = world
    mine = await one_machine_coming_up(h)
    booking = h.ctx.bookings.get(f"{NS}/job")
    assert booking is not None
    assert booking.nodes == frozenset({mine})
    assert [len(p) for p in booking.held.values()] == [1]

    # a restart: the controller's memory (and the shared book) is empty; the attempt is on the request
    for task in [t for t in h.tasks if t.get_name() == "provreq"]:
        task.cancel()
        h.tasks.remove(task)
    h.ctx.bookings.release(f"{NS}/job")
    start(h)
    await h.kube.patch(PROVISIONING_REQUESTS, "job", {"metadata": {"labels": {"nudge": "1"}}}, namespace=NS)
    await h.eventually(lambda: h.ctx.bookings.get(f"{NS}/job") is not None, "held again after the restart")
    again = h.ctx.bookings.get(f"{NS}/job")
    assert again is not None
    assert again.nodes == frozenset({mine})
    assert not is_true(h, "job", "Provisioned")

    # another pod that would fit in the coming machine's room gets a machine of its own
    h.start(Provisioner(h.ctx))
    await other_pod(h, "web-0")
    for _ in range(4):
        await h.advance(5)
    await h.eventually(lambda: len(h.kube.objects(NODECLAIMS)) == 2, "a NodeClaim for the other pod")
    nominated = (h.kube.obj(PODS, "web-0", "default") or {}).get("status", {}).get("nominatedNodeName")
    assert nominated != mine, "not planned into the room held for the request"
    assert len(claims_of(h, "job")) == 1


async def test_the_attempts_room_follows_a_machine_that_registers_under_a_node_name_of_its_own(
    world: Harness,
) -> None:
    """aws names the Node ip-10-...: the room held under the NodeClaim's name is held again under the
    Node's once it registers (the provisioner's machines are keyed by the Node's name then)."""
    h = world
    mine = await one_machine_coming_up(h)
    booker = Booker(h.ctx, Knobs(), RequestReader(h.ctx))
    req = ProvisioningRequest.of(pr(h, "job"))
    view = booker.reader.view(req)
    assert booker.holds_attempt(view)
    registered = {n: replace(c, node_name="ip-10-0-0-7") for n, c in view.claims.items()}
    assert not booker.holds_attempt(replace(view, claims=registered)), "the Node's name is not booked yet"
    booking = h.ctx.bookings.get(f"{NS}/job")
    assert booking is not None
    h.ctx.bookings.publish(replace(booking, nodes=frozenset({mine, "ip-10-0-0-7"})))
    assert booker.holds_attempt(replace(view, claims=registered))


async def test_the_controller_holds_the_attempts_room_again_when_its_machine_registers_under_another_name(
    world: Harness,
) -> None:
    """The same as the test above, driven through the controllers: a machine that joins as a Node
    named by its cloud (aws: ip-10-...), not after its NodeClaim, is registered under that name, and
    the request's booking moves to it while the attempt is still coming up."""
    h = world
    # the kwok provider makes its own Node (named after the NodeClaim) only after a minute here
    await h.kube.patch(KWOKNODECLASSES, "default", {"spec": {"registrationDelay": "60s"}})
    await h.cached("KWOKNodeClass", "default")
    mine = await one_machine_coming_up(h)
    claim = h.claim(mine)
    assert claim is not None
    await h.eventually(lambda: bool((h.claim(mine) or {}).get("status", {}).get("providerID")), "launched")
    provider_id = (h.claim(mine) or {})["status"]["providerID"]
    booking = h.ctx.bookings.get(f"{NS}/job")
    assert booking is not None
    assert booking.nodes == frozenset({mine})

    await h.kube.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "ip-10-0-0-7", "labels": {"kubernetes.io/hostname": "ip-10-0-0-7"}},
            "spec": {"providerID": provider_id},
            "status": {
                "allocatable": (h.claim(mine) or {})["status"].get("allocatable") or {},
                "capacity": (h.claim(mine) or {})["status"].get("capacity") or {},
                "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}],
            },
        },
    )
    await h.eventually(
        lambda: (h.claim(mine) or {}).get("status", {}).get("nodeName") == "ip-10-0-0-7",
        "registered under its own name",
    )
    for _ in range(20):
        booking = h.ctx.bookings.get(f"{NS}/job")
        if booking is not None and "ip-10-0-0-7" in booking.nodes:
            break
        await h.advance(0.5)
    booking = h.ctx.bookings.get(f"{NS}/job")
    assert booking is not None, "the attempt's room is no longer held"
    assert "ip-10-0-0-7" in booking.nodes, f"held under {sorted(booking.nodes)}, not under the Node's name"


async def test_the_booking_ends_when_the_pods_ran_even_if_they_already_finished(world: Harness) -> None:
    """kwok (and any short Job) completes the pods right after they run; the request stays until
    Kueue deletes the workload. Finished pods were bound: the room is free again for the next Job."""
    h = world
    await template(h, "ppt-job-main", gpus=1)
    await request(h, "job", sets=[("ppt-job-main", 2)])
    start(h)
    await h.eventually(lambda: len(claims_of(h, "job")) == 2, "2 NodeClaims")
    names = sorted(claims_of(h, "job"))
    await ready(h, names)
    await h.eventually(
        lambda: is_true(h, "job", "Provisioned") and h.ctx.bookings.get(f"{NS}/job") is not None, "booked"
    )
    annotations = {"autoscaling.x-k8s.io/consume-provisioning-request": "job"}
    await h.bind_pod("job-0", names[0], namespace=NS, metadata={"annotations": annotations})
    await h.bind_pod(
        "job-1", names[1], namespace=NS, metadata={"annotations": annotations}, status={"phase": "Succeeded"}
    )
    await h.eventually(lambda: h.ctx.bookings.get(f"{NS}/job") is None, "the booking released")
    await h.eventually(lambda: is_true(h, "job", "BookingExpired"), "the booking ends for good")
    consumed = cond(h, "job", "BookingExpired")
    assert consumed is not None
    assert consumed["reason"] == "CapacityBookingConsumed", "cluster-autoscaler's reason since autoscaler#9806"
    assert "BookingExpired" not in reasons(h, "job"), "no warning: nothing expired"


async def test_a_booked_node_deleted_before_the_pods_bind_revokes_the_capacity(world: Harness) -> None:
    """Kueue deactivates the workload on CapacityRevoked=True (its pods would wait for a node that is
    gone); the request's other machines stay, ordinary nodes, and nothing is bought to replace it."""
    h = world
    await template(h, "ppt-job-main", gpus=1)
    await request(h, "job", sets=[("ppt-job-main", 2)])
    start(h)
    await h.eventually(lambda: len(claims_of(h, "job")) == 2, "2 NodeClaims")
    names = sorted(claims_of(h, "job"))
    await ready(h, names)
    await h.eventually(
        lambda: is_true(h, "job", "Provisioned") and h.ctx.bookings.get(f"{NS}/job") is not None, "booked"
    )
    await consumer(h, "job-0", "job")
    await h.kube.delete(NODECLAIMS, names[0])
    await h.eventually(lambda: is_true(h, "job", "CapacityRevoked"), "CapacityRevoked=True")
    revoked = cond(h, "job", "CapacityRevoked")
    assert revoked is not None
    assert revoked["reason"] == "CapacityIsRevoked"
    assert names[0] in revoked["message"]
    assert "0 of 2 pods bound" in revoked["message"]
    assert "CapacityRevoked" in reasons(h, "job")
    assert h.ctx.bookings.get(f"{NS}/job") is None, "the booking is released"
    assert is_true(h, "job", "Provisioned"), "Provisioned stays as it was (Kueue reads CapacityRevoked)"
    for _ in range(3):
        await h.advance(5)
    assert sorted(claims_of(h, "job")) == names[1:], "the other machine stays; nothing bought in its place"


async def test_a_node_of_found_capacity_gone_before_the_pods_bind_revokes_it(world: Harness) -> None:
    h = world
    await spare_nodes(h, ["spare-0"])
    await template(h, "ppt-check-main", gpus=1)
    await request(h, "check", sets=[("ppt-check-main", 1)], klass=CHECK)
    start(h)
    await h.eventually(lambda: is_true(h, "check", "Provisioned"), "found on the spare node")
    await h.eventually(lambda: h.ctx.bookings.get(f"{NS}/check") is not None, "booked")
    await h.kube.delete(NODECLAIMS, "spare-0")
    await h.eventually(lambda: is_true(h, "check", "CapacityRevoked"), "CapacityRevoked=True")
    revoked = cond(h, "check", "CapacityRevoked")
    assert revoked is not None
    assert "spare-0" in revoked["message"]


async def test_a_node_deleted_after_the_pods_bound_revokes_nothing(world: Harness) -> None:
    h = world
    await template(h, "ppt-job-main", gpus=1)
    await request(h, "job", sets=[("ppt-job-main", 1)])
    start(h)
    await h.eventually(lambda: len(claims_of(h, "job")) == 1, "1 NodeClaim")
    [name] = sorted(claims_of(h, "job"))
    await ready(h, [name])
    await h.eventually(
        lambda: is_true(h, "job", "Provisioned") and h.ctx.bookings.get(f"{NS}/job") is not None, "booked"
    )
    annotations = {"autoscaling.x-k8s.io/consume-provisioning-request": "job"}
    await h.bind_pod("job-0", name, namespace=NS, metadata={"annotations": annotations})
    await h.eventually(lambda: h.ctx.bookings.get(f"{NS}/job") is None, "the booking ends: the pod bound")
    await h.kube.delete(NODECLAIMS, name)
    for _ in range(3):
        await h.advance(5)
    assert cond(h, "job", "CapacityRevoked") is None


async def test_a_request_that_can_never_fit_fails_at_once_and_buys_nothing(world: Harness) -> None:
    h = world
    await template(h, "ppt-big-main", gpus=16)
    await request(h, "big", sets=[("ppt-big-main", 2)])
    start(h)
    await h.eventually(lambda: is_true(h, "big", "Failed"), "Failed=True")
    failed = cond(h, "big", "Failed")
    assert failed is not None
    assert failed["reason"] == "CapacityCannotFit"
    assert "nvidia.com/gpu" in failed["message"]
    assert h.kube.objects(NODECLAIMS) == {}
    assert "ProvisioningFailed" in reasons(h, "big")


async def test_a_capacity_refusal_rolls_the_attempt_back_and_the_retry_buys_elsewhere(world: Harness) -> None:
    h = world
    await h.kube.patch(
        KWOKNODECLASSES,
        "default",
        {"spec": {"failures": {"insufficientCapacity": [{"instanceType": "gpu-1", "zone": "zone-b"}]}}},
    )
    await h.cached("KWOKNodeClass", "default")
    await template(h, "ppt-job-main", gpus=1)
    await request(h, "job", sets=[("ppt-job-main", 2)])
    start(h)
    await h.eventually(lambda: "ProvisioningRolledBack" in reasons(h, "job"), "rolled back")
    assert not is_true(h, "job", "Provisioned")
    rolled = cond(h, "job", "Provisioned")
    assert rolled is not None
    assert rolled["reason"] == "CapacityIsNotFound"
    assert "InsufficientCapacity" in rolled["message"]
    await h.advance(1)
    await h.eventually(
        lambda: (
            len(claims_of(h, "job")) == 2
            and all("zone-a" in str(c["spec"]["requirements"]) for c in claims_of(h, "job").values())
        ),
        "a second attempt in the zone that has capacity",
    )
    await ready(h, sorted(claims_of(h, "job")))
    await h.eventually(lambda: is_true(h, "job", "Provisioned"), "provisioned on the retry")


async def test_deleting_a_request_mid_provisioning_leaves_nothing_behind(world: Harness) -> None:
    h = world
    await template(h, "ppt-job-main", gpus=1)
    await request(h, "job", sets=[("ppt-job-main", 3)])
    start(h)
    await h.eventually(lambda: len(claims_of(h, "job")) == 3, "3 NodeClaims")
    await h.kube.delete(PROVISIONING_REQUESTS, "job", namespace=NS)
    await h.eventually(
        lambda: all(c["metadata"].get("deletionTimestamp") for c in h.kube.objects(NODECLAIMS).values()),
        "every NodeClaim of the request deleted",
    )


async def test_requests_of_other_classes_are_left_alone(world: Harness) -> None:
    h = world
    await template(h, "ppt-x-main", gpus=1)
    await request(h, "other", sets=[("ppt-x-main", 1)], klass="queued-provisioning.gke.io")
    start(h)
    for _ in range(3):
        await h.advance(5)
    assert (pr(h, "other").get("status") or {}).get("conditions") is None
    assert h.kube.objects(NODECLAIMS) == {}


# --- check-capacity -------------------------------------------------------------------------------


async def test_check_capacity_buys_nothing_and_says_whether_the_pods_fit_now(world: Harness) -> None:
    h = world
    await template(h, "ppt-check-main", gpus=1)
    await request(h, "check", sets=[("ppt-check-main", 1)], klass=CHECK)
    start(h)
    await h.eventually(lambda: cond(h, "check", "Provisioned") is not None, "an answer")
    answer = cond(h, "check", "Provisioned")
    assert answer is not None
    assert answer["status"] == "False"
    assert answer["reason"] == "CapacityIsNotFound"
    assert h.kube.objects(NODECLAIMS) == {}, "check-capacity buys nothing"

    # a 1-GPU node appears (bought for someone else): the next look finds room
    await h.create_claim("spare", instance_types=["gpu-1"], requests={"cpu": "1", "nvidia.com/gpu": "1"})
    await ready(h, ["spare"])
    await h.advance(31)
    await h.eventually(lambda: is_true(h, "check", "Provisioned"), "Provisioned=True")
    answer = cond(h, "check", "Provisioned")
    assert answer is not None
    assert answer["reason"] == "CapacityIsFound"
    assert len(h.kube.objects(NODECLAIMS)) == 1
    booking = h.ctx.bookings.get(f"{NS}/check")
    assert booking is not None
    assert booking.nodes == frozenset({"spare"})
