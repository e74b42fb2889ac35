"""Warm capacity, as a user of a GPU cluster sees it: GPU nodes ready before any pod, a pod that starts
on one without a NodeClaim made for it, the buffer refilled behind it, and a schedule window that
brings a buffer and takes it back."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.e2e.harness import Cluster, eventually
from tests.e2e.manifests import (
    GPU,
    expect_nodeclaims_initialized,
    expect_pods_running,
    nodeclaims,
    nodeclass,
    nodepool,
    pod,
    req,
)

GPU_COUNT = "joiner.sh/gpu-count"
WHEN_EMPTY = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "3s", "budgets": [{"nodes": "100%"}]}


def _ns(cluster: Cluster) -> str:
    return cluster.create_namespace(f"cap-{uuid.uuid4().hex[:6]}")


def _gpu_pool(name: str, capacity: dict[str, Any]) -> dict[str, Any]:
    obj = nodepool(name, requirements=[req(GPU_COUNT, "In", "1")], taints=[{"key": GPU, "effect": "NoSchedule"}])
    obj["spec"]["capacity"] = capacity
    obj["spec"]["disruption"] = WHEN_EMPTY
    return obj


def _buffer(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict((cluster.get("nodepools.joiner.sh", name).get("status") or {}).get("buffer") or {})


def _wide_columns(cluster: Cluster, name: str) -> list[tuple[str, str]]:
    """`kubectl get nodepool NAME -o wide` as (column, value) pairs, cut where the header's columns start."""
    header, row = cluster.kubectl("get", "nodepools", name, "-o", "wide").stdout.splitlines()
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    ends = [*starts[1:], None]
    return [(header[a:b].strip(), row[a:b].strip()) for a, b in zip(starts, ends, strict=True)]


def _names(claims: list[dict[str, Any]]) -> set[str]:
    return {c["metadata"]["name"] for c in claims}


def test_a_buffer_of_two_gpu_nodes_is_warm_before_any_pod_and_refills_behind_a_pod(
    cluster: Cluster, start_joiner: Any
) -> None:
    ns = _ns(cluster)
    cluster.apply([nodeclass(), _gpu_pool("warm", {"buffer": {"nodes": 2}})])
    joiner = start_joiner()

    warm = expect_nodeclaims_initialized(cluster, 2)
    warm_nodes = {c["status"]["nodeName"] for c in warm}
    eventually(lambda: _buffer(cluster, "warm") == {"wanted": 2, "ready": 2}, timeout=30, what="status.buffer 2/2")
    assert all(c["metadata"]["labels"][GPU_COUNT] == "1" for c in warm)
    assert joiner.metric("joiner_nodeclaims_created_total", nodepool="warm", reason="capacity") == 2
    # empty for longer than consolidateAfter, and still there: the buffer keeps them
    time.sleep(8)
    assert _names(nodeclaims(cluster)) == _names(warm)
    assert joiner.metric("joiner_capacity_buffer_ready", nodepool="warm") == 2
    columns = _wide_columns(cluster, "warm")
    assert columns[-3:-1] == [("BUFFER", "2"), ("BUFFER-READY", "2")]
    assert columns[-1] == ("FORECAST", "")  # no forecast on this pool

    # a GPU pod starts on a warm node: no NodeClaim is made for it
    cluster.apply(pod("infer", ns, gpus=1))
    [running] = expect_pods_running(cluster, ns, 1, timeout=60)
    assert running["spec"]["nodeName"] in warm_nodes
    assert joiner.metric("joiner_nodeclaims_created_total", nodepool="warm", reason="provisioning") == 0

    # the buffer refills behind it: one new NodeClaim, made for the buffer
    refilled = expect_nodeclaims_initialized(cluster, 3)
    [new] = [c for c in refilled if c["metadata"]["name"] not in _names(warm)]
    assert new["status"]["nodeName"] != running["spec"]["nodeName"]
    assert joiner.metric("joiner_nodeclaims_created_total", nodepool="warm", reason="capacity") == 3
    eventually(lambda: _buffer(cluster, "warm") == {"wanted": 2, "ready": 2}, timeout=30, what="buffer ready again")


def _next_minute(after: float) -> datetime:
    """The next whole UTC minute at least `after` seconds away."""
    now = datetime.now(UTC)
    return (now + timedelta(seconds=after)).replace(second=0, microsecond=0) + timedelta(minutes=1)


def test_a_schedule_window_brings_a_buffer_and_closing_it_lets_the_nodes_go(
    cluster: Cluster, start_joiner: Any
) -> None:
    opens = _next_minute(after=20)
    window = {"schedule": f"{opens.minute} {opens.hour} * * *", "duration": "1m", "buffer": {"nodes": 1}}
    cluster.apply([nodeclass(), _gpu_pool("office", {"schedules": [window]})])
    start_joiner()
    eventually(lambda: _buffer(cluster, "office") == {"wanted": 0, "ready": 0}, timeout=30, what="status.buffer 0/0")
    assert nodeclaims(cluster) == []
    time.sleep(max(0.0, (opens - datetime.now(UTC)).total_seconds() - 5))
    assert nodeclaims(cluster) == [], "nothing is bought before the window opens"

    [claim] = expect_nodeclaims_initialized(cluster, 1, timeout=90)
    assert datetime.now(UTC) >= opens
    eventually(lambda: _buffer(cluster, "office") == {"wanted": 1, "ready": 1}, timeout=30, what="buffer 1/1")

    closes = opens + timedelta(minutes=1)
    time.sleep(max(0.0, (closes - datetime.now(UTC)).total_seconds() - 5))
    assert _names(nodeclaims(cluster)) == {claim["metadata"]["name"]}, "the window keeps its node until it closes"
    eventually(lambda: nodeclaims(cluster) == [], timeout=90, interval=1.0, what="the warm node given back")
    assert datetime.now(UTC) >= closes
    assert _buffer(cluster, "office") == {"wanted": 0, "ready": 0}
