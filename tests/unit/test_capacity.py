"""What the provisioner and the gang controller count as capacity coming up."""

from __future__ import annotations

from typing import Any

from controller.clock import FakeClock
from controller.cloudprovider.catalog import load_catalog
from controller.provisioning.capacity import existing_capacity
from controller.provisioning.nodeclaims import PLANNED_INSTANCE_TYPE
from controller.state.cluster import ClusterState


def _claim(name: str, instance_type: str) -> dict[str, Any]:
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {"joiner.sh/nodepool": "gpu"},
            "annotations": {PLANNED_INSTANCE_TYPE: instance_type},
        },
        "spec": {"requirements": [], "resources": {"requests": {"cpu": "1"}}},
    }


def test_a_claim_not_yet_in_the_cache_counts_once_however_often_it_is_passed() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    catalog = load_catalog()
    claim = _claim("gpu-abc12", "g6.xlarge")
    nodes = existing_capacity(cluster, catalog, extra_claims=[claim, dict(claim), _claim("gpu-def34", "g6.2xlarge")])
    assert sorted(n.name for n in nodes) == ["gpu-abc12", "gpu-def34"]
    assert all(n.in_flight for n in nodes)
    g6 = next(it for it in catalog if it.name == "g6.xlarge")
    assert next(n for n in nodes if n.name == "gpu-abc12").allocatable == g6.allocatable


def test_a_claim_the_cache_shows_is_not_counted_again() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    claim = _claim("gpu-abc12", "g6.xlarge")
    cluster.store("NodeClaim")["gpu-abc12"] = claim
    nodes = existing_capacity(cluster, load_catalog(), extra_claims=[claim])
    assert [n.name for n in nodes] == ["gpu-abc12"]
