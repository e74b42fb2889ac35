"""A small world for controller tests: the in-memory apiserver, the real cluster cache on top of
it, the real kwok provider with a tiny catalog, a fake clock, and helpers that read as verbs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest

from api.v1.labels import LABEL_INSTANCE_TYPE, LABEL_NODEPOOL
from controller.clock import FakeClock, format_time
from controller.cloudprovider.kwok.provider import KWOKCloudProvider
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.context import Context
from controller.kube.events import EventRecorder
from controller.kube.resources import KWOKNODECLASSES, NODECLAIMS, NODES, PODS, Resource
from controller.operator.app import build_kwok_provider
from controller.scheduling.instancetypes import parse_catalog
from controller.settings import Settings
from controller.state.cluster import WATCHED, ClusterState
from controller.state.writer import NodeClaimWriter
from tests.unit import builders
from tests.unit.fakeapi import FakeKube

Obj = dict[str, Any]

CATALOG: Obj = {
    "instanceTypes": [
        {
            "name": "cpu-4",
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
            "overhead": {"cpu": "100m", "memory": "1Gi"},
            "labels": {"kubernetes.io/arch": "amd64"},
            "offerings": [
                {"zone": "zone-a", "capacityType": "on-demand", "price": 0.20, "available": True},
                {"zone": "zone-b", "capacityType": "on-demand", "price": 0.22, "available": True},
                {"zone": "zone-a", "capacityType": "spot", "price": 0.08, "available": True},
            ],
        },
        {
            "name": "gpu-1",
            "capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
            "labels": {"joiner.sh/gpu-name": "L4", "joiner.sh/gpu-count": "1", "joiner.sh/gpu-manufacturer": "nvidia"},
            "offerings": [
                {"zone": "zone-a", "capacityType": "on-demand", "price": 0.80, "available": True},
                {"zone": "zone-a", "capacityType": "spot", "price": 0.30, "available": False},
                {"zone": "zone-b", "capacityType": "spot", "price": 0.35, "available": True},
            ],
        },
        {
            "name": "gpu-8",
            "capacity": {"cpu": "96", "memory": "768Gi", "nvidia.com/gpu": "8"},
            "labels": {"joiner.sh/gpu-name": "H100", "joiner.sh/gpu-count": "8"},
            "offerings": [{"zone": "zone-a", "capacityType": "on-demand", "price": 98.0, "available": True}],
        },
    ]
}


def kwok_provider(
    *, kube: FakeKube, cluster: ClusterState, clock: FakeClock, unavailable: UnavailableOfferings | None = None
) -> KWOKCloudProvider:
    """The real kwok provider over the tiny catalog, with its Node-making loop, wired as the operator does."""
    return build_kwok_provider(
        client=kube, cluster=cluster, clock=clock, catalog=parse_catalog(CATALOG), unavailable=unavailable
    )


class Runnable(Protocol):
    async def run(self) -> None: ...


@dataclass
class Harness:
    clock: FakeClock
    kube: FakeKube
    cluster: ClusterState
    cloud: KWOKCloudProvider
    ctx: Context
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    # --- running -----------------------------------------------------------------------------

    def start(self, *runnables: Runnable) -> None:
        for r in runnables:
            self.tasks.append(asyncio.create_task(r.run(), name=type(r).__name__))

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self.tasks.clear()

    async def settle(self, rounds: int = 50) -> None:
        for _ in range(rounds):
            await asyncio.sleep(0)

    async def eventually(self, check: Callable[[], bool], what: str = "condition", rounds: int = 2000) -> None:
        for _ in range(rounds):
            if check():
                return
            await asyncio.sleep(0)
        raise AssertionError(f"never happened: {what}")

    async def advance(self, seconds: float) -> None:
        await self.settle()  # let timers started just now register their sleeps first
        await self.clock.advance(seconds)
        await self.settle()

    # --- objects -----------------------------------------------------------------------------

    async def cached(self, kind: str, key: str) -> None:
        """Wait until the cluster cache has caught up with the apiserver's current version."""

        def caught_up() -> bool:
            seen = self.cluster.store(kind).get(key)
            plural = self.cluster.informers[kind].resource
            ns, _, name = key.rpartition("/")
            real = self.kube.obj(plural, name, ns or None)
            if real is None:
                return seen is None
            return seen is not None and seen["metadata"]["resourceVersion"] == real["metadata"]["resourceVersion"]

        await self.eventually(caught_up, f"{kind} {key} in the cache")

    async def create_nodeclass(self, name: str = "default", **spec: Any) -> Obj:
        obj = await self.kube.create(
            KWOKNODECLASSES,
            {"apiVersion": "joiner.sh/v1", "kind": "KWOKNodeClass", "metadata": {"name": name}, "spec": spec},
        )
        await self.cached("KWOKNodeClass", name)
        return obj

    async def create_claim(
        self,
        name: str,
        *,
        instance_types: list[str] | None = None,
        requests: dict[str, str] | None = None,
        nodeclass: str = "default",
        nodepool: str = "default",
        startup_taints: list[Obj] | None = None,
        taints: list[Obj] | None = None,
        termination_grace_period: str | None = None,
        requirements: list[Obj] | None = None,
    ) -> Obj:
        reqs = list(requirements or [])
        if instance_types is not None:
            reqs.append({"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": instance_types})
        spec: Obj = {
            "nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": nodeclass},
            "requirements": reqs,
            "resources": {"requests": requests or {"cpu": "1"}},
            "taints": taints or [],
            "startupTaints": startup_taints or [],
        }
        if termination_grace_period:
            spec["terminationGracePeriod"] = termination_grace_period
        obj = await self.kube.create(
            NODECLAIMS,
            {
                "apiVersion": "joiner.sh/v1",
                "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {LABEL_NODEPOOL: nodepool}},
                "spec": spec,
            },
        )
        await self.cached("NodeClaim", name)
        return obj

    async def make_ready(self, node: str) -> None:
        """What kwok does for a Node annotated kwok.x-k8s.io/node=fake."""
        now = format_time(self.clock.now())
        await self.kube.patch(
            NODES,
            node,
            {"status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}},
            subresource="status",
        )

    async def bind_pod(
        self,
        name: str,
        node: str,
        *,
        namespace: str = "default",
        metadata: Obj | None = None,
        spec: Obj | None = None,
        status: Obj | None = None,
    ) -> Obj:
        """A running pod bound to ``node``, one container unless ``spec`` says otherwise."""
        body = {"containers": [{"name": "c", "image": "x"}], **(spec or {})}
        pod = builders.pod(name, namespace=namespace, node=node, metadata=metadata, spec=body, status=status)
        return await self.kube.create(PODS, pod)

    def claim(self, name: str) -> Obj | None:
        return self.kube.obj(NODECLAIMS, name)

    def node(self, name: str) -> Obj | None:
        return self.kube.obj(NODES, name)

    def condition(self, name: str, ctype: str) -> Obj | None:
        claim = self.claim(name)
        for cond in ((claim or {}).get("status") or {}).get("conditions") or []:
            if cond.get("type") == ctype:
                return dict(cond)
        return None

    def condition_status(self, name: str, ctype: str) -> str | None:
        cond = self.condition(name, ctype)
        return None if cond is None else str(cond.get("status"))


async def make_harness(settings: Settings | None = None, *, watched: Iterable[Resource] = WATCHED) -> Harness:
    clock = FakeClock()
    kube = FakeKube(clock=clock)
    cluster = ClusterState(source=kube, clock=clock, watched=watched)
    unavailable = UnavailableOfferings(clock=clock, ttl_seconds=180.0)
    cloud = kwok_provider(kube=kube, cluster=cluster, clock=clock, unavailable=unavailable)
    ctx = Context(
        client=kube,
        cluster=cluster,
        clock=clock,
        events=EventRecorder(client=kube, clock=clock),
        cloud=cloud,
        unavailable=unavailable,
        settings=settings or Settings(),
        writer=NodeClaimWriter(client=kube, cluster=cluster, clock=clock),
    )
    h = Harness(clock=clock, kube=kube, cluster=cluster, cloud=cloud, ctx=ctx)
    h.start(cluster, cloud)
    await cluster.wait_synced()
    return h


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = await make_harness()
    try:
        yield h
    finally:
        await h.close()
