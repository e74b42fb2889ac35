"""The gauges read from the cluster cache at scrape time: NodePool usage vs limit, nodes and $/h by
NodePool and capacity type, per-node allocatable and pod requests."""

from __future__ import annotations

from prometheus_client.core import Metric

from controller.state.cluster import ClusterState
from controller.state.metrics import ClusterCollector
from tests.unit.builders import nodepool
from tests.unit.metrics.world import feed, new_cluster, node, nodeclaim, pod

GPU_NODE = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}


def scrape(cluster: ClusterState) -> dict[str, dict[tuple[str, ...], float]]:
    collector = ClusterCollector()
    collector.cluster = cluster
    out: dict[str, dict[tuple[str, ...], float]] = {}
    metric: Metric
    for metric in collector.collect():
        out[metric.name] = {tuple(s.labels.values()): s.value for s in metric.samples}
    return out


def a_gpu_pool() -> ClusterState:
    cluster = new_cluster()
    feed(cluster, nodepool("gpu", limits={"nvidia.com/gpu": "4", "cpu": "100"}), nodepool("cpu"))
    feed(
        cluster,
        nodeclaim("gpu-a", pool="gpu", tier="spot", capacity=GPU_NODE, price="0.35"),
        nodeclaim("gpu-b", pool="gpu", tier="on-demand", capacity=GPU_NODE, price="0.80"),
        nodeclaim("gpu-c", pool="gpu", tier="on-demand", capacity=GPU_NODE, price="0.80", launched=False),
        nodeclaim("gpu-d", pool="gpu", tier="spot", capacity=GPU_NODE, price="0.35", deleting=True),
    )
    feed(cluster, node("gpu-a", pool="gpu", tier="spot"), node("gpu-b", pool="gpu"), node("static", pool=None))
    return cluster


def test_nodepool_usage_against_its_limits() -> None:
    got = scrape(a_gpu_pool())
    # three live claims (the deleting one is left out); the limits only for what the pool limits
    assert got["joiner_nodepools_usage"][("gpu", "nvidia.com/gpu")] == 3
    assert got["joiner_nodepools_usage"][("gpu", "cpu")] == 24
    assert got["joiner_nodepools_usage"][("gpu", "memory")] == 3 * 32 * 2**30
    assert got["joiner_nodepools_limit"] == {("gpu", "cpu"): 100, ("gpu", "nvidia.com/gpu"): 4}
    assert ("cpu", "cpu") not in got["joiner_nodepools_usage"]  # a pool that holds nothing and limits nothing


def test_a_limited_resource_the_pool_does_not_hold_reads_zero() -> None:
    cluster = new_cluster()
    feed(cluster, nodepool("gpu", limits={"nvidia.com/gpu": "8"}))
    got = scrape(cluster)
    assert got["joiner_nodepools_usage"] == {("gpu", "nvidia.com/gpu"): 0}
    assert got["joiner_nodepools_limit"] == {("gpu", "nvidia.com/gpu"): 8}


def test_nodes_and_dollars_per_hour_by_pool_and_capacity_type() -> None:
    got = scrape(a_gpu_pool())
    # nodes: registered claims only (gpu-c has no Node yet); $/h: launched claims only
    assert got["joiner_nodes"] == {("gpu", "spot"): 1, ("gpu", "on-demand"): 1}
    assert got["joiner_nodes_price_per_hour"] == {("gpu", "spot"): 0.35, ("gpu", "on-demand"): 0.80}


