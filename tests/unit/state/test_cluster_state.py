"""The cluster cache's subscriptions."""

from __future__ import annotations

from typing import Any

import pytest

from controller.clock import FakeClock
from controller.scheduling.kubeconv import Unplannable
from controller.scheduling.kubeconv_volumes import VolumeNotReady
from controller.state.cluster import ClusterState
from tests.unit import builders


def _claim(name: str) -> dict[str, Any]:
    return {"apiVersion": "joiner.sh/v1", "kind": "NodeClaim", "metadata": {"name": name}}


def test_a_restarted_controller_subscribing_again_gets_each_event_once() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]

    class Controller:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def on_claim(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            self.seen.append(obj["metadata"]["name"])

    controller = Controller()
    cluster.subscribe("NodeClaim", controller.on_claim)
    cluster.subscribe("NodeClaim", controller.on_claim)  # run() called again after a crash
    cluster.informers["NodeClaim"]._apply("ADDED", _claim("gpu-abc12"))
    assert controller.seen == ["gpu-abc12"]


def _pod(name: str, *, version: str, cpu: str, node: str | None = None) -> dict[str, Any]:
    return builders.pod(
        name, namespace="ns", node=node, cpu=cpu, metadata={"uid": f"uid-{name}", "resourceVersion": version}
    )


def test_a_pod_is_converted_for_the_solver_once_per_resource_version() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    pods = cluster.informers["Pod"]
    pods._apply("ADDED", _pod("web", version="1", cpu="500m"))
    view = cluster.pod_view("ns/web")
    assert view is not None
    first = cluster.scheduling_pod(view)
    assert cluster.scheduling_pod(view) is first  # the same version: not converted again
    assert first.requests.get("cpu") == 500  # millicores

    pods._apply("MODIFIED", _pod("web", version="2", cpu="2"))  # a new version is read again
    view = cluster.pod_view("ns/web")
    assert view is not None
    second = cluster.scheduling_pod(view)
    assert second is not first
    assert second.requests.get("cpu") == 2000

    pods._apply("DELETED", _pod("web", version="3", cpu="2"))  # a deleted pod is forgotten
    assert "ns/web" not in cluster._pod_models


def test_a_pod_that_does_not_convert_raises_every_time_and_is_not_remembered() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    bad = _pod("bad", version="1", cpu="lots")
    cluster.informers["Pod"]._apply("ADDED", bad)
    view = cluster.pod_view("ns/bad")
    assert view is not None
    for _ in range(2):
        try:
            cluster.scheduling_pod(view)
        except ValueError:
            pass
        else:
            raise AssertionError("an unreadable pod converted")
    assert "ns/bad" not in cluster._pod_models


def _node(name: str, *, version: str, cpu: str, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return builders.node(
        name,
        labels={"kubernetes.io/hostname": name},
        allocatable={"cpu": cpu, "pods": "110"},
        taints=taints or (),
        metadata={"resourceVersion": version},
    )


def test_a_node_is_converted_for_the_solver_once_per_resource_version_with_its_pods_each_time() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    nodes = cluster.informers["Node"]
    startup = {"key": "example.com/warming", "effect": "NoSchedule"}
    nodes._apply("ADDED", _node("n1", version="1", cpu="4", taints=[startup]))
    view = cluster.node_views()["n1"]
    cluster.informers["Pod"]._apply("ADDED", _pod("web", version="5", cpu="1", node="n1"))
    pod_view = cluster.pod_view("ns/web")
    assert pod_view is not None
    web = cluster.scheduling_pod(pod_view)

    empty = cluster.scheduling_node(view)
    busy = cluster.scheduling_node(view, pods=[web])
    assert empty.pods == ()
    assert busy.pods == (web,)
    assert busy.allocatable is empty.allocatable  # the Node was read once
    assert [t.key for t in empty.taints] == ["example.com/warming"]
    # the same Node read with other taints left out (a NodeClaim's startup taints) is read again
    warming = cluster.scheduling_node(view, in_flight=True, ignore_taint_keys={"example.com/warming"})
    assert warming.taints == ()
    assert warming.in_flight

    nodes._apply("MODIFIED", _node("n1", version="2", cpu="8"))  # a new version is read again
    assert cluster.scheduling_node(cluster.node_views()["n1"]).allocatable.get("cpu") == 8000
    nodes._apply("DELETED", _node("n1", version="3", cpu="8"))
    assert "n1" not in cluster._node_models


def test_a_pod_with_a_claim_is_narrowed_by_its_volume_and_a_bound_one_keeps_its_room_whatever_its_volumes() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    pending = _pod("trainer", version="1", cpu="1")
    bound = _pod("reader", version="1", cpu="1", node="n1")
    for pod in (pending, bound):
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "dataset"}}]
        cluster.informers["Pod"]._apply("ADDED", pod)
    trainer, reader = cluster.pod_view("ns/trainer"), cluster.pod_view("ns/reader")
    assert trainer is not None
    assert reader is not None
    # the claims, volumes and StorageClasses not read yet (or not readable): the pending pod waits
    with pytest.raises(VolumeNotReady, match="has not read the cluster's PersistentVolumeClaims"):
        cluster.scheduling_pod(trainer)
    for kind in ("PersistentVolumeClaim", "PersistentVolume", "StorageClass"):
        cluster.informers[kind].synced.set()
    with pytest.raises(VolumeNotReady, match='PersistentVolumeClaim "dataset" not found'):
        cluster.scheduling_pod(trainer)
    assert cluster.scheduling_pod(reader).node_requirements == ()  # bound: its room counts as it is
    in_b = [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]
    cluster.informers["PersistentVolume"]._apply(
        "ADDED",
        {
            "metadata": {"name": "pv-1"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": in_b}]}}},
        },
    )
    cluster.informers["PersistentVolumeClaim"]._apply(
        "ADDED",
        {
            "metadata": {
                "name": "dataset",
                "namespace": "ns",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
            },
            "spec": {"volumeName": "pv-1"},
        },
    )
    for view in (trainer, reader):
        (term,) = cluster.scheduling_pod(view).node_requirements
        assert str(term) == "topology.kubernetes.io/zone In [zone-b]"


def test_a_pending_pod_that_claims_devices_through_dra_is_not_planned_but_a_bound_one_holds_its_room() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    for name, node in (("waiting", None), ("running", "n1")):
        pod = _pod(name, version="1", cpu="1", node=node)
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        cluster.informers["Pod"]._apply("ADDED", pod)
    waiting, running = cluster.pod_view("ns/waiting"), cluster.pod_view("ns/running")
    assert waiting is not None
    assert running is not None
    with pytest.raises(Unplannable, match="Dynamic Resource Allocation"):
        cluster.scheduling_pod(waiting)
    assert cluster.scheduling_pod(running).requests.get("cpu") == 1000
