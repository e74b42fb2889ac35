"""The controller-level world for disruption tests: the in-memory apiserver and cache of the
NodeClaim tests (``tests.unit.harness``), plus verbs for NodePools, managed nodes and pods."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from api.v1.labels import ANNOTATION_NODEPOOL_HASH as NODEPOOL_HASH
from api.v1.labels import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE
from controller.clock import format_time
from controller.disruption.controller import DisruptionController
from controller.kube.resources import NODECLAIMS, NODEPOOLS, NODES, PDBS
from controller.settings import Settings
from controller.state.nodepools import nodepool_hash
from tests.unit import builders
from tests.unit.harness import Harness, make_harness

Obj = dict[str, Any]
SETTINGS = Settings(disruption_poll_interval_seconds=1.0, disruption_validation_delay_seconds=5.0)
OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-uid", "controller": True}]
CAPACITY = {
    "cpu-4": {"cpu": "3900m", "memory": "15Gi", "pods": "58"},
    "gpu-1": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1", "pods": "110"},
    "gpu-8": {"cpu": "96", "memory": "768Gi", "nvidia.com/gpu": "8", "pods": "110"},
}


class World:
    def __init__(self, h: Harness) -> None:
        self.h = h
        self.kube = h.kube
        self.clock = h.clock
        self.controller = DisruptionController(h.ctx, offload=False)

    async def nodepool(self, name: str = "default", **disruption: Any) -> Obj:
        obj = await self.kube.create(
            NODEPOOLS,
            builders.nodepool(
                name,
                template={"expireAfter": "720h"},
                disruption={"consolidateAfter": "30s", "budgets": [{"nodes": "100%"}], **disruption},
            ),
        )
        await self.h.cached("NodePool", name)
        return obj

    async def node(
        self,
        name: str,
        *,
        pool: str = "default",
        instance_type: str = "cpu-4",
        zone: str = "zone-a",
        capacity_type: str = "on-demand",
        initialized_ago: float = 3600,
        annotations: dict[str, str] | None = None,
        expire_after: str = "720h",
    ) -> Obj:
        """A NodeClaim with its registered, Ready, Initialized Node, as the lifecycle leaves them."""
        pool_obj = self.kube.obj(NODEPOOLS, pool)
        assert pool_obj is not None
        labels = {
            LABEL_NODEPOOL: pool,
            LABEL_INSTANCE_TYPE: instance_type,
            LABEL_ZONE: zone,
            LABEL_CAPACITY_TYPE: capacity_type,
        }
        claim = await self.kube.create(
            NODECLAIMS,
            {
                "apiVersion": "joiner.sh/v1",
                "kind": "NodeClaim",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "annotations": {NODEPOOL_HASH: nodepool_hash(pool_obj), **(annotations or {})},
                },
                "spec": {
                    "nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"},
                    "requirements": [{"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": [instance_type]}],
                    "expireAfter": expire_after,
                },
            },
        )
        await self.make_node(claim, instance_type=instance_type, labels=labels, initialized_ago=initialized_ago)
        return claim

    async def make_node(
        self, claim: Obj, *, instance_type: str, labels: dict[str, str], initialized_ago: float = 0
    ) -> None:
        """What launch, registration and initialization leave behind for ``claim``."""
        name = claim["metadata"]["name"]
        provider_id = f"kwok://{name}"
        then = format_time(self.clock.now() - timedelta(seconds=initialized_ago))
        node = builders.node(
            name,
            provider_id=provider_id,
            labels={**labels, "kubernetes.io/hostname": name},
            allocatable=CAPACITY[instance_type],
            ready_since=then,
        )
        await self.kube.create(NODES, node)
        conditions = [
            {"type": t, "status": "True", "reason": t, "lastTransitionTime": then}
            for t in ("Launched", "Registered", "Initialized", "Ready")
        ]
        await self.kube.patch(
            NODECLAIMS,
            name,
            {"status": {"providerID": provider_id, "nodeName": name, "conditions": conditions}},
            subresource="status",
        )
        await self.h.cached("NodeClaim", name)
        await self.h.cached("Node", name)

    async def pod(self, name: str, node: str, *, cpu: str = "500m", owned: bool = True, **meta: Any) -> Obj:
        then = format_time(self.clock.now() - timedelta(hours=1))
        metadata: Obj = {"labels": {"app": name.rsplit("-", 1)[0]}, **meta}
        if owned:
            metadata["ownerReferences"] = OWNER
        pod = await self.h.bind_pod(
            name,
            node,
            metadata=metadata,
            spec={"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]},
            status={"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": then}]},
        )
        await self.h.cached("Pod", f"default/{name}")
        return pod

    async def pdb(self, name: str, *, app: str, allowed: int) -> Obj:
        obj = await self.kube.create(
            PDBS,
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": "default", "generation": 1},
                "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": 1},
                "status": {"disruptionsAllowed": allowed, "observedGeneration": 1},
            },
        )
        await self.h.cached("PodDisruptionBudget", f"default/{name}")
        return obj

    def claim(self, name: str) -> Obj | None:
        return self.kube.obj(NODECLAIMS, name)

    def claims(self) -> dict[str, Obj]:
        return self.kube.objects(NODECLAIMS)

    def condition(self, name: str, ctype: str) -> Obj | None:
        return self.h.condition(name, ctype)

    async def settle(self) -> None:
        await self.h.settle(200)

    async def advance(self, seconds: float) -> None:
        await self.h.advance(seconds)
        await self.settle()


@pytest.fixture
async def world() -> AsyncIterator[World]:
    h = await make_harness(SETTINGS)
    await h.create_nodeclass()
    w = World(h)
    try:
        yield w
    finally:
        for task in list(w.controller.running):
            task.cancel()
        await h.close()