def test_per_node_allocatable_and_requests_skip_nodes_joiner_did_not_launch() -> None:
    cluster = a_gpu_pool()
    feed(
        cluster,
        pod("train", cpu="3", gpus=1, node_name="gpu-a", phase="Running"),
        pod("done", cpu="2", node_name="gpu-a", phase="Succeeded"),
        pod("agent", cpu="250m", node_name="gpu-a", phase="Running", daemon=True),
        pod("elsewhere", cpu="1", node_name="static", phase="Running"),
    )
    got = scrape(cluster)
    ident = ("gpu-a", "gpu", "spot", "gpu-1", "zone-a")
    assert got["joiner_nodes_allocatable"][(*ident, "cpu")] == 7
    assert got["joiner_nodes_allocatable"][(*ident, "nvidia.com/gpu")] == 1
    assert got["joiner_nodes_total_pod_requests"][(*ident, "cpu")] == 3  # the finished pod and the daemon out
    assert got["joiner_nodes_total_pod_requests"][(*ident, "nvidia.com/gpu")] == 1
    assert got["joiner_nodes_total_daemon_requests"] == {(*ident, "cpu"): 0.25}
    idle = ("gpu-b", "gpu", "on-demand", "gpu-1", "zone-a")
    assert got["joiner_nodes_total_pod_requests"][(*idle, "cpu")] == 0
    assert not any(labels[0] == "static" for labels in got["joiner_nodes_allocatable"])


def test_a_node_that_is_gone_leaves_no_series() -> None:
    cluster = a_gpu_pool()
    feed(cluster, node("gpu-b", pool="gpu"), etype="DELETED")
    got = scrape(cluster)
    assert {labels[0] for labels in got["joiner_nodes_allocatable"]} == {"gpu-a"}
    assert got["joiner_nodes"] == {("gpu", "spot"): 1}


def test_bad_input_is_skipped_not_raised() -> None:
    cluster = new_cluster()
    feed(cluster, nodepool("gpu", limits={"nvidia.com/gpu": "lots"}))
    feed(cluster, nodeclaim("gpu-a", pool="gpu", tier="spot", capacity={"cpu": "eight"}, price="cheap"))
    got = scrape(cluster)
    assert got["joiner_nodepools_limit"] == {}
    assert got["joiner_nodes_price_per_hour"] == {("gpu", "spot"): 0.0}


def test_without_a_cache_nothing_is_served() -> None:
    assert list(ClusterCollector().collect()) == []


def test_a_pod_whose_requests_changed_is_counted_anew_and_a_gone_pod_is_forgotten() -> None:
    cluster = a_gpu_pool()
    collector = ClusterCollector()
    collector.cluster = cluster

    def cpu_requested() -> float:
        for metric in collector.collect():
            if metric.name == "joiner_nodes_total_pod_requests":
                return sum(
                    s.value
                    for s in metric.samples
                    if s.labels["node_name"] == "gpu-a" and s.labels["resource_type"] == "cpu"
                )
        raise AssertionError("no joiner_nodes_total_pod_requests")

    feed(cluster, pod("train", cpu="3", node_name="gpu-a", phase="Running"))
    assert cpu_requested() == 3
    feed(cluster, pod("train", cpu="5", node_name="gpu-a", phase="Running"), etype="MODIFIED")  # resized in place
    assert cpu_requested() == 5
    feed(cluster, pod("train", cpu="5", node_name="gpu-a", phase="Running"), etype="DELETED")
    assert cpu_requested() == 0
    assert collector._requests == {}


def test_the_oldest_nodeclaim_not_ready_by_pool() -> None:
    from datetime import timedelta

    from controller.clock import FakeClock, format_time

    clock = FakeClock()
    cluster = new_cluster(clock)
    feed(cluster, nodepool("gpu"), nodepool("cpu"))
    old = nodeclaim("gpu-old", pool="gpu", tier="spot", capacity=GPU_NODE)
    old["metadata"]["creationTimestamp"] = format_time(clock.now() - timedelta(minutes=20))
    ready = nodeclaim("gpu-ready", pool="gpu", tier="spot", capacity=GPU_NODE)
    ready["metadata"]["creationTimestamp"] = format_time(clock.now() - timedelta(hours=3))
    ready["status"]["conditions"].append({"type": "Ready", "status": "True"})
    young = nodeclaim("gpu-young", pool="gpu", tier="spot", capacity=GPU_NODE)
    young["metadata"]["creationTimestamp"] = format_time(clock.now() - timedelta(minutes=2))
    feed(cluster, old, ready, young)
    got = scrape(cluster)["joiner_nodeclaims_not_ready_oldest_age_seconds"]
    assert got == {("gpu",): 1200.0, ("cpu",): 0.0}  # the Ready one does not count; a pool with none reads 0
