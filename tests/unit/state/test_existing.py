"""The one conversion from a Node and/or its NodeClaim to the solver's ExistingNode."""

from __future__ import annotations

from typing import Any

from controller.clock import FakeClock
from controller.scheduling.instancetypes import parse_catalog
from controller.scheduling.model import Pod
from controller.scheduling.resources import Resources
from controller.state.cluster import ClusterState
from controller.state.existing import cluster_machines, existing_node
from controller.state.views import NodeClaimView, NodeView, StateNode
from tests.unit.state.test_views import a_claim, a_node

Obj = dict[str, Any]
TYPES = parse_catalog(
    {
        "instanceTypes": [
            {
                "name": "gpu-1",
                "capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
                "labels": {"joiner.sh/gpu-name": "L4"},
                "offerings": [{"zone": "zone-a", "capacityType": "spot", "price": 0.3, "available": True}],
            }
        ]
    }
)


def test_a_registered_initialized_node_is_the_node() -> None:
    pod = Pod(name="p", requests=Resources.parse({"cpu": "1"}))
    node = existing_node(StateNode(node=NodeView.of(a_node()), claim=NodeClaimView.of(a_claim())), pods=[pod])
    assert node is not None
    assert node.name == "n-1"
    assert not node.in_flight
    assert node.pods == (pod,)
    assert node.node_pool == "gpu"
    assert [t.key for t in node.taints] == ["nvidia.com/gpu"]


def test_an_unmanaged_node_is_the_node() -> None:
    node = existing_node(StateNode(node=NodeView.of(a_node(pid=None))))
    assert node is not None
    assert not node.in_flight


def test_a_registered_node_not_initialized_is_in_flight_without_its_startup_taints() -> None:
    raw = a_node()
    raw["spec"]["taints"].append({"key": "gpu.init", "effect": "NoSchedule"})
    machine = StateNode(node=NodeView.of(raw), claim=NodeClaimView.of(a_claim(initialized=False)))
    node = existing_node(machine)
    assert node is not None
    assert node.in_flight
    assert [t.key for t in node.taints] == ["nvidia.com/gpu"]
    # the provisioner's view: like any registered Node, its startup taint still counts
    as_node = existing_node(machine, uninitialized_in_flight=False)
    assert as_node is not None
    assert not as_node.in_flight
    assert len(as_node.taints) == 2


def test_a_launched_claim_without_node_brings_its_instance_type() -> None:
    node = existing_node(StateNode(claim=NodeClaimView.of(a_claim(pid=None))), instance_types=TYPES)
    assert node is not None
    assert node.in_flight
    assert node.name == "gpu-abc12"
    assert node.allocatable == TYPES[0].allocatable
    assert node.labels["joiner.sh/gpu-name"] == "L4"


def test_a_claim_not_launched_yet_counts_the_planned_machine() -> None:
    raw = a_claim(pid=None)
    del raw["metadata"]["labels"]["node.kubernetes.io/instance-type"]
    raw["spec"]["requirements"] = []
    node = existing_node(StateNode(claim=NodeClaimView.of(raw)), instance_types=TYPES)
    assert node is not None
    assert node.allocatable == TYPES[0].allocatable
    del raw["metadata"]["annotations"]["joiner.sh/planned-instance-type"]
    assert existing_node(StateNode(claim=NodeClaimView.of(raw)), instance_types=TYPES) is None


def test_a_claim_with_recorded_allocatable_needs_no_catalog() -> None:
    raw = a_claim(pid=None)
    raw["status"]["allocatable"] = {"cpu": "2", "memory": "4Gi"}
    node = existing_node(StateNode(claim=NodeClaimView.of(raw)))
    assert node is not None
    assert node.allocatable.get("cpu") == 2000


def _world() -> ClusterState:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    registered = a_node("gpu-node")
    registered["spec"]["taints"].append({"key": "gpu.init", "effect": "NoSchedule"})
    cluster.informers["Node"]._apply("ADDED", registered)
    cluster.informers["Node"]._apply("ADDED", a_node("other", pid="aws:///i-1"))
    cluster.informers["NodeClaim"]._apply("ADDED", a_claim(initialized=False))  # registered to gpu-node
    cluster.informers["NodeClaim"]._apply("ADDED", a_claim("launching", pid=None))
    gone = a_claim("going", pid=None)
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    cluster.informers["NodeClaim"]._apply("ADDED", gone)
    for i, (node, phase) in enumerate([("gpu-node", "Running"), ("gpu-node", "Succeeded"), ("other", "Running")]):
        pod = {
            "metadata": {"name": f"p-{i}", "namespace": "ml"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": phase},
        }
        cluster.informers["Pod"]._apply("ADDED", pod)
    return cluster


def test_cluster_machines_counts_nodes_with_their_pods_then_claims_coming_up() -> None:
    cluster = _world()
    planned = a_claim("just-made", pid=None)
    nodes = cluster_machines(cluster, TYPES, extra_claims=[NodeClaimView.of(planned), NodeClaimView.of(a_claim())])
    assert [(n.name, n.in_flight, len(n.pods)) for n in nodes] == [
        ("gpu-node", False, 1),
        ("other", False, 1),
        ("launching", True, 0),
        ("just-made", True, 0),
    ]
    assert len(nodes[0].taints) == 2  # registered, not initialized: its startup taint still counts


def test_a_node_the_cloud_made_before_its_claims_launch_is_in_the_cache_is_counted_once() -> None:
    """kwok (and gcp, azure) name the machine after its NodeClaim; under load its Node's ADDED event
    can come before the NodeClaim's status with the providerID (1.4 s in a 3,000-pod race). Counted
    as both the Node and an in-flight NodeClaim, the second decision planned 184 pods into room the
    first had planned on that machine, and released them all once the launch was seen."""
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    cluster.informers["Node"]._apply("ADDED", a_node("race-8f4zj", pid="kwok://race-8f4zj"))
    cluster.informers["NodeClaim"]._apply("ADDED", a_claim("race-8f4zj", pid=None))  # launch not seen yet
    cluster.informers["NodeClaim"]._apply("ADDED", a_claim("race-other", pid=None))  # its Node not made yet
    just_made = NodeClaimView.of(a_claim("race-new", pid=None))
    cluster.informers["Node"]._apply("ADDED", a_node("race-new", pid="kwok://race-new"))
    nodes = cluster_machines(cluster, TYPES, extra_claims=[just_made])
    assert sorted((n.name, n.in_flight) for n in nodes) == [
        ("race-8f4zj", False),
        ("race-new", False),
        ("race-other", True),
    ]
    # a Node of that name owned by another NodeClaim (by providerID) is not this claim's machine
    cluster.informers["NodeClaim"]._apply("ADDED", a_claim("owner", pid="kwok://race-8f4zj"))
    assert sorted(n.name for n in cluster_machines(cluster, TYPES)) == [
        "race-8f4zj",
        "race-8f4zj",
        "race-new",
        "race-other",
    ]
