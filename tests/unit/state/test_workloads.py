"""How many pods a workload still has to make, and the cache's count of the ones it has."""

from __future__ import annotations

from typing import Any

import pytest

from controller.kube.resources import JOBS, PODS, REPLICASETS
from controller.state.views import ControllerRef
from controller.state.workloads import slim, wanted_pods
from tests.unit.harness import make_harness

Obj = dict[str, Any]


@pytest.mark.parametrize(
    ("kind", "obj", "wanted"),
    [
        ("ReplicaSet", {"spec": {"replicas": 1000}}, 1000),
        ("ReplicaSet", {"spec": {}}, 1),  # the API's default
        ("ReplicaSet", {"spec": {"replicas": 0}}, 0),
        ("StatefulSet", {"spec": {"replicas": 4}}, 4),
        ("Job", {"spec": {"parallelism": 8, "completions": 8}}, 8),
        ("Job", {"spec": {"parallelism": 8, "completions": 20}, "status": {"succeeded": 15}}, 5),
        ("Job", {"spec": {"parallelism": 8, "completions": 20}, "status": {"succeeded": 20}}, 0),
        ("Job", {"spec": {"parallelism": 3}}, 3),  # a work queue: parallelism pods
        ("Job", {"spec": {"parallelism": 3}, "status": {"succeeded": 1}}, 0),  # ... done once one succeeded
        ("Job", {"spec": {}}, 1),
        ("Job", {"spec": {"parallelism": 16, "completions": 16, "suspend": True}}, 0),  # Kueue holds it
        ("ReplicaSet", {"spec": {"replicas": "3"}}, None),  # not a count: cannot tell
        ("Deployment", {"spec": {"replicas": 3}}, None),  # its pods' owner is the ReplicaSet
    ],
)
def test_wanted_pods_as_each_workload_controller_counts_them(kind: str, obj: Obj, wanted: int | None) -> None:
    assert wanted_pods(kind, obj) == wanted


def test_the_cache_keeps_a_workloads_counts_and_not_its_pod_template() -> None:
    rs: Obj = {
        "metadata": {"name": "web-1", "namespace": "ns", "uid": "u1", "generation": 2},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": []}}},
        "status": {"replicas": 2, "readyReplicas": 1, "succeeded": 0},
    }
    assert slim(rs) == {
        "metadata": {"name": "web-1", "namespace": "ns", "uid": "u1", "generation": 2},
        "spec": {"replicas": 3},
        "status": {"succeeded": 0},
    }


def _pod(name: str, owner: ControllerRef, **status: Any) -> Obj:
    return {
        "metadata": {
            "name": name,
            "namespace": owner.namespace,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": owner.kind, "name": owner.name, "uid": owner.uid, "controller": True}
            ],
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Pending", **status},
    }


async def test_a_workload_is_complete_once_the_cache_holds_all_its_active_pods() -> None:
    h = await make_harness()
    try:
        await h.kube.create(
            REPLICASETS,
            {"metadata": {"name": "web-1", "namespace": "default"}, "spec": {"replicas": 2, "template": {}}},
        )
        await h.cached("ReplicaSet", "default/web-1")
        uid = h.cluster.store("ReplicaSet")["default/web-1"]["metadata"]["uid"]
        owner = ControllerRef("ReplicaSet", "default", "web-1", uid)
        assert h.cluster.workload_complete(owner) is False
        await h.kube.create(PODS, _pod("web-1-a", owner))
        await h.cached("Pod", "default/web-1-a")
        assert h.cluster.workload_complete(owner) is False
        # a finished pod is not counted: the ReplicaSet controller replaces it
        await h.kube.create(PODS, _pod("web-1-b", owner, phase="Failed"))
        await h.cached("Pod", "default/web-1-b")
        assert h.cluster.workload_complete(owner) is False
        await h.kube.create(PODS, _pod("web-1-c", owner))
        await h.cached("Pod", "default/web-1-c")
        assert h.cluster.workload_complete(owner) is True
        await h.kube.delete(PODS, "web-1-c", namespace="default")
        await h.cached("Pod", "default/web-1-c")
        assert h.cluster.workload_complete(owner) is False
        # another object of the same name (deleted and made again), a kind not watched: cannot tell
        assert h.cluster.workload_complete(owner._replace(uid="other")) is None
        assert h.cluster.workload_complete(owner._replace(kind="PyTorchJob")) is None
        assert h.cluster.workload_complete(owner._replace(kind="Job")) is None  # no such Job
    finally:
        await h.close()


async def test_a_workload_informer_that_cannot_list_holds_up_nothing() -> None:
    """An install whose ClusterRole predates the workload kinds: the cache syncs without them."""
    h = await make_harness()
    try:
        assert h.cluster.synced
        h.cluster.informers["Job"].synced.clear()  # as if its list were forbidden
        assert h.cluster.synced
        await h.cluster.wait_synced()
        await h.kube.create(
            JOBS, {"metadata": {"name": "train", "namespace": "default"}, "spec": {"parallelism": 2, "template": {}}}
        )
        await h.cached("Job", "default/train")
        uid = h.cluster.store("Job")["default/train"]["metadata"]["uid"]
        assert h.cluster.workload_complete(ControllerRef("Job", "default", "train", uid)) is None
    finally:
        await h.close()
