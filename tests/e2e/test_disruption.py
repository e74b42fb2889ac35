"""Disruption, as the operator of a GPU cluster sees it: idle and underused nodes go, expired and
drifted ones are replaced, within budgets and never at the expense of protected pods."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.e2e.harness import Cluster, eventually
from tests.e2e.joiner import wait_seconds
from tests.e2e.manifests import (
    deployment,
    expect_pods_running,
    is_true,
    nodeclaims,
    nodeclass,
    nodepool,
    pod,
    req,
)

Obj = dict[str, Any]
GPU_COUNT = "joiner.sh/gpu-count"
GANG = "joiner.sh/gang"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
SMALL = "c6i.large"  # 1930m cpu allocatable
MEDIUM = "c6i.xlarge"  # 3920m cpu, cheaper per cpu than two SMALL
FAST = {"disruption_poll_interval": "1", "disruption_validation_delay": "1"}


def _ns(cluster: Cluster) -> str:
    return cluster.create_namespace(f"disr-{uuid.uuid4().hex[:6]}")


def _pool(name: str, *types: str, disruption: Obj, expire_after: str | None = None) -> Obj:
    pool = nodepool(name, requirements=[req(GPU_COUNT, "DoesNotExist"), req(INSTANCE_TYPE, "In", *types)])
    pool["spec"]["disruption"] = disruption
    if expire_after is not None:
        pool["spec"]["template"]["spec"]["expireAfter"] = expire_after
    return pool


def _scale(cluster: Cluster, ns: str, name: str, replicas: int) -> None:
    cluster.kubectl("scale", f"deployment/{name}", f"--replicas={replicas}", "-n", ns)


def _nodes(cluster: Cluster) -> dict[str, Obj]:
    return {n["metadata"]["name"]: n for n in cluster.items("nodes")}


def _price(cluster: Cluster) -> float:
    return sum(float(c["metadata"]["annotations"]["joiner.sh/planned-price"]) for c in nodeclaims(cluster))


def _events(cluster: Cluster, name: str, reason: str) -> list[Obj]:
    return [
        e
        for e in cluster.items("events", namespace="default")
        if e["involvedObject"].get("name") == name and e.get("reason") == reason
    ]


class ClaimWatch:
    """``kubectl get nodeclaims --watch``: the most NodeClaims ever being disrupted at the same time
    (deleting, or picked by a disruption command), seen event by event rather than by polling."""

    def __init__(self, cluster: Cluster) -> None:
        self.proc = subprocess.Popen(
            [
                str(cluster.bin_dir / "kubectl"),
                "--kubeconfig",
                str(cluster.kubeconfig),
                "get",
                "nodeclaims.joiner.sh",
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.disrupting: set[str] = set()
        self.most = 0
        self.seen: set[str] = set()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        for line in self.proc.stdout:
            buffer += line
            try:
                event, end = decoder.raw_decode(buffer.strip())
            except json.JSONDecodeError:
                continue
            buffer = buffer.strip()[end:]
            obj = event.get("object") or {}
            name = obj.get("metadata", {}).get("name")
            self.seen.add(name)
            busy = event.get("type") != "DELETED" and (
                bool(obj["metadata"].get("deletionTimestamp")) or is_true(obj, "DisruptionReason")
            )
            if busy:
                self.disrupting.add(name)
            else:
                self.disrupting.discard(name)
            self.most = max(self.most, len(self.disrupting))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@contextmanager
def watching(cluster: Cluster) -> Iterator[ClaimWatch]:
    watch = ClaimWatch(cluster)
    try:
        yield watch
    finally:
        watch.stop()


def _wait_for_events(cluster: Cluster, name: str, reason: str, *, timeout: float = 30) -> list[Obj]:
    def probe() -> list[Obj]:
        return _events(cluster, name, reason)

    return eventually(probe, timeout=timeout, what=f"event {reason} on {name}")


# --- emptiness and consolidation ---------------------------------------------------------------


def test_scaling_a_deployment_down_gives_back_the_empty_nodes_and_keeps_the_pods(
    cluster: Cluster, start_joiner: Any
) -> None:
    ns = _ns(cluster)
    policy = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "3s", "budgets": [{"nodes": "100%"}]}
    cluster.apply([nodeclass(), _pool("web", SMALL, disruption=policy)])
    joiner = start_joiner(**FAST)
    cluster.apply(deployment("web", ns, replicas=40, cpu="500m", memory="256Mi"))
    expect_pods_running(cluster, ns, 40, timeout=180)
    assert len(_nodes(cluster)) >= 13  # three pods per node

    _scale(cluster, ns, "web", 4)
    kept = expect_pods_running(cluster, ns, 4)
    uids = {p["metadata"]["uid"] for p in kept}
    hosts = {p["spec"]["nodeName"] for p in kept}

    eventually(lambda: set(_nodes(cluster)) == hosts, timeout=90, what=f"only the nodes of the 4 pods ({hosts})")
    after = expect_pods_running(cluster, ns, 4)
    assert {p["metadata"]["uid"] for p in after} == uids, "the 4 remaining pods were never moved"
    assert joiner.metric("joiner_disruption_decisions_total", reason="Empty") >= 9
    assert joiner.metric("joiner_disruption_decisions_total", reason="Underutilized") == 0
    assert joiner.metric("joiner_disruption_savings_per_hour_total") > 0


def test_a_half_used_cluster_consolidates_onto_fewer_cheaper_nodes(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    policy = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "3s"}
    policy["budgets"] = [{"nodes": "100%"}]  # type: ignore[assignment]
    cluster.apply([nodeclass(), _pool("web", SMALL, MEDIUM, disruption=policy)])
    joiner = start_joiner(**FAST)
    cluster.apply(deployment("web", ns, replicas=24, cpu="500m", memory="256Mi"))
    expect_pods_running(cluster, ns, 24, timeout=180)
    _scale(cluster, ns, "web", 12)
    expect_pods_running(cluster, ns, 12)
    nodes_before, price_before = len(_nodes(cluster)), _price(cluster)

    pending_since: dict[str, float] = {}
    longest = 0.0

    def settled() -> bool:
        nonlocal longest
        now = time.monotonic()
        pods = cluster.items("pods", namespace=ns)
        for p in pods:
            if p["status"].get("phase") == "Pending":
                pending_since.setdefault(p["metadata"]["name"], now)
            elif p["metadata"]["name"] in pending_since:
                longest = max(longest, now - pending_since.pop(p["metadata"]["name"]))
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        nodes = _nodes(cluster)
        # consolidated: fewer nodes, a lower bill, every pod running, no NodeClaim half-way
        return (
            len(running) == 12
            and len(nodes) < nodes_before
            and _price(cluster) < price_before
            and len(nodes) == len(nodeclaims(cluster))
        )

    eventually(settled, timeout=150, interval=1.0, what="12 pods Running on fewer, cheaper nodes")
    assert len(_nodes(cluster)) < nodes_before
    assert _price(cluster) < price_before
    assert longest < 60, f"a pod stayed Pending {longest:.0f}s"
    decisions = joiner.metric("joiner_disruption_decisions_total")
    assert decisions >= 1
    assert joiner.metric("joiner_disruption_evicted_pods_total") >= 1
    log = joiner.logs()
    assert '"disruption.consolidated"' in log or '"disruption.emptied"' in log


# --- budgets -----------------------------------------------------------------------------------


def test_a_budget_of_one_never_disrupts_two_nodes_at_once(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    policy = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "2s", "budgets": [{"nodes": "1"}]}
    cluster.apply([nodeclass(), _pool("web", SMALL, disruption=policy)])
    joiner = start_joiner(**FAST)
    cluster.apply(deployment("web", ns, replicas=12, cpu="500m", memory="256Mi"))
    expect_pods_running(cluster, ns, 12, timeout=120)
    count = len(nodeclaims(cluster))
    assert count >= 4
    with watching(cluster) as watch:
        _scale(cluster, ns, "web", 0)
        eventually(lambda: not nodeclaims(cluster), timeout=120, what="every empty node gone")
        wait_seconds(1)
    assert watch.most == 1, f"{watch.most} NodeClaims were disrupted at the same time"
    assert joiner.metric("joiner_disruption_decisions_total", nodepool="web", reason="Empty") == count


def test_a_cron_budget_blocks_disruption_inside_its_window(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    now = datetime.now(UTC) - timedelta(minutes=1)
    frozen = {"nodes": "0", "schedule": f"{now.minute} {now.hour} * * *", "duration": "1h"}
    policy = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "2s", "budgets": [frozen]}
    pool = _pool("web", SMALL, disruption=policy)
    cluster.apply([nodeclass(), pool])
    start_joiner(**FAST)
    cluster.apply(deployment("web", ns, replicas=2, cpu="500m", memory="256Mi"))
    expect_pods_running(cluster, ns, 2)
    [claim] = nodeclaims(cluster)
    name = claim["metadata"]["name"]
    _scale(cluster, ns, "web", 0)

    event = _wait_for_events(cluster, name, "DisruptionBlocked")[0]
    assert "schedule" in event["message"]
    assert "allows 0 of 1 nodes" in event["message"]
    wait_seconds(5)
    assert [c["metadata"]["name"] for c in nodeclaims(cluster)] == [name], "disrupted inside the window"

    later = now + timedelta(hours=2)  # the window moves away: the empty node may go now
    frozen["schedule"] = f"{later.minute} {later.hour} * * *"
    cluster.apply(pool)
    eventually(lambda: not nodeclaims(cluster), timeout=60, what="the empty node gone once outside the window")


# --- safety ------------------------------------------------------------------------------------


def test_do_not_disrupt_and_pdb_protected_pods_keep_their_nodes(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    policy = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "3s"}
    policy["budgets"] = [{"nodes": "100%"}]  # type: ignore[assignment]
    cluster.apply([nodeclass(), _pool("web", SMALL, MEDIUM, disruption=policy)])
    joiner = start_joiner(**FAST)
    # three pods of 1.2 cpu: each needs its own c6i.large, all three fit one cheaper c6i.xlarge
    special = deployment("special", ns, replicas=1, cpu="1200m", memory="256Mi")
    special["spec"]["template"]["metadata"]["annotations"] = {"joiner.sh/do-not-disrupt": "true"}
    guarded = deployment("guarded", ns, replicas=1, cpu="1200m", memory="256Mi")
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded", "namespace": ns},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    free = deployment("free", ns, replicas=1, cpu="1200m", memory="256Mi")
    steps: list[Any] = [special, [guarded, pdb], free]
    for i, obj in enumerate(steps):
        cluster.apply(obj)
        expect_pods_running(cluster, ns, i + 1, timeout=90)
    claims = {c["metadata"]["name"]: c for c in nodeclaims(cluster)}
    assert len(claims) == 3

    def node_of(app: str) -> str:
        [p] = cluster.items("pods", namespace=ns, selector=f"app={app}")
        return str(p["spec"]["nodeName"])

    protected = {node_of("special"): "do-not-disrupt", node_of("guarded"): "PodDisruptionBudget"}
    for node, why in protected.items():
        blocked = _wait_for_events(cluster, node, "DisruptionBlocked")
        assert any(why in e["message"] for e in blocked), [e["message"] for e in blocked]
    wait_seconds(5)
    assert {c["metadata"]["name"] for c in nodeclaims(cluster)} == set(claims), "a protected node was disrupted"
    assert joiner.metric("joiner_disruption_decisions_total") == 0

    # lift the protections: the three nodes are merged onto one cheaper node
    [pod] = cluster.items("pods", namespace=ns, selector="app=special")
    cluster.kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "joiner.sh/do-not-disrupt-")
    cluster.kubectl("delete", "pdb", "guarded", "-n", ns)
    eventually(
        lambda: len(nodeclaims(cluster)) == 1 and len(expect_pods_running(cluster, ns, 3)) == 3,
        timeout=90,
        what="one node left with the three pods",
    )
    [claim] = nodeclaims(cluster)
    assert claim["metadata"]["labels"][INSTANCE_TYPE] == MEDIUM


def test_a_running_gang_keeps_its_nodes(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    policy = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "3s"}
    policy["budgets"] = [{"nodes": "100%"}]  # type: ignore[assignment]
    cluster.apply([nodeclass(), _pool("web", SMALL, MEDIUM, disruption=policy)])
    start_joiner(**FAST, gang_member_wait="1")
    cluster.apply(deployment("filler", ns, replicas=6, cpu="500m", memory="256Mi"))
    expect_pods_running(cluster, ns, 6)
    members = []
    for i in range(2):
        member = pod(f"train-{i}", ns, cpu="500m", memory="256Mi")
        member["metadata"]["labels"] = {GANG: "train", "app": "train"}
        member["metadata"]["annotations"] = {"joiner.sh/gang-size": "2"}
        member["spec"]["schedulingGates"] = [{"name": GANG}]
        members.append(member)
    cluster.apply(members)
    expect_pods_running(cluster, ns, 8, timeout=120)
    gang_nodes = {p["spec"]["nodeName"] for p in cluster.items("pods", namespace=ns, selector=f"{GANG}=train")}
    # the filler's node now has room for the gang's pods: only the gang rule keeps their node(s)
    _scale(cluster, ns, "filler", 1)
    for node in gang_nodes:
        blocked = _wait_for_events(cluster, node, "DisruptionBlocked")
        assert any("gang" in e["message"] for e in blocked), [e["message"] for e in blocked]
    wait_seconds(5)
    assert gang_nodes <= set(_nodes(cluster)), "a node of the running gang was disrupted"
    pods = cluster.items("pods", namespace=ns, selector=f"{GANG}=train")
    assert {p["spec"]["nodeName"] for p in pods} == gang_nodes
    assert all(p["status"].get("phase") == "Running" for p in pods)


# --- drift and expiry --------------------------------------------------------------------------


def test_changing_the_nodepool_template_replaces_its_nodes_one_budget_at_a_time(
    cluster: Cluster, start_joiner: Any
) -> None:
    ns = _ns(cluster)
    policy = {"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}
    pool = _pool("web", SMALL, disruption=policy)
    cluster.apply([nodeclass(), pool])
    joiner = start_joiner(**FAST)
    cluster.apply(deployment("web", ns, replicas=3, cpu="1200m", memory="256Mi"))
    expect_pods_running(cluster, ns, 3)
    old = {c["metadata"]["name"] for c in nodeclaims(cluster)}
    assert len(old) == 3

    with watching(cluster) as watch:
        pool["spec"]["template"]["metadata"] = {"labels": {"example.com/team": "ml"}}
        cluster.apply(pool)
        eventually(
            lambda: any(is_true(c, "Drifted") for c in nodeclaims(cluster)), timeout=30, what="Drifted condition"
        )

        def replaced() -> bool:
            claims = nodeclaims(cluster)
            fresh = [c for c in claims if c["metadata"]["labels"].get("example.com/team") == "ml"]
            return len(claims) == 3 and len(fresh) == 3 and not old & {c["metadata"]["name"] for c in claims}

        eventually(replaced, timeout=150, interval=1.0, what="three new NodeClaims with the new label")
    expect_pods_running(cluster, ns, 3)
    assert all(n["metadata"]["labels"].get("example.com/team") == "ml" for n in _nodes(cluster).values())
    assert watch.most == 1, f"{watch.most} NodeClaims were disrupted at the same time"
    assert joiner.metric("joiner_disruption_decisions_total", reason="Drifted", action="replace") == 3


def test_an_expired_nodeclaim_is_replaced(cluster: Cluster, start_joiner: Any) -> None:
    ns = _ns(cluster)
    pool = _pool("web", SMALL, disruption={"consolidateAfter": "Never"}, expire_after="20s")
    cluster.apply([nodeclass(), pool])
    joiner = start_joiner(**FAST)
    cluster.apply(deployment("web", ns, replicas=1, cpu="500m", memory="256Mi"))
    expect_pods_running(cluster, ns, 1)
    [first] = nodeclaims(cluster)
    name = first["metadata"]["name"]
    assert first["spec"]["expireAfter"] == "20s"

    def replaced() -> bool:
        claims = nodeclaims(cluster)
        pods = cluster.items("pods", namespace=ns)
        return (
            bool(claims)
            and all(c["metadata"]["name"] != name for c in claims)
            and len(pods) == 1
            and pods[0]["status"].get("phase") == "Running"
        )

    eventually(replaced, timeout=90, interval=1.0, what=f"NodeClaim {name} replaced after expiring")
    assert joiner.metric("joiner_disruption_decisions_total", reason="Expired") >= 1
    assert _events(cluster, name, "Disrupting")


def test_a_rebalance_recommendation_replaces_the_node_only_where_the_pool_opts_in(
    cluster: Cluster, start_joiner: Any
) -> None:
    """kwok's interruption hook sends a rebalance recommendation for each pool's node: the pool that
    opts in (``rebalanceRecommendation: Replace``) gets its node replaced as drifted, new node first;
    the other pool's node keeps running with the recommendation recorded on its NodeClaim."""
    ns = _ns(cluster)
    replace = _pool("replace", SMALL, disruption={"consolidateAfter": "Never", "rebalanceRecommendation": "Replace"})
    ignore = _pool("ignore", MEDIUM, disruption={"consolidateAfter": "Never"})
    cluster.apply([nodeclass(), replace, ignore])
    joiner = start_joiner(**FAST)
    web = deployment("web", ns, replicas=1, cpu="500m", memory="256Mi", node_selector={"joiner.sh/nodepool": "replace"})
    api = deployment("api", ns, replicas=1, cpu="500m", memory="256Mi", node_selector={"joiner.sh/nodepool": "ignore"})
    cluster.apply([web, api])
    expect_pods_running(cluster, ns, 2)
    claims = {c["metadata"]["labels"]["joiner.sh/nodepool"]: c["metadata"]["name"] for c in nodeclaims(cluster)}
    for name in claims.values():
        cluster.kubectl("annotate", "nodeclaim", name, "joiner.sh/interruption=rebalance")

    def replaced() -> bool:
        names = {c["metadata"]["name"] for c in nodeclaims(cluster)}
        pods = cluster.items("pods", namespace=ns)
        return (
            claims["replace"] not in names
            and claims["ignore"] in names
            and len(names) == 2
            and len(pods) == 2
            and all(p["status"].get("phase") == "Running" for p in pods)
        )

    eventually(replaced, timeout=90, interval=1.0, what="the opted-in pool's node replaced, the other kept")
    kept = cluster.get("nodeclaims", claims["ignore"])
    assert kept["metadata"]["annotations"].get("joiner.sh/rebalance-recommended")
    assert not is_true(kept, "Drifted")
    assert _events(cluster, claims["ignore"], "RebalanceRecommended")
    assert joiner.metric("joiner_disruption_decisions_total", reason="Drifted", action="replace") == 1
    assert joiner.metric("joiner_interruption_actions_total", action="rebalance_replace") == 1
    assert joiner.metric("joiner_interruption_actions_total", action="recorded") == 1
