"""The waves a plan's closed Nodes open in (controller.nodeclaim.opening)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.nodeclaim.opening import OPEN, Waiting, blocked
from controller.scheduling.resources import Resources

GPU = "nvidia.com/gpu"


def res(cpu: float, gpu: int = 0, pods: int = 1) -> Resources:
    values = {"cpu": str(cpu), "pods": str(pods)}
    if gpu:
        values[GPU] = str(gpu)
    return Resources.parse(values)


def test_a_machine_with_room_for_another_machines_waiting_pods_opens_after_it() -> None:
    # the race's GPU plan: a 4-GPU machine with two 2-GPU pods and 15 CPU pods (no room left), and
    # one with two 2-GPU pods only (15.9 CPUs free): the CPU pods would bind in the second if it
    # opened while their own machine was still closed
    free = {"full": res(0.9, pods=90), "roomy": res(15.9, pods=106)}
    waiting = [Waiting("full", res(16, gpu=2))] * 2 + [Waiting("full", res(1))] * 15
    waiting += [Waiting("roomy", res(16, gpu=2))] * 2
    assert blocked(free, waiting) == {"full": 0, "roomy": 15}
    # once the first machine is open and its pods nominated there, nothing waits for it any more
    assert blocked({"roomy": free["roomy"]}, [Waiting("roomy", res(16, gpu=2))] * 2) == {"roomy": 0}


def test_machines_with_room_for_each_others_pods_open_together() -> None:
    free = {"a": res(2), "b": res(2)}
    waiting = [Waiting("a", res(1)), Waiting("b", res(1))]
    assert blocked(free, waiting) == {"a": 0, "b": 0}


def test_a_pod_that_fits_only_its_own_machine_blocks_nothing() -> None:
    free = {"a": res(1), "b": res(0.5)}
    waiting = [Waiting("a", res(1)), Waiting("b", res(2))]
    assert blocked(free, waiting) == {"a": 0, "b": 0}


def test_a_chain_opens_one_link_at_a_time() -> None:
    # a's pod fits b's room, a's and b's fit c's: a first, then b, then c
    free = {"a": res(0), "b": res(1), "c": res(2)}
    waiting = [Waiting("a", res(1)), Waiting("b", res(2)), Waiting("c", res(3))]
    assert blocked(free, waiting) == {"a": 0, "b": 1, "c": 2}
    assert blocked({"b": free["b"], "c": free["c"]}, waiting[1:]) == {"b": 0, "c": 1}


def test_a_pair_that_needs_each_other_still_waits_for_a_pod_from_outside() -> None:
    free = {"a": res(2), "b": res(2), "c": res(0)}
    waiting = [Waiting("a", res(1)), Waiting("b", res(1)), Waiting("c", res(2))]
    result = blocked(free, waiting)
    assert result["c"] == 0
    assert result["a"] >= 1  # c's pod fits a's room
    assert result["b"] >= 1  # b opens with a, so it waits too


def test_a_pod_whose_machine_is_open_but_that_is_not_nominated_there_yet_blocks_the_room_it_fits() -> None:
    # kube-scheduler cleared its nomination (a failed try while its Node was closed); until it is
    # nominated again or bound, it would take the first room it fits
    free = {"a": res(4), "b": res(0.5)}
    waiting = [Waiting(OPEN, res(1)), Waiting("a", res(4))]
    assert blocked(free, waiting) == {"a": 1, "b": 0}


def test_a_machine_without_its_node_yet_never_opens_and_its_pods_block_the_room_they_fit() -> None:
    free = {"a": None, "b": res(4), "c": res(0.5)}
    waiting = [Waiting("a", res(1)), Waiting("b", res(1)), Waiting("c", res(1))]
    result = blocked(free, waiting)
    assert result["a"] == 1
    assert result["b"] >= 1
    assert result["c"] == 0


def test_gpus_and_pod_slots_count_like_cpus() -> None:
    # 1-GPU pods cannot take a CPU-only room, and a full pod list is no room
    free = {"gpu": res(8, gpu=0, pods=10), "slots": res(8, gpu=1, pods=0)}
    waiting = [Waiting("other", res(1, gpu=1))]
    assert blocked(free, waiting) == {"gpu": 0, "slots": 0}


def test_nothing_closed_nothing_to_say() -> None:
    assert blocked({}, [Waiting(OPEN, res(1))]) == {}


@st.composite
def plans(draw: st.DrawFn) -> tuple[dict[str, Resources | None], list[Waiting]]:
    names = [f"n{i}" for i in range(draw(st.integers(1, 8)))]
    free: dict[str, Resources | None] = {}
    for name in names:
        if draw(st.integers(0, 9)) == 0:
            free[name] = None
        else:
            free[name] = res(draw(st.integers(0, 8)), gpu=draw(st.integers(0, 2)), pods=draw(st.integers(0, 3)))
    waiting = [
        Waiting(draw(st.sampled_from([*names, OPEN])), res(draw(st.integers(0, 4)), gpu=draw(st.integers(0, 1))))
        for _ in range(draw(st.integers(0, 12)))
    ]
    return free, waiting


@settings(max_examples=300, deadline=None)
@given(plans())
def test_opening_every_machine_said_free_at_once_lets_no_pod_leave_its_plan(
    plan: tuple[dict[str, Resources | None], list[Waiting]],
) -> None:
    """The safety of a wave: no pod of a machine that stays closed (or of an open one, not
    nominated there) fits the room of a machine that opens now."""
    free, waiting = plan
    result = blocked(free, waiting)
    assert set(result) == set(free)
    opens = {name for name, count in result.items() if count == 0}
    for name in opens:
        room = free[name]
        assert room is not None
        for pod in waiting:
            if pod.claim != name and pod.requests.fits_in(room):
                assert pod.claim in opens, f"{pod.claim}'s pod would take {name}'s room"


@settings(max_examples=300, deadline=None)
@given(plans())
def test_some_machine_always_opens_while_every_one_has_its_node_and_every_open_ones_pod_is_nominated(
    plan: tuple[dict[str, Resources | None], list[Waiting]],
) -> None:
    """Progress: the waves never wait on each other in a circle."""
    free, waiting = plan
    free = {name: room if room is not None else res(1) for name, room in free.items()}
    waiting = [pod for pod in waiting if pod.claim != OPEN and pod.claim in free]
    assert 0 in blocked(free, waiting).values()
