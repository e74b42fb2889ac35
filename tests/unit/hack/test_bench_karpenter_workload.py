"""Karpenter's benchmark workload as joiner inputs (hack/bench/karpenter_workload.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from controller.plan import build_inputs
from controller.scenario import load_scenario, read_documents
from controller.scheduling import Resources
from hack.bench.karpenter_workload import karpenter_catalog, karpenter_pods, write_scenario


def test_the_400_fake_instance_types() -> None:
    catalog = karpenter_catalog()
    assert len(catalog) == 400
    first, last = catalog[0], catalog[-1]
    assert first.capacity == Resources.parse({"cpu": "1", "memory": "2Gi", "pods": "10"})
    assert last.capacity == Resources.parse({"cpu": "400", "memory": "800Gi", "pods": "4000"})
    assert first.allocatable == Resources.parse({"cpu": "900m", "memory": "2038Mi", "pods": "10"})
    assert [(o.zone, o.capacity_type) for o in first.offerings] == [
        ("test-zone-1", "spot"),
        ("test-zone-2", "spot"),
        ("test-zone-1", "on-demand"),
        ("test-zone-2", "on-demand"),
        ("test-zone-3", "on-demand"),
    ]
    assert abs(first.offerings[0].price - (0.1 + 0.1 * 2 * 2**30 / 1e9)) < 1e-6
    assert first.labels["size"] == "small"
    assert "special" not in first.labels
    assert catalog[4].labels["size"] == "large"  # 5 CPUs, 10Gi
    assert catalog[4].labels["special"] == "optional"


def test_the_pod_mix() -> None:
    pods = karpenter_pods(1003)
    kinds = Counter(p.name.rsplit("-", 1)[0] for p in pods)
    assert kinds == {
        "generic": 203,
        "zone-spread": 200,
        "hostname-spread": 200,
        "zone-affinity": 200,
        "hostname-anti-affinity": 200,
    }
    assert len({p.scheduling_key() for p in pods}) > 500  # diverse, not replicas
    zone = [p for p in pods if p.name.startswith("zone-spread")]
    assert all(s.max_skew == 1 and s.topology_key == "topology.kubernetes.io/zone" for p in zone for s in p.spread)
    anti = [p for p in pods if p.name.startswith("hostname-anti")]
    assert all(len(p.anti_affinity) == 1 for p in anti)
    assert all(p.affinity for p in pods if p.name.startswith("zone-affinity"))


def test_the_scenario_file_reads_back_as_the_same_pods(tmp_path: Path) -> None:
    scenario, catalog_file = write_scenario(tmp_path, 20)
    inputs = build_inputs(load_scenario(read_documents([(str(scenario), scenario.read_text())])), karpenter_catalog())
    assert [p.scheduling_key() for p in inputs.pods] == [p.scheduling_key() for p in karpenter_pods(20)]
    assert [p.name for p in inputs.pools] == ["default"]
    assert catalog_file.exists()
