"""Nominations: which pods nominated to a planned machine still fit there (`provisioning/nominations.py`)."""

from __future__ import annotations

from typing import Any

from api.v1.labels import ANNOTATION_PLANNED_INSTANCE_TYPE
from controller.clock import FakeClock
from controller.cloudprovider.catalog import load_catalog
from controller.provisioning.nominations import split_nominated
from controller.scheduling.model import ExistingNode, Pod
from controller.scheduling.resources import Resources
from controller.state.cluster import ClusterState
from controller.state.existing import cluster_machines
from controller.state.views import NodeClaimView


def _claim(name: str, instance_type: str) -> dict[str, Any]:
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {"joiner.sh/nodepool": "gpu"},
            "annotations": {ANNOTATION_PLANNED_INSTANCE_TYPE: instance_type},
        },
        "spec": {"requirements": [], "resources": {"requests": {"cpu": "1"}}},
    }


def test_a_claim_not_yet_in_the_cache_counts_once_however_often_it_is_passed() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    catalog = load_catalog()
    claim = _claim("gpu-abc12", "g6.xlarge")
    extra = [NodeClaimView.of(c) for c in (claim, dict(claim), _claim("gpu-def34", "g6.2xlarge"))]
    nodes = cluster_machines(cluster, catalog, extra_claims=extra)
    assert sorted(n.name for n in nodes) == ["gpu-abc12", "gpu-def34"]
    assert all(n.in_flight for n in nodes)
    g6 = next(it for it in catalog if it.name == "g6.xlarge")
    assert next(n for n in nodes if n.name == "gpu-abc12").allocatable == g6.allocatable


def test_a_claim_the_cache_shows_is_not_counted_again() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    claim = _claim("gpu-abc12", "g6.xlarge")
    cluster.informers["NodeClaim"]._apply("ADDED", claim)
    nodes = cluster_machines(cluster, load_catalog(), extra_claims=[NodeClaimView.of(claim)])
    assert [n.name for n in nodes] == ["gpu-abc12"]


def _pod(name: str, cpu: str) -> Pod:
    return Pod(name=name, namespace="ns", requests=Resources.parse({"cpu": cpu, "memory": "1Gi"}))


def test_nominated_pods_keep_their_place_while_they_fit() -> None:
    node = ExistingNode(name="cpu-a", allocatable=Resources.parse({"cpu": "4", "memory": "8Gi", "pods": "10"}))
    kept, released = split_nominated(node, [_pod("a", "2"), _pod("b", "2")])
    assert [p.name for p in kept] == ["a", "b"]
    assert released == []


def test_nominated_pods_are_released_when_others_took_their_room() -> None:
    # kube-scheduler bound a 3-cpu pod to the node the plan bought for two 2-cpu pods
    stranger = _pod("stranger", "3")
    node = ExistingNode(
        name="cpu-a",
        allocatable=Resources.parse({"cpu": "4", "memory": "8Gi", "pods": "10"}),
        pods=(stranger,),
    )
    kept, released = split_nominated(node, [_pod("a", "2"), _pod("b", "500m"), _pod("c", "1")])
    assert [p.name for p in kept] == ["b"]
    assert [p.name for p in released] == ["a", "c"]


def test_a_full_pod_count_releases_nominated_pods() -> None:
    node = ExistingNode(
        name="cpu-a",
        allocatable=Resources.parse({"cpu": "64", "memory": "64Gi", "pods": "2"}),
        pods=(_pod("x", "100m"),),
    )
    kept, released = split_nominated(node, [_pod("a", "100m"), _pod("b", "100m")])
    assert ([p.name for p in kept], [p.name for p in released]) == (["a"], ["b"])
