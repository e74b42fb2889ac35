"""Provisioning, a gang and a consolidation all want the last GPU under a NodePool's limit at once,
while the cache lags behind the apiserver: the room is spent once, never twice."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from api.v1.labels import ANNOTATION_PLANNED_INSTANCE_TYPE as PLANNED_INSTANCE_TYPE
from api.v1.labels import LABEL_GANG, LABEL_INSTANCE_TYPE
from controller.clock import format_time
from controller.disruption.controller import ANNOTATION_REPLACEMENT_FOR
from controller.gang.controller import GangController
from controller.kube.resources import NODECLAIMS, NODEPOOLS, PODS
from controller.provisioning.provisioner import Provisioner
from tests.unit.disruption.world import OWNER, World, world

__all__ = ["world"]
Obj = dict[str, Any]
LIMIT = 9  # the 8 GPUs of the node consolidation wants to replace, and room for one more
GPUS = {"cpu-4": 0, "gpu-1": 1, "gpu-8": 8}


def gpus_bought(w: World) -> int:
    """GPUs of every NodeClaim not being deleted: what counts against the NodePool's limit."""
    total = 0
    for claim in w.claims().values():
        meta = claim["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        shape = (meta.get("annotations") or {}).get(PLANNED_INSTANCE_TYPE) or meta["labels"][LABEL_INSTANCE_TYPE]
        total += GPUS[shape]
    return total


def room_taken_by(w: World) -> list[str]:
    """Who bought the NodeClaims other than the node being consolidated."""
    out = []
    for name, claim in sorted(w.claims().items()):
        meta = claim["metadata"]
        if name == "big":
            continue
        if meta["labels"].get(LABEL_GANG):
            out.append("gang")
        elif ANNOTATION_REPLACEMENT_FOR in (meta.get("annotations") or {}):
            out.append("consolidation")
        else:
            out.append("provisioning")
    return out


def gpu_pod(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", **spec.pop("metadata", {})},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}],
            **spec,
        },
        "status": spec.pop("status", {"phase": "Pending"}),
    }


async def a_big_node_worth_consolidating(w: World) -> None:
    """An 8-GPU node whose one pod needs 1 GPU: consolidation wants a 1-GPU replacement for it."""
    await w.nodepool("gpu")
    await w.kube.patch(NODEPOOLS, "gpu", {"spec": {"limits": {"nvidia.com/gpu": str(LIMIT)}}})
    await w.h.cached("NodePool", "gpu")
    await w.node("big", pool="gpu", instance_type="gpu-8")
    then = format_time(w.clock.now() - timedelta(hours=1))
    await w.kube.create(
        PODS,
        gpu_pod(
            "trainer-1",
            nodeName="big",
            metadata={"labels": {"app": "trainer"}, "ownerReferences": OWNER},
            status={
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": then}],
            },
        ),
    )
    await w.h.cached("Pod", "default/trainer-1")
    await w.advance(31)  # consolidateAfter since the pod landed


async def a_pod_wants_a_gpu(w: World, provisioner: Provisioner) -> None:
    """A pod kube-scheduler could not place, needing one GPU; the provisioner decides for it."""
    await w.kube.create(
        PODS,
        gpu_pod(
            "inference-1",
            status={
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        ),
    )
    await w.h.cached("Pod", "default/inference-1")
    w.h.tasks.append(asyncio.create_task(provisioner.reconcile(), name="provision"))  # type: ignore[arg-type]


async def a_gang_wants_a_gpu(w: World) -> None:
    """A one-member gang needing one GPU (the gang controller is running)."""
    await w.kube.create(
        PODS,
        gpu_pod(
            "solo-0",
            metadata={"labels": {"joiner.sh/gang": "solo"}, "annotations": {"joiner.sh/gang-size": "1"}},
            schedulingGates=[{"name": "joiner.sh/gang"}],
        ),
    )
    await w.h.cached("Pod", "default/solo-0")


BEFORE, WHILE, AFTER = "before the consolidation is validated", "while its replacement is written", "after"


@pytest.mark.parametrize(
    ("gang", "pod", "winner"),
    [(BEFORE, BEFORE, "gang"), (BEFORE, AFTER, "gang"), (WHILE, WHILE, "consolidation")],
)
async def test_a_burst_of_creations_never_spends_the_same_limit_room_twice(
    world: World, gang: str, pod: str, winner: str
) -> None:
    w = world
    await a_big_node_worth_consolidating(w)
    [command] = (await w.controller.reconcile()).commands
    assert command.action == "replace"
    assert [r.choice.instance_type for r in command.replacements] == ["gpu-1"]

    provisioner = Provisioner(w.h.ctx)
    w.h.start(GangController(w.h.ctx))
    w.kube.lag(NODECLAIMS)  # from here on the cache does not see new NodeClaims: only the writer knows them
    if gang == BEFORE:
        await a_gang_wants_a_gpu(w)
        await w.settle()
    if pod == BEFORE:
        await a_pod_wants_a_gpu(w, provisioner)
    started: list[asyncio.Task[None]] = []

    async def both() -> None:
        await a_gang_wants_a_gpu(w)
        await a_pod_wants_a_gpu(w, provisioner)

    def on_call(verb: str, plural: str, name: str) -> None:
        # the consolidation marks its candidate just before it writes the replacement
        if (verb, plural, name) == ("patch/status", "nodeclaims", "big") and not started and gang == WHILE:
            started.append(asyncio.create_task(both()))

    w.kube.on_call = on_call
    await w.advance(5)  # the validation delay: the consolidation goes ahead, or finds it must not
    if pod == AFTER:
        await a_pod_wants_a_gpu(w, provisioner)
    await w.settle()
    assert gpus_bought(w) == LIMIT  # the room was spent, once
    assert room_taken_by(w) == [winner]

    w.kube.catch_up(NODECLAIMS)  # the cache sees everything now; nobody buys more
    await w.settle()
    await provisioner.reconcile()
    await w.advance(30)
    assert gpus_bought(w) == LIMIT
    assert room_taken_by(w) == [winner]
