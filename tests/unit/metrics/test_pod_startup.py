"""Pod startup latency by NodePool: from creation to Running, for pods that waited for joiner."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from controller.clock import FakeClock, format_time
from controller.metrics import REGISTRY
from controller.provisioning.startup import PodStartupTracker
from tests.unit.metrics.world import feed, new_cluster, node, pod

START = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
CREATED = format_time(START)


def observed(pool: str) -> tuple[float, float]:
    """(count, sum) of the histogram for the pool."""
    count = REGISTRY.get_sample_value("joiner_pods_startup_duration_seconds_count", {"nodepool": pool}) or 0.0
    total = REGISTRY.get_sample_value("joiner_pods_startup_duration_seconds_sum", {"nodepool": pool}) or 0.0
    return count, total


async def test_a_pod_that_waited_is_observed_once_when_running() -> None:
    clock = FakeClock(START)
    cluster = new_cluster(clock)
    tracker = PodStartupTracker(cluster=cluster, clock=clock)
    cluster.subscribe_views("Pod", tracker.on_pod)
    before = observed("startup-a")
    feed(cluster, node("n1", pool="startup-a"))
    feed(cluster, pod("p", created=CREATED, unschedulable=True))
    await clock.advance(40)
    feed(cluster, pod("p", created=CREATED, node_name="n1", phase="Pending"), etype="MODIFIED")
    await clock.advance(5)
    feed(cluster, pod("p", created=CREATED, node_name="n1", phase="Running"), etype="MODIFIED")
    feed(cluster, pod("p", created=CREATED, node_name="n1", phase="Running"), etype="MODIFIED")  # a resync
    count, total = observed("startup-a")
    assert (count - before[0], total - before[1]) == (1, 45)
    bucket = REGISTRY.get_sample_value(
        "joiner_pods_startup_duration_seconds_bucket", {"nodepool": "startup-a", "le": "45.0"}
    )
    assert bucket is not None
    assert bucket >= 1


async def test_gang_gated_pods_count_and_pods_that_never_waited_do_not() -> None:
    clock = FakeClock(START)
    cluster = new_cluster(clock)
    tracker = PodStartupTracker(cluster=cluster, clock=clock)
    cluster.subscribe_views("Pod", tracker.on_pod)
    before = observed("startup-b")
    feed(cluster, node("n2", pool="startup-b"), node("static", pool=None))
    feed(cluster, pod("gang-0", created=CREATED, gated=True), pod("quick", created=CREATED))
    feed(cluster, pod("static-pod", created=CREATED, unschedulable=True))
    await clock.advance(90)
    feed(cluster, pod("gang-0", created=CREATED, node_name="n2", phase="Running"), etype="MODIFIED")
    feed(cluster, pod("quick", created=CREATED, node_name="n2", phase="Running"), etype="MODIFIED")
    feed(cluster, pod("static-pod", created=CREATED, node_name="static", phase="Running"), etype="MODIFIED")
    count, total = observed("startup-b")
    assert (count - before[0], total - before[1]) == (1, 90)
    assert tracker.waiting == {}


async def test_a_deleted_pending_pod_is_forgotten() -> None:
    clock = FakeClock(START)
    cluster = new_cluster(clock)
    tracker = PodStartupTracker(cluster=cluster, clock=clock)
    cluster.subscribe_views("Pod", tracker.on_pod)
    feed(cluster, pod("gone", created=CREATED, unschedulable=True))
    assert set(tracker.waiting) == {"ns/gone"}
    feed(cluster, pod("gone", created=CREATED, unschedulable=True), etype="DELETED")
    assert tracker.waiting == {}


async def test_pods_already_waiting_at_start_are_tracked() -> None:
    clock = FakeClock(START)
    cluster = new_cluster(clock)
    feed(cluster, node("n3", pool="startup-c"), pod("early", created=CREATED, unschedulable=True))
    tracker = PodStartupTracker(cluster=cluster, clock=clock)
    before = observed("startup-c")
    task = asyncio.create_task(tracker.run())
    await asyncio.sleep(0)
    await clock.advance(12)
    feed(cluster, pod("early", created=CREATED, node_name="n3", phase="Running"), etype="MODIFIED")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    count, total = observed("startup-c")
    assert (count - before[0], total - before[1]) == (1, 12)


async def test_waiting_pods_and_the_oldest_age_are_served() -> None:
    clock = FakeClock(START)
    cluster = new_cluster(clock)
    feed(cluster, pod("first", created=CREATED, unschedulable=True))
    tracker = PodStartupTracker(cluster=cluster, clock=clock)
    task = asyncio.create_task(tracker.run())
    await asyncio.sleep(0)
    await clock.advance(30)
    feed(cluster, pod("second", created=format_time(clock.now()), gated=True))
    await clock.advance(10)
    assert REGISTRY.get_sample_value("joiner_pods_waiting") == 2
    assert REGISTRY.get_sample_value("joiner_pods_waiting_oldest_age_seconds") == 40
    feed(cluster, pod("first", created=CREATED), etype="DELETED")
    assert REGISTRY.get_sample_value("joiner_pods_waiting_oldest_age_seconds") == 10
    feed(cluster, pod("second", created=CREATED), etype="DELETED")
    assert REGISTRY.get_sample_value("joiner_pods_waiting") == 0
    assert REGISTRY.get_sample_value("joiner_pods_waiting_oldest_age_seconds") == 0
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_a_pools_histogram_is_served_from_its_creation_to_its_deletion() -> None:
    clock = FakeClock(START)
    cluster = new_cluster(clock)
    tracker = PodStartupTracker(cluster=cluster, clock=clock)
    cluster.subscribe("NodePool", tracker.on_pool)
    pool = {"apiVersion": "joiner.sh/v1", "kind": "NodePool", "metadata": {"name": "startup-d"}, "spec": {}}
    feed(cluster, pool)
    assert observed("startup-d") == (0, 0)
    assert REGISTRY.get_sample_value("joiner_pods_startup_duration_seconds_count", {"nodepool": "startup-d"}) == 0
    feed(cluster, pool, etype="DELETED")
    assert REGISTRY.get_sample_value("joiner_pods_startup_duration_seconds_count", {"nodepool": "startup-d"}) is None
