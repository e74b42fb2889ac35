"""Where a booking holds room: the request's arrived pods onto the booked nodes, placeholders for the rest."""

from __future__ import annotations

from controller.provreq.booking import hold_room, unmatched
from controller.scheduling.model import ExistingNode, Pod
from controller.scheduling.resources import Resources


def gpu_pod(name: str, gpus: int = 1) -> Pod:
    return Pod(namespace="ns", name=name, requests=Resources.parse({"cpu": "1", "nvidia.com/gpu": str(gpus)}))


def node(name: str, gpus: int = 1) -> ExistingNode:
    return ExistingNode(
        name=name,
        allocatable=Resources.parse({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}),
    )


def test_arrived_pods_go_onto_the_booked_nodes_and_placeholders_hold_the_rest() -> None:
    nodes = [node("a"), node("b"), node("c")]
    placeholders = [gpu_pod(f"ph-{i}") for i in range(3)]
    room = hold_room(nodes, arrived=[gpu_pod("job-0")], left=placeholders, daemons=(), whole_nodes=True)
    [(where, [placed])] = [(n, list(ps)) for n, ps in room.placed.items()]
    assert placed.name == "job-0"
    assert room.claimed == frozenset({"ns/job-0"})
    assert sum(len(ps) for ps in room.held.values()) == 2, "two pods still to come"
    assert where not in room.held, "the node the arrived pod takes holds nothing else"
    assert room.nodes == frozenset({"a", "b", "c"})


def test_a_check_capacity_booking_keeps_only_the_nodes_that_hold_room() -> None:
    nodes = [node("a"), node("b"), node("cpu", gpus=0)]
    room = hold_room(nodes, arrived=[], left=[gpu_pod("ph-0")], daemons=(), whole_nodes=False)
    assert len(room.nodes) == 1
    assert room.nodes <= {"a", "b"}


def test_each_bound_pod_takes_one_placeholder_of_its_shape() -> None:
    placeholders = [gpu_pod("ph-0", 1), gpu_pod("ph-1", 8), gpu_pod("ph-2", 1)]
    left = unmatched(placeholders, [gpu_pod("bound", 8)])
    assert [p.name for p in left] == ["ph-0", "ph-2"]
    assert [p.name for p in unmatched(left, [gpu_pod("other", 4)])] == ["ph-2"], "no shape matches: any one"


def test_the_own_machines_are_filled_first_and_the_rest_goes_onto_other_room() -> None:
    own = [node("own-0")]
    others = [node("free-0"), node("free-1"), node("cpu", gpus=0)]
    placeholders = [gpu_pod(f"ph-{i}") for i in range(2)]
    room = hold_room(own, others=others, arrived=[], left=placeholders, daemons=(), whole_nodes=True)
    assert len(room.held["own-0"]) == 1, "the request's own machine holds what it can"
    assert sum(len(ps) for n, ps in room.held.items() if n != "own-0") == 1, "the other on free room"
    assert "cpu" not in room.nodes
    assert len(room.nodes) == 2, "the own machine and the one free node that holds room"
