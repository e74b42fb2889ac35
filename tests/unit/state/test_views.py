"""Typed views of the cache's objects: made from the dicts the apiserver sends, missing fields included."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from controller.clock import FakeClock
from controller.state.cluster import ClusterState
from controller.state.views import (
    Condition,
    NodeClaimView,
    NodeView,
    PodView,
    StateNode,
    newer,
    pod_key,
)

Obj = dict[str, Any]
PID = "kwok://gpu-abc12"


def a_pod(name: str = "train-0", **over: Any) -> Obj:
    pod: Obj = {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": "u-1",
            "labels": {"app": "train"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "train-abc", "uid": "rs"}],
        },
        "spec": {"nodeName": "n-1", "containers": [{"name": "c"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        },
    }
    pod.update(over)
    return pod


def a_node(name: str = "n-1", *, pid: str | None = PID, ready: str = "True") -> Obj:
    return {
        "metadata": {"name": name, "uid": "node-uid", "resourceVersion": "7", "labels": {"joiner.sh/nodepool": "gpu"}},
        "spec": {"providerID": pid, "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]} if pid else {},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
            "capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
        },
    }


def a_claim(name: str = "gpu-abc12", *, pid: str | None = PID, initialized: bool = True) -> Obj:
    claim: Obj = {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "uid": "claim-uid",
            "resourceVersion": "12",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "joiner.sh/nodepool": "gpu",
                "joiner.sh/gang": "job-1",
                "node.kubernetes.io/instance-type": "gpu-1",
                "topology.kubernetes.io/zone": "zone-a",
                "joiner.sh/capacity-type": "spot",
            },
            "annotations": {"joiner.sh/planned-instance-type": "gpu-1"},
            "finalizers": ["joiner.sh/termination"],
        },
        "spec": {
            "nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu-1"]}],
            "resources": {"requests": {"nvidia.com/gpu": "1"}},
            "startupTaints": [{"key": "gpu.init", "effect": "NoSchedule"}],
            "expireAfter": "720h",
        },
        "status": {
            "conditions": [
                {
                    "type": "Launched",
                    "status": "True",
                    "reason": "Launched",
                    "lastTransitionTime": "2026-01-01T00:00:05Z",
                },
                {"type": "Registered", "status": "True", "reason": "Registered"},
                {"type": "Initialized", "status": "True" if initialized else "False", "reason": "X"},
            ]
        },
    }
    if pid:
        claim["status"]["providerID"] = pid
        claim["status"]["nodeName"] = "n-1"
    return claim


def test_a_pod_view_reads_what_the_controllers_need() -> None:
    pod = PodView.of(a_pod())
    assert (pod.key, pod.namespace, pod.name, pod.uid) == ("ml/train-0", "ml", "train-0", "u-1")
    assert pod.node_name == "n-1"
    assert pod.phase == "Running"
    assert pod.owner_kinds == ("ReplicaSet",)
    assert not pod.is_daemon
    assert not pod.is_terminal
    assert pod.bound_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert not pod.is_unschedulable
    assert not pod.awaits_scheduler
    assert not pod.deleting
    assert pod.key == pod_key(pod.raw)


def test_a_pod_view_reads_its_creation_time_node_selector_and_nomination() -> None:
    raw = a_pod(
        spec={"nodeSelector": {"joiner.sh/gang": "ml.g"}},
        status={"phase": "Pending", "nominatedNodeName": "n-2"},
    )
    raw["metadata"]["creationTimestamp"] = "2026-01-01T00:00:05Z"
    pod = PodView.of(raw)
    assert pod.created == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert pod.node_selector == {"joiner.sh/gang": "ml.g"}
    assert pod.nominated_node_name == "n-2"


def test_a_pod_with_nothing_but_a_name_has_empty_fields_not_errors() -> None:
    pod = PodView.of({"metadata": {"name": "bare"}})
    assert pod.key == "default/bare"
    assert pod.labels == {}
    assert pod.annotations == {}
    assert pod.node_name is None
    assert pod.phase is None
    assert pod.conditions == ()
    assert pod.scheduling_gates == ()
    assert pod.owner_kinds == ()
    assert pod.uid is None
    assert pod.node_selector == {}
    assert pod.nominated_node_name is None
    assert pod.created is None
    assert pod.awaits_scheduler  # never looked at by kube-scheduler
    assert not pod.is_unschedulable


def test_pod_scheduling_states() -> None:
    unschedulable = PodView.of(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        }
    )
    assert unschedulable.is_unschedulable
    assert not unschedulable.awaits_scheduler
    gated = PodView.of({"metadata": {"name": "g"}, "spec": {"schedulingGates": [{"name": "joiner.sh/gang"}]}})
    assert gated.scheduling_gates == ("joiner.sh/gang",)
    assert not gated.awaits_scheduler
    daemon = PodView.of({"metadata": {"name": "d", "ownerReferences": [{"kind": "DaemonSet"}]}})
    assert daemon.is_daemon
    done = PodView.of({"metadata": {"name": "x"}, "status": {"phase": "Succeeded"}})
    assert done.is_terminal
    assert not done.awaits_scheduler
    mirror = PodView.of(
        {
            "metadata": {
                "name": "m",
                "annotations": {"kubernetes.io/config.mirror": "x", "joiner.sh/do-not-disrupt": "true"},
            }
        }
    )
    assert mirror.is_mirror
    assert mirror.do_not_disrupt


def test_views_are_frozen() -> None:
    pod = PodView.of(a_pod())
    with pytest.raises(AttributeError):
        pod.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        pod.labels["x"] = "y"  # type: ignore[index]


def test_conditions_read_one_way() -> None:
    claim = NodeClaimView.of(a_claim(initialized=False))
    launched = claim.condition("Launched")
    assert launched == Condition(
        type="Launched", status="True", reason="Launched", last_transition_time="2026-01-01T00:00:05Z"
    )
    assert claim.is_true("Launched")
    assert claim.launched
    assert claim.registered
    assert not claim.initialized
    assert claim.condition("Drained") is None
    assert not claim.is_true("Drained")
    assert claim.transition_time("Launched") == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert claim.transition_time("Registered") is None  # no lastTransitionTime
    assert Condition.of({"type": "Ready"}).status == "Unknown"


def test_a_nodeclaim_view_resolves_its_offering_and_spec() -> None:
    claim = NodeClaimView.of(a_claim())
    assert (claim.name, claim.uid, claim.nodepool, claim.gang) == ("gpu-abc12", "claim-uid", "gpu", "job-1")
    assert (claim.instance_type, claim.zone, claim.capacity_type) == ("gpu-1", "zone-a", "spot")
    assert claim.planned_instance_type == "gpu-1"
    assert claim.node_class == "default"
    assert claim.provider_id == PID
    assert claim.node_name == "n-1"
    assert claim.requests == {"nvidia.com/gpu": "1"}
    assert [t.ident for t in claim.startup_taints] == [("gpu.init", "NoSchedule")]
    assert claim.taints == ()
    assert claim.has_finalizer()
    assert not claim.deleting
    assert claim.resource_version == "12"
    assert claim.created == datetime(2026, 1, 1, tzinfo=UTC)
    assert claim.expire_after == "720h"


def test_a_nodeclaim_just_created_has_no_status() -> None:
    claim = NodeClaimView.of({"metadata": {"name": "new"}, "spec": {}})
    assert claim.provider_id is None
    assert claim.node_name is None
    assert claim.conditions == ()
    assert claim.nodepool == ""
    assert claim.instance_type is None
    assert claim.allocatable == {}
    assert not claim.launched
    assert not claim.has_finalizer()


def test_a_node_view() -> None:
    node = NodeView.of(a_node())
    assert node.name == "n-1"
    assert node.provider_id == PID
    assert node.ready
    assert node.has_taint("nvidia.com/gpu")
    assert node.has_taint("nvidia.com/gpu", "NoSchedule")
    assert not node.has_taint("nvidia.com/gpu", "NoExecute")
    assert node.allocatable["nvidia.com/gpu"] == "1"
    assert not node.unschedulable
    assert not node.deleting
    bare = NodeView.of({"metadata": {"name": "n-2"}})
    assert bare.provider_id is None
    assert not bare.ready
    assert bare.taints == ()
    assert bare.finalizers == ()


def test_newer_by_resource_version() -> None:
    a = NodeClaimView.of({"metadata": {"name": "c", "resourceVersion": "9"}})
    b = NodeClaimView.of({"metadata": {"name": "c", "resourceVersion": "10"}})
    assert newer(a, b) is b
    assert newer(b, a) is b
    assert newer(None, a) is a
    assert newer(a, None) is a


def test_state_node_joins_or_stands_alone() -> None:
    node, claim = NodeView.of(a_node()), NodeClaimView.of(a_claim())
    both = StateNode(node=node, claim=claim)
    assert both.name == "n-1"
    assert both.provider_id == PID
    assert both.managed
    assert both.initialized
    assert both.nodepool == "gpu"
    assert both.labels["node.kubernetes.io/instance-type"] == "gpu-1"
    not_yet = StateNode(claim=NodeClaimView.of(a_claim(pid=None)))
    assert not_yet.name == "gpu-abc12"
    assert not_yet.provider_id is None
    assert not not_yet.registered
    unmanaged = StateNode(node=NodeView.of(a_node("n-9", pid=None)))
    assert not unmanaged.managed
    assert unmanaged.registered
    assert unmanaged.nodepool == "gpu"
    with pytest.raises(ValueError, match="needs a Node or a NodeClaim"):
        StateNode()


def _cluster() -> ClusterState:
    return ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]


def test_the_cache_joins_nodes_and_claims_by_provider_id() -> None:
    cluster = _cluster()
    cluster.informers["NodeClaim"]._apply("ADDED", a_claim())
    cluster.informers["NodeClaim"]._apply("ADDED", a_claim("cpu-zzz99", pid=None))
    # the claim is there before its Node
    (first, second) = cluster.state_nodes()
    assert first.claim is not None
    assert first.node is None
    assert second.node is None
    cluster.informers["Node"]._apply("ADDED", a_node("gpu-node"))
    cluster.informers["Node"]._apply("ADDED", a_node("other", pid="aws:///i-1"))
    machines = {m.name: m for m in cluster.state_nodes()}
    assert set(machines) == {"gpu-node", "cpu-zzz99", "other"}
    assert machines["gpu-node"].claim is not None
    assert machines["gpu-node"].claim.name == "gpu-abc12"
    assert not machines["other"].managed
    node = cluster.node_views()["gpu-node"]
    assert cluster.claim_view_for_node(node) is cluster.claim_views()["gpu-abc12"]
    assert cluster.node_view_for_claim(cluster.claim_views()["gpu-abc12"]) is node
    found = cluster.claim_view_for_node(NodeView.of(a_node("gpu-node")))
    assert found is not None
    assert found.raw == a_claim()  # the view keeps the dict the edge sends
    # the Node goes: the claim stands alone again
    cluster.informers["Node"]._apply("DELETED", a_node("gpu-node"))
    assert cluster.node_view_by_provider_id(PID) is None
    assert cluster.claim_view_for_node(NodeView.of(a_node("gpu-node"))) is not None
    cluster.informers["NodeClaim"]._apply("DELETED", a_claim())
    assert cluster.claim_view_for_node(NodeView.of(a_node("gpu-node"))) is None


def test_the_cache_indexes_pod_views_by_node_and_passes_views_to_listeners() -> None:
    cluster = _cluster()
    seen: list[tuple[str, str | None, str | None]] = []

    def on_pod(etype: str, pod: PodView, old: PodView | None) -> None:
        seen.append((etype, pod.node_name, old.node_name if old else None))

    cluster.subscribe_views("Pod", on_pod)
    unbound = a_pod(spec={})
    cluster.informers["Pod"]._apply("ADDED", unbound)
    cluster.informers["Pod"]._apply("MODIFIED", a_pod())
    assert [p.key for p in cluster.pod_views_on_node("n-1")] == ["ml/train-0"]
    assert [p.raw for p in cluster.pod_views_on_node("n-1")] == [a_pod()]
    cluster.informers["Pod"]._apply("DELETED", a_pod())
    assert cluster.pod_views_on_node("n-1") == []
    assert cluster.pod_view("ml/train-0") is None
    assert seen == [("ADDED", None, None), ("MODIFIED", "n-1", None), ("DELETED", "n-1", "n-1")]
    with pytest.raises(ValueError, match="no view for DaemonSet"):
        cluster.subscribe_views("DaemonSet", on_pod)


def test_the_pod_scheduling_rules_on_every_kind_of_pod() -> None:
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    # (pod, unschedulable, awaits the scheduler, terminal, daemon)
    cases: list[tuple[Obj, bool, bool, bool, bool]] = [
        (a_pod(), False, False, False, False),
        ({"metadata": {"name": "bare"}}, False, True, False, False),
        ({"metadata": {"name": "u"}, "status": {"conditions": [scheduled]}}, True, False, False, False),
        ({"metadata": {"name": "g"}, "spec": {"schedulingGates": [{"name": "x"}]}}, False, False, False, False),
        (
            {
                "metadata": {"name": "d", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"conditions": [scheduled]},
            },
            False,
            False,
            False,
            False,
        ),
        ({"metadata": {"name": "f"}, "status": {"phase": "Failed"}}, False, False, True, False),
        ({"metadata": {"name": "ds", "ownerReferences": [{"kind": "DaemonSet"}]}}, False, True, False, True),
    ]
    for raw, unschedulable, awaits, terminal, daemon in cases:
        view = PodView.of(raw)
        assert (view.is_unschedulable, view.awaits_scheduler, view.is_terminal, view.is_daemon) == (
            unschedulable,
            awaits,
            terminal,
            daemon,
        ), raw
    unschedulable_pod = PodView.of(cases[2][0])
    assert unschedulable_pod.condition("PodScheduled") == Condition(
        type="PodScheduled", status="False", reason="Unschedulable"
    )
    assert PodView.of(a_pod()).is_true("PodScheduled")
