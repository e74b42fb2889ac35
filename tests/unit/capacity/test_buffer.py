"""Buffer sizing (virtual pods), where they sit, and the refill a real pod causes."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from api.v1.capacity import Buffer, BufferShape, Capacity
from controller.capacity.buffer import buffer_needs, node_type, virtual_pods
from controller.scheduling import ExistingNode, FrozenLabels, Resources
from controller.scheduling.model import Pod
from controller.scheduling.resources import ONE_POD
from controller.scheduling.solver import solve
from controller.scheduling.warm import is_virtual, place_buffer
from tests.unit.disruption.builders import GPU, NOW, TYPES, cpu_pool, gpu_pool, pod


def node_of(
    name: str, instance_type: str, pool: str, pods: tuple[Pod, ...] = (), *, in_flight: bool = False
) -> ExistingNode:
    it = TYPES[instance_type]
    return ExistingNode(
        name=name,
        allocatable=it.allocatable,
        labels=FrozenLabels({**it.labels, "joiner.sh/nodepool": pool, "topology.kubernetes.io/zone": "zone-a"}),
        pods=pods,
        node_pool=pool,
        in_flight=in_flight,
    )


def test_a_nodes_buffer_is_one_placeholder_per_node_filling_the_pools_cheapest_type() -> None:
    gpu = gpu_pool()
    assert [t.name if (t := node_type(p)) else None for p in (gpu, cpu_pool())] == ["gpu-1", "cpu-2"]
    daemon = pod("ds", cpu=0.5, mem_gi=1)
    sized = virtual_pods(buffer_needs(Capacity(buffer=Buffer(nodes=2)), NOW), gpu, [daemon])
    assert len(sized.pods) == 2
    assert sized.wanted == 2
    assert all(is_virtual(p.key) for p in sized.pods)
    first = sized.pods[0]
    assert first.requests.get(GPU) == 1000  # the whole GPU of a gpu-1
    assert first.requests.get("cpu") == TYPES["gpu-1"].allocatable.get("cpu") - 500  # less the daemon's cpu
    assert first.requests.get("pods") == 0  # the pod slot is the solver's to add
    assert first.node_requirements[0].matches(
        {"joiner.sh/nodepool": "gpu", "node.kubernetes.io/instance-type": "gpu-1"}
    )
    assert not first.node_requirements[0].matches(
        {"joiner.sh/nodepool": "gpu", "node.kubernetes.io/instance-type": "gpu-4"}
    )


def test_a_gpu_buffer_is_rounded_up_to_whole_shapes() -> None:
    shape = BufferShape(requests={GPU: "4", "cpu": "8"}, node_selector={"joiner.sh/gpu-count": "4"})
    sized = virtual_pods(buffer_needs(Capacity(buffer=Buffer(gpus=10, shape=shape)), NOW), gpu_pool())
    assert len(sized.pods) == 3  # 10 GPUs in shapes of 4
    assert [sized.units[p.key] for p in sized.pods] == [4, 4, 2]
    assert sized.wanted == 10
    assert sized.pods[0].requests == Resources({GPU: 4000, "cpu": 8000})
    assert sized.pods[0].node_requirements[0].matches({"joiner.sh/nodepool": "gpu", "joiner.sh/gpu-count": "4"})


def test_a_gpu_buffer_without_a_shape_is_single_gpus() -> None:
    sized = virtual_pods(buffer_needs(Capacity(buffer=Buffer(gpus=3)), NOW), gpu_pool())
    assert [p.requests for p in sized.pods] == [Resources({GPU: 1000})] * 3


def test_a_pool_with_no_offering_cannot_keep_a_nodes_buffer_and_says_so() -> None:
    empty = replace(gpu_pool(), instance_types=())
    sized = virtual_pods(buffer_needs(Capacity(buffer=Buffer(nodes=1)), NOW), empty)
    assert sized.pods == ()
    assert sized.wanted == 1
    assert sized.problems == ("buffer of 1 nodes: the pool has no instance type with an offering",)


def test_the_solver_buys_the_buffer_nodes_and_then_they_hold_it() -> None:
    gpu = gpu_pool()
    sized = virtual_pods(buffer_needs(Capacity(buffer=Buffer(nodes=2)), NOW), gpu)
    plan = solve(pods=sized.pods, node_pools=[gpu, cpu_pool()])
    assert [n.choice.instance_type for n in plan.new_nodes] == ["gpu-1", "gpu-1"]
    nodes = [node_of(f"n{i}", "gpu-1", "gpu") for i in range(2)]
    placement = place_buffer(sized.pods, nodes)
    assert placement.missing == ()
    assert sorted(placement.held) == ["n0", "n1"]
    # once there, solving again buys nothing
    assert solve(pods=sized.pods, node_pools=[gpu], existing_nodes=nodes).new_nodes == ()


def test_a_real_pod_on_a_warm_node_leaves_the_buffer_short_and_the_refill_is_one_node() -> None:
    gpu = gpu_pool()
    sized = virtual_pods(buffer_needs(Capacity(buffer=Buffer(nodes=2)), NOW), gpu)
    busy = pod("train-0", cpu=2, mem_gi=4, gpus=1)
    nodes = [node_of("n0", "gpu-1", "gpu", (busy,)), node_of("n1", "gpu-1", "gpu")]
    placement = place_buffer(sized.pods, nodes)
    assert list(placement.held) == ["n1"]
    assert len(placement.missing) == 1
    refill = solve(pods=sized.pods, node_pools=[gpu], existing_nodes=nodes)
    assert len(refill.new_nodes) == 1
    assert refill.new_nodes[0].choice.instance_type == "gpu-1"


def test_in_flight_nodes_hold_the_buffer_but_are_not_ready() -> None:
    sized = virtual_pods(buffer_needs(Capacity(buffer=Buffer(nodes=2)), NOW), gpu_pool())
    nodes = [node_of("n0", "gpu-1", "gpu"), node_of("n1", "gpu-1", "gpu", in_flight=True)]
    placement = place_buffer(sized.pods, nodes)
    assert placement.missing == ()
    assert len(placement.ready) == 1


def test_nodes_of_another_pool_or_cordoned_hold_nothing() -> None:
    sized = virtual_pods(buffer_needs(Capacity(buffer=Buffer(nodes=1)), NOW), gpu_pool())
    other_pool = node_of("x", "gpu-1", "other")
    cordoned = replace(node_of("c", "gpu-1", "gpu"), unschedulable=True)
    assert len(place_buffer(sized.pods, [other_pool, cordoned]).missing) == 1


@given(
    gpus=st.integers(0, 40),
    per=st.sampled_from([1, 2, 4, 8]),
    taken=st.lists(st.integers(0, 4), min_size=0, max_size=6),
)
def test_gpu_placeholders_never_overfill_a_node(gpus: int, per: int, taken: list[int]) -> None:
    shape = BufferShape(requests={GPU: str(per)})
    sized = virtual_pods(buffer_needs(Capacity(buffer=Buffer(gpus=gpus, shape=shape)), NOW), gpu_pool())
    assert sum(sized.units.values()) == gpus
    nodes = [
        node_of(f"n{i}", "gpu-4", "gpu", tuple(pod(f"p{i}-{j}", cpu=0.1, mem_gi=0.1, gpus=1) for j in range(t)))
        for i, t in enumerate(taken)
    ]
    placement = place_buffer(sized.pods, nodes)
    assert len(placement.missing) + sum(len(v) for v in placement.held.values()) == len(sized.pods)
    by_name = {n.name: n for n in nodes}
    for name, held in placement.held.items():
        n = by_name[name]
        used = n.requested()  # bound pods, with their slots
        for p in held:
            used = used + p.requests + ONE_POD
        assert used.fits_in(n.allocatable)
