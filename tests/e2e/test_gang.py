"""Gangs, as the user of a distributed training job sees them: every node first, then every pod at once;
or nothing at all, with the reason.

Run against your own cluster: JOINER_CLUSTER_DIR=/tmp/kwok-gang pytest tests/e2e/test_gang.py
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import datetime
from typing import Any

from tests.e2e.harness import Cluster, eventually
from tests.e2e.joiner import wait_seconds
from tests.e2e.manifests import GPU, expect_event, is_true, nodeclaims, nodeclass, nodepool, pod, req

Obj = dict[str, Any]
GANG = "joiner.sh/gang"
ZONE = "topology.kubernetes.io/zone"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GPU_NAME = "joiner.sh/gpu-name"
GPU_COUNT = "joiner.sh/gpu-count"
LAUNCHER_TYPE = "m7a.medium"  # a small CPU-only type of the built-in catalog

# short waits so the whole file runs in a few minutes
FAST_GANGS = {
    "gang_member_wait": "3",
    "gang_backoff": "2",
    "gang_backoff_max": "8",
    "gang_timeout": "90",
    "unavailable_offering_ttl": "3",
}


def _ns(cluster: Cluster) -> str:
    return cluster.create_namespace(f"gang-{uuid.uuid4().hex[:6]}")


def gang_pod(
    name: str,
    namespace: str,
    *,
    gang: str,
    size: int,
    gpus: int = 8,
    cpu: str = "4",
    memory: str = "16Gi",
    node_selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    """A member of a gang, marked the way docs/gangs.md tells users to: gate, label, size."""
    obj = pod(name, namespace, cpu=cpu, memory=memory, gpus=gpus, node_selector=node_selector)
    obj["metadata"]["labels"] = {GANG: gang, "app": gang}
    obj["metadata"]["annotations"] = {"joiner.sh/gang-size": str(size), **(annotations or {})}
    obj["spec"]["schedulingGates"] = [{"name": GANG}]
    return obj


def h100_gang(namespace: str, gang: str, size: int) -> list[Obj]:
    return [
        gang_pod(f"{gang}-{i}", namespace, gang=gang, size=size, node_selector={GPU_NAME: "H100"}) for i in range(size)
    ]


def gang_with_launcher(namespace: str, gang: str, size: int, *, node_selector: dict[str, str]) -> list[Obj]:
    """``size - 1`` H100 members and a small CPU-only launcher member that selects ``node_selector``."""
    members = h100_gang(namespace, gang, size)[: size - 1]
    members.append(
        gang_pod(
            f"{gang}-launcher",
            namespace,
            gang=gang,
            size=size,
            gpus=0,
            cpu="250m",
            memory="256Mi",
            node_selector=node_selector,
        )
    )
    return members


def pods_of(cluster: Cluster, namespace: str, gang: str) -> list[Obj]:
    return cluster.items("pods", namespace=namespace, selector=f"{GANG}={gang}")


def gang_claims(cluster: Cluster, namespace: str, gang: str) -> list[Obj]:
    return [c for c in nodeclaims(cluster) if c["metadata"]["labels"].get(GANG) == f"{namespace}.{gang}"]


def gated(p: Obj) -> bool:
    return any(g["name"] == GANG for g in p["spec"].get("schedulingGates") or [])


def expect_gang_running(cluster: Cluster, namespace: str, gang: str, size: int, *, timeout: float = 120) -> list[Obj]:
    def probe() -> list[Obj] | None:
        pods = pods_of(cluster, namespace, gang)
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return running if len(running) == size == len(pods) else None

    return eventually(probe, timeout=timeout, interval=0.5, what=f"gang {gang}: {size} pods Running")


def expect_nothing_bound(cluster: Cluster, namespace: str, gang: str) -> None:
    pods = pods_of(cluster, namespace, gang)
    assert pods
    assert all(gated(p) and not p["spec"].get("nodeName") for p in pods), "a gang member started alone"


def record(p: Obj) -> Obj:
    return dict(json.loads(p["metadata"]["annotations"]["joiner.sh/gang-state"]))


def micro(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class PartialStartWatch:
    """Samples the gang in the background; fails the test if some members are bound while others stay gated.

    joiner releases a gang by removing every member's gate in concurrent patches, and kube-scheduler
    may bind the first member before the last patch lands: no apiserver write spans several pods.
    So one release can show as a sample or two with some members bound and others still gated.
    What must never happen is a member bound while another stays gated longer than one release
    takes (a release of one member at a time, or a member left gated): that fails the test.
    """

    RELEASE_SECONDS = 1.0  # the gates of one release land within this (the test asserts the binds' spread too)

    def __init__(self, cluster: Cluster, namespace: str, gang: str) -> None:
        self.cluster, self.namespace, self.gang = cluster, namespace, gang
        self.partial: list[tuple[float, str]] = []  # (monotonic time, the members bound then)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = pods_of(self.cluster, self.namespace, self.gang)
            bound = sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName"))
            if bound and any(gated(p) for p in pods):
                self.partial.append((time.monotonic(), ", ".join(bound)))
            self._stop.wait(0.3)

    def __enter__(self) -> PartialStartWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if not self.partial:
            return
        span = self.partial[-1][0] - self.partial[0][0]
        assert span < self.RELEASE_SECONDS, (
            f"members bound while others stayed gated for {span:.1f}s: {[names for _, names in self.partial[:3]]}"
        )


# --- the happy path ------------------------------------------------------------------------------


def test_an_eight_pod_gang_gets_eight_nodes_in_one_zone_and_binds_at_once(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    cluster.apply(
        [
            nodeclass(registrationDelay="2s"),
            nodepool("h100", requirements=[req(GPU_NAME, "In", "H100"), req(GPU_COUNT, "Gt", "7")]),
        ]
    )
    joiner = start_joiner(**FAST_GANGS)
    with PartialStartWatch(cluster, ns, "train"):
        cluster.apply(h100_gang(ns, "train", 8))
        claims = eventually(
            lambda: (c := gang_claims(cluster, ns, "train")) and len(c) == 8 and c, what="8 NodeClaims for the gang"
        )
        # the nodes are still coming up (2 s registration delay): nobody is bound yet
        if not all(is_true(c, "Initialized") for c in nodeclaims(cluster)):
            expect_nothing_bound(cluster, ns, "train")
        running = expect_gang_running(cluster, ns, "train", 8)

    claims = gang_claims(cluster, ns, "train")
    assert len(claims) == 8 == len(cluster.items("nodes"))
    assert len({c["metadata"]["labels"][ZONE] for c in claims}) == 1, "one zone"
    assert {p["spec"]["nodeName"] for p in running} == {c["status"]["nodeName"] for c in claims}, "one pod per node"
    for c in claims:
        assert {"key": GANG, "value": f"{ns}.train", "effect": "NoSchedule"} in c["spec"]["taints"]
        assert is_true(c, "GangAdmitted")
    # every member was scheduled within one second of the others, after the last node was ready
    last_ready = max(
        micro(next(x for x in c["status"]["conditions"] if x["type"] == "Initialized")["lastTransitionTime"])
        for c in claims
    )
    scheduled = [
        micro(e.get("eventTime") or e["firstTimestamp"])
        for e in cluster.items("events", namespace=ns)
        if e.get("reason") == "Scheduled"
    ]
    assert len(scheduled) == 8
    spread = (max(scheduled) - min(scheduled)).total_seconds()
    assert spread < 1.0, f"binds spread over {spread:.3f}s"
    assert min(scheduled).replace(microsecond=0) >= last_ready, "a member was bound before the last node was ready"
    assert joiner.metric("joiner_gangs_admitted") == 1
    assert joiner.metric("joiner_nodeclaims_created_total", reason="gang") == 8
    assert joiner.metric("joiner_gang_admission_seconds_count") == 1


# --- buying nothing ------------------------------------------------------------------------------


def test_a_gang_with_a_member_missing_buys_nothing(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    cluster.apply([nodeclass(), nodepool("general")])
    joiner = start_joiner(**FAST_GANGS)
    cluster.apply(h100_gang(ns, "train", 4)[:3])
    event = expect_event(cluster, namespace=ns, name="train-0", reason="GangWaitingForMembers", timeout=30)
    assert "3 of 4 members" in event["message"]
    assert "1 more" in event["message"]
    wait_seconds(2)
    assert nodeclaims(cluster) == []
    expect_nothing_bound(cluster, ns, "train")
    assert joiner.metric("joiner_gangs_pending") == 1


def test_a_gang_larger_than_the_nodepool_limit_buys_nothing_and_says_why(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    cluster.apply([nodeclass(), nodepool("general", limits={GPU: "32"})])
    start_joiner(**FAST_GANGS)
    cluster.apply(h100_gang(ns, "big", 5))
    event = expect_event(cluster, namespace=ns, name="big-0", reason="GangUnschedulable", timeout=30)
    assert "40 nvidia.com/gpu" in event["message"]
    assert 'NodePool "general"' in event["message"]
    assert "spec.limits nvidia.com/gpu: 32" in event["message"]
    assert "no NodeClaim was created" in event["message"]
    wait_seconds(2)
    assert nodeclaims(cluster) == []
    expect_nothing_bound(cluster, ns, "big")
    [p] = [p for p in pods_of(cluster, ns, "big") if p["metadata"]["name"] == "big-0"]
    condition = next(c for c in p["status"]["conditions"] if c["type"] == "GangAdmitted")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")


def test_two_gangs_over_a_limit_one_is_admitted_whole_the_other_waits_whole(
    cluster: Cluster, start_joiner: Any
) -> None:
    ns = _ns(cluster)
    cluster.apply([nodeclass(), nodepool("general", limits={GPU: "32"})])
    start_joiner(**FAST_GANGS)
    cluster.apply(h100_gang(ns, "left", 3) + h100_gang(ns, "right", 3))
    claims = eventually(lambda: nodeclaims(cluster), what="NodeClaims for one gang")
    wait_seconds(3)
    claims = nodeclaims(cluster)
    owners = {c["metadata"]["labels"][GANG] for c in claims}
    assert len(claims) == 3, f"one whole gang is bought, got {len(claims)} NodeClaims"
    assert len(owners) == 1
    winner = owners.pop().split(".", 1)[1]
    loser = "right" if winner == "left" else "left"
    expect_gang_running(cluster, ns, winner, 3)
    expect_nothing_bound(cluster, ns, loser)
    event = expect_event(cluster, namespace=ns, name=f"{loser}-0", reason="GangWaitingForCapacity")
    assert "waits whole" in event["message"]

    # the winner finishes and its nodes go: the other gang gets its nodes, whole
    cluster.kubectl("delete", "pods", "-n", ns, "-l", f"{GANG}={winner}", "--wait=false")
    cluster.kubectl("delete", "nodeclaims", "-l", f"{GANG}={ns}.{winner}", "--wait=false")
    expect_gang_running(cluster, ns, loser, 3)


# --- rollback ------------------------------------------------------------------------------------


def test_a_launch_failure_rolls_back_every_nodeclaim_then_succeeds_once_cleared(
    cluster: Cluster, start_joiner: Any
) -> None:
    ns = _ns(cluster)
    failing = {"insufficientCapacity": [{"instanceType": LAUNCHER_TYPE}]}
    cluster.apply([nodeclass(registrationDelay="1s", failures=failing), nodepool("general")])
    joiner = start_joiner(**FAST_GANGS)
    members = gang_with_launcher(ns, "train", 4, node_selector={INSTANCE_TYPE: LAUNCHER_TYPE})
    with PartialStartWatch(cluster, ns, "train"):
        cluster.apply(members)
        event = expect_event(cluster, namespace=ns, name="train-0", reason="GangRolledBack", timeout=60)
        assert "InsufficientCapacity" in event["message"]
        assert event["type"] == "Warning"
        failure = record(next(p for p in pods_of(cluster, ns, "train") if p["metadata"]["name"] == "train-1"))
        assert "InsufficientCapacity" in failure["lastFailure"]
        assert LAUNCHER_TYPE in failure["lastFailure"]
        # every NodeClaim of the attempt goes, the GPU nodes that came up included; nobody was bound
        expect_nothing_bound(cluster, ns, "train")
        # while the fault lasts, every retry (after a growing backoff) is rolled back the same way
        eventually(
            lambda: joiner.metric("joiner_gang_rollbacks_total", reason="InsufficientCapacity") >= 2,
            timeout=30,
            what="a second rollback",
        )
        expect_nothing_bound(cluster, ns, "train")

        cluster.apply(nodeclass(registrationDelay="1s"))  # the fault is cleared
        running = expect_gang_running(cluster, ns, "train", 4, timeout=90)
    claims = gang_claims(cluster, ns, "train")
    assert len(claims) == 4
    assert {p["spec"]["nodeName"] for p in running} == {c["status"]["nodeName"] for c in claims}
    # the last attempt rolled back may have been a second before the fault was cleared: its nodes
    # are drained and deleted while the next attempt's come up, and then gone -- none is left behind
    kept = {c["status"]["nodeName"] for c in claims}
    eventually(
        lambda: {n["metadata"]["name"] for n in cluster.items("nodes")} == kept,
        timeout=30,
        what="every node of a rolled back attempt gone, the admitted gang's 4 kept",
    )


# --- interruption --------------------------------------------------------------------------------


def expect_gang_restarted(
    cluster: Cluster, namespace: str, gang: str, size: int, *, old_uids: set[str], timeout: float
) -> list[Obj]:
    """Every member recreated (none of ``old_uids``) and Running, and never some bound while others wait."""

    def restarted() -> list[Obj] | None:
        pods = pods_of(cluster, namespace, gang)
        fresh = [p for p in pods if p["metadata"]["uid"] not in old_uids and p["status"].get("phase") == "Running"]
        return fresh if len(fresh) == size == len(pods) else None

    with PartialStartWatch(cluster, namespace, gang):
        return eventually(restarted, timeout=timeout, interval=0.5, what=f"gang {gang} running again, every pod new")


def gang_statefulset(name: str, namespace: str, *, size: int, gpu_name: str) -> Obj:
    """A gang the way a training operator makes one: a StatefulSet whose pods are gated members, so
    a member deleted by the restart-gang policy is recreated (gated) by its controller."""
    template = gang_pod(name, namespace, gang=name, size=size, gpus=1, cpu="1", memory="4Gi")
    template["spec"]["nodeSelector"] = {GPU_NAME: gpu_name}
    meta = {k: v for k, v in template["metadata"].items() if k in ("labels", "annotations")}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": size,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": meta, "spec": template["spec"]},
        },
    }


def test_a_spot_interruption_of_a_gang_member_restarts_the_gang_on_fresh_nodes_elsewhere(
    cluster: Cluster, start_joiner: Any
) -> None:
    """kwok's interruption hook goes through the same handler as the SQS messages: the member's
    NodeClaim is deleted, its spot offering marked unavailable, and the gang (restart-gang, the
    default) starts again as a unit on nodes that avoid that offering."""
    ns = _ns(cluster)
    gpu_pool = nodepool(
        "l4",
        requirements=[req(GPU_NAME, "In", "L4"), req("joiner.sh/capacity-type", "In", "spot", "on-demand")],
        taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
    )
    cluster.apply([nodeclass(), gpu_pool])
    joiner = start_joiner(**{**FAST_GANGS, "unavailable_offering_ttl": "600"})
    cluster.apply(gang_statefulset("trainer", ns, size=2, gpu_name="L4"))
    first = expect_gang_running(cluster, ns, "trainer", 2, timeout=90)
    claims = gang_claims(cluster, ns, "trainer")
    assert len(claims) == 2
    victim = claims[0]
    labels = victim["metadata"]["labels"]
    offering = (labels[INSTANCE_TYPE], labels[ZONE], labels["joiner.sh/capacity-type"])
    old_uids = {p["metadata"]["uid"] for p in first}

    cluster.kubectl("annotate", "nodeclaim", victim["metadata"]["name"], "joiner.sh/interruption=spot")
    expect_event(cluster, namespace=ns, name="trainer-0", reason="GangMemberLost", timeout=60)

    again = expect_gang_restarted(cluster, ns, "trainer", 2, old_uids=old_uids, timeout=120)
    names = {c["metadata"]["name"] for c in nodeclaims(cluster)}
    assert victim["metadata"]["name"] not in names, "the interrupted NodeClaim is gone"
    for p in again:
        node = cluster.get("nodes", p["spec"]["nodeName"])
        node_labels = node["metadata"]["labels"]
        got = (node_labels[INSTANCE_TYPE], node_labels[ZONE], node_labels["joiner.sh/capacity-type"])
        assert got != offering, f"{p['metadata']['name']} went back to the interrupted offering {offering}"
    assert joiner.metric("joiner_interruption_messages_total", kind="spot_interruption") == 1
    assert joiner.metric("joiner_interruption_actions_total", action="offering_marked_unavailable") == 1
    event = expect_event(cluster, namespace="default", name=victim["metadata"]["name"], reason="Terminating")
    assert "Interrupted" in event["message"]


# --- restart safety ------------------------------------------------------------------------------


def test_killing_the_controller_mid_gang_ends_admitted_or_rolled_back_with_nothing_leaked(
    cluster: Cluster, start_joiner: Any
) -> None:
    ns = _ns(cluster)
    # The Nodes register 8 s after launch, in the controller's own Node-making loop: the kill below
    # lands mid-gang (NodeClaims launched, no Node yet) however slowly this test sees the NodeClaims
    # on a loaded machine. With 3 s, a CI run once saw the 4 NodeClaims only after the first
    # process had admitted the gang, and the check below read an admitted gang as a partial start.
    cluster.apply([nodeclass(registrationDelay="8s"), nodepool("general")])
    first = start_joiner(registration_timeout="20", **FAST_GANGS)
    with PartialStartWatch(cluster, ns, "train"):
        cluster.apply(h100_gang(ns, "train", 4))
        eventually(lambda: len(gang_claims(cluster, ns, "train")) == 4, what="4 NodeClaims")
        first.stop(kill=True)
        wait_seconds(4)  # with the controller down nothing may register the Nodes or admit the gang
        expect_nothing_bound(cluster, ns, "train")
        start_joiner(registration_timeout="20", **FAST_GANGS)
        running = expect_gang_running(cluster, ns, "train", 4, timeout=120)

    def settled() -> bool:
        claims, nodes = nodeclaims(cluster), cluster.items("nodes")
        return len(claims) == 4 == len(nodes) and all(is_true(c, "GangAdmitted") for c in claims)

    eventually(settled, timeout=60, what="exactly the gang's 4 NodeClaims and Nodes, marked admitted")
    assert {p["spec"]["nodeName"] for p in running} == {n["metadata"]["name"] for n in cluster.items("nodes")}


def test_a_gang_whose_cheapest_type_never_registers_is_admitted_on_a_dearer_one(
    cluster: Cluster, start_joiner: Any
) -> None:
    """The launcher's pool offers two types; the cheapest never registers. The retry must not launch
    it again (the NodeClaim lists it first, cheapest first): the gang runs on the dearer type."""
    ns = _ns(cluster)
    cheap, dearer = LAUNCHER_TYPE, "m6i.large"  # m6i.large spot is the next cheapest after m7a.medium spot
    cpu_pool = nodepool("cpu", requirements=[req(INSTANCE_TYPE, "In", cheap, dearer)])
    cluster.apply(
        [nodeclass(registrationDelay="1s", failures={"neverRegister": [cheap]}), nodepool("general"), cpu_pool]
    )
    joiner = start_joiner(registration_timeout="5", **FAST_GANGS)
    members = gang_with_launcher(ns, "train", 3, node_selector={"joiner.sh/nodepool": "cpu"})
    with PartialStartWatch(cluster, ns, "train"):
        cluster.apply(members)
        event = expect_event(cluster, namespace=ns, name="train-0", reason="GangRolledBack", timeout=60)
        assert cheap in event["message"]
        running = expect_gang_running(cluster, ns, "train", 3, timeout=90)
    launcher = next(p for p in running if p["metadata"]["name"] == "train-launcher")
    node = cluster.get("nodes", launcher["spec"]["nodeName"])
    assert node["metadata"]["labels"][INSTANCE_TYPE] == dearer
    assert joiner.metric("joiner_gang_rollbacks_total") == 1, "the second attempt launched the dearer type"


def test_a_member_refused_for_capacity_is_bought_again_alone_and_the_launched_nodes_are_kept(
    cluster: Cluster, start_joiner: Any
) -> None:
    """The launcher's preferred NodePool (its cheapest type) has no capacity; the H100 machines
    launch. Only the launcher's machine is bought again, on the other NodePool in the gang's zone: the
    H100 NodeClaims of the first plan are the ones the gang runs on, and nothing is rolled back."""
    ns = _ns(cluster)
    dearer = "m6i.large"
    launcher_pools = [
        nodepool(
            "cheap",
            requirements=[req(INSTANCE_TYPE, "In", LAUNCHER_TYPE)],
            weight=100,
            nodeclass_name="refusing",
            labels={"role": "launcher"},
        ),
        nodepool("cpu", requirements=[req(INSTANCE_TYPE, "In", dearer)], labels={"role": "launcher"}),
    ]
    refusing = nodeclass(
        "refusing", registrationDelay="1s", failures={"insufficientCapacity": [{"instanceType": LAUNCHER_TYPE}]}
    )
    cluster.apply([nodeclass(registrationDelay="1s"), refusing, nodepool("general"), *launcher_pools])
    joiner = start_joiner(**FAST_GANGS)
    members = gang_with_launcher(ns, "train", 3, node_selector={"role": "launcher"})
    with PartialStartWatch(cluster, ns, "train"):
        cluster.apply(members)
        first = eventually(
            lambda: (
                [c for c in gang_claims(cluster, ns, "train") if c["metadata"]["name"].startswith("general-")]
                if len(gang_claims(cluster, ns, "train")) >= 3
                else None
            ),
            timeout=60,
            what="the first plan's 3 NodeClaims",
        )
        h100 = sorted(c["metadata"]["name"] for c in first)
        assert len(h100) == 2
        event = expect_event(cluster, namespace=ns, name="train-0", reason="GangReplanned", timeout=60)
        assert LAUNCHER_TYPE in event["message"]
        assert "keeping the 2 that launched" in event["message"]
        running = expect_gang_running(cluster, ns, "train", 3, timeout=90)
    claims = {c["metadata"]["name"]: c for c in gang_claims(cluster, ns, "train")}
    assert set(h100) < set(claims), "the H100 machines of the first plan were kept"
    assert len(claims) == 3
    zones = {c["metadata"]["labels"][ZONE] for c in claims.values()}
    assert len(zones) == 1, f"the gang stays in one zone: {zones}"
    launcher = next(p for p in running if p["metadata"]["name"] == "train-launcher")
    node = cluster.get("nodes", launcher["spec"]["nodeName"])
    assert node["metadata"]["labels"][INSTANCE_TYPE] == dearer
    state = record(launcher)
    assert (state["attempt"], state.get("replans"), state["rollbacks"]) == (1, 1, 0)
    assert joiner.metric("joiner_gang_replans_total") == 1
    assert joiner.metric("joiner_gang_rollbacks_total") == 0
