"""Disruption keeps what the warm buffer must keep, and takes the nodes back once it shrinks."""

from __future__ import annotations

from datetime import timedelta

from api.v1.capacity import Buffer, Capacity
from controller.capacity.buffer import buffer_needs, virtual_pods
from controller.disruption.planner import plan
from controller.disruption.snapshot import keep_buffers
from tests.unit.disruption.builders import NOW, gpu_pool, node, pod, policy, snapshot


def buffer(nodes: int) -> tuple:  # type: ignore[type-arg]
    return virtual_pods(buffer_needs(Capacity(buffer=Buffer(nodes=nodes)), NOW), gpu_pool()).pods


def gpu_nodes() -> list:  # type: ignore[type-arg]
    stable = NOW - timedelta(minutes=5)
    busy = node("busy", "gpu-4", [pod("train-1", gpus=1)], pool="gpu", stable_since=stable)
    warm = [node(f"warm-{i}", "gpu-1", pool="gpu", stable_since=stable) for i in range(3)]
    return [busy, *warm]


def test_empty_nodes_holding_the_buffer_are_not_taken_and_the_rest_are() -> None:
    nodes, other = keep_buffers(buffer(2), gpu_nodes(), [])
    assert other == []
    kept = {n.node for n in nodes if n.keeps_buffer}
    assert len(kept) == 2
    assert all(n.keeps_buffer == ("gpu",) for n in nodes if n.node in kept)
    decision = plan(snapshot(nodes, pools={"gpu": policy("gpu")}))
    removed = {c for command in decision.commands for c in command.candidates}
    free = {f"claim-{n.node}" for n in nodes if n.node.startswith("warm") and n.node not in kept}
    assert removed == free  # the one warm node beyond the buffer goes; the two the buffer holds stay


def test_when_the_buffer_shrinks_to_zero_consolidation_takes_the_warm_nodes_back() -> None:
    nodes, _ = keep_buffers((), gpu_nodes(), [])
    decision = plan(snapshot(nodes, pools={"gpu": policy("gpu")}))
    removed = {c for command in decision.commands for c in command.candidates}
    assert removed == {"claim-warm-0", "claim-warm-1", "claim-warm-2"}


def test_room_the_buffer_holds_counts_as_used_when_pods_are_moved() -> None:
    # without a buffer one of the two goes (roomy's pod moves to a cheaper node); with a buffer of the 3
    # free GPUs, roomy is kept and busy's pod may not take the buffer's room on it
    stable = NOW - timedelta(minutes=5)
    busy = node("busy", "gpu-1", [pod("train-1", cpu=2, mem_gi=4, gpus=1)], pool="gpu", stable_since=stable)
    roomy = node("roomy", "gpu-4", [pod("train-2", cpu=2, mem_gi=4, gpus=1)], pool="gpu", stable_since=stable)
    free_decision = plan(snapshot([busy, roomy], pools={"gpu": policy("gpu")}))
    assert free_decision.commands != ()
    gpus = virtual_pods(buffer_needs(Capacity(buffer=Buffer(gpus=3)), NOW), gpu_pool()).pods
    nodes, _ = keep_buffers(gpus, [busy, roomy], [])
    held = next(n for n in nodes if n.node == "roomy")
    assert held.keeps_buffer == ("gpu",)
    assert len(held.view.pods) == 4  # its pod and three placeholders
    assert plan(snapshot(nodes, pools={"gpu": policy("gpu")})).commands == ()
