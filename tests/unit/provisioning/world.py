"""The provisioner's tests' world: the in-memory apiserver with one NodeClass and a NodePool
"default" over it, and the pods and NodeClaims the tests read."""

from __future__ import annotations

from typing import Any

from api.v1.labels import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE
from controller.kube.resources import NODECLAIMS, NODEPOOLS, NODES, PODS
from controller.settings import Settings
from tests.unit.harness import Harness, make_harness

Obj = dict[str, Any]


async def default_world(settings: Settings | None = None) -> Harness:
    """A harness with a KWOKNodeClass and a NodePool ``default`` that uses it, both cached."""
    harness = await make_harness(settings)
    await harness.create_nodeclass()
    await harness.kube.create(
        NODEPOOLS,
        {
            "apiVersion": "joiner.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}}
                }
            },
        },
    )
    await harness.cached("NodePool", "default")
    return harness


def container(cpu: str) -> Obj:
    return {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}


async def pending(h: Harness, name: str, cpu: str) -> Obj:
    """A pod kube-scheduler could not place."""
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [container(cpu)]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    obj = await h.kube.create(PODS, pod)
    await h.cached("Pod", f"default/{name}")
    return obj


def claims(h: Harness) -> list[Obj]:
    return list(h.kube.objects(NODECLAIMS).values())


async def register(h: Harness, claim: Obj, *, taints: list[Obj] | None = None, ready: bool = True) -> None:
    """The claim's machine joined: a Node with the launched offering's labels (and ``taints``), Ready
    unless ``ready`` is False."""
    name = claim["metadata"]["name"]
    labels = {
        LABEL_NODEPOOL: "default",
        LABEL_INSTANCE_TYPE: "cpu-4",
        LABEL_ZONE: "zone-a",
        LABEL_CAPACITY_TYPE: "spot",
        "kubernetes.io/hostname": name,
    }
    await h.kube.create(
        NODES,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": f"kwok://{name}", **({"taints": taints} if taints else {})},
            "status": {
                "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "58"},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        },
    )
    await h.kube.patch(
        NODECLAIMS, name, {"status": {"providerID": f"kwok://{name}", "nodeName": name}}, subresource="status"
    )
    await h.cached("Node", name)
    await h.cached("NodeClaim", name)
