"""The one builder of the solver's inputs: NodePools validated once per watch event, the ones that
may launch with their instance types, and the offerings out of capacity as the solver's keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controller.clock import FakeClock
from controller.cloudprovider.types import CloudProviderError, OfferingId
from controller.scheduling.instancetypes import InstanceType
from controller.state.cluster import ClusterState
from controller.state.inputs import offered_pools, solver_inputs, unavailable_offerings
from controller.state.views import NodePoolView
from tests.unit.builders import nodepool
from tests.unit.scheduling.builders import itype

Obj = dict[str, Any]


class Cloud:
    def __init__(self, types: Sequence[InstanceType], *, refuse: str = "") -> None:
        self.types = tuple(types)
        self.refuse = refuse
        self.asked: list[str] = []

    async def instance_types(self, nodepool: Obj) -> Sequence[InstanceType]:
        name = nodepool["metadata"]["name"]
        self.asked.append(name)
        if name == self.refuse:
            raise CloudProviderError("no catalog")
        return self.types


def test_a_nodepool_view_is_validated_once_when_made() -> None:
    good = NodePoolView.of(nodepool("gpu", weight=10))
    assert good.model is not None
    assert (good.invalid, good.name, good.deleting) == (None, "gpu", False)
    bad = NodePoolView.of(nodepool("bad", weight=-1))
    assert bad.model is None
    assert "weight" in str(bad.invalid)


async def test_offered_pools_leave_out_the_deleting_the_invalid_and_those_without_instance_types() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]
    store = cluster.informers["NodePool"]
    going = nodepool("going")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for obj in (nodepool("b"), nodepool("a"), nodepool("bad", weight=-1), going, nodepool("dark")):
        store._apply("ADDED", obj)
    assert set(cluster.nodepool_views()) == {"a", "b", "bad", "going", "dark"}
    cloud = Cloud([itype("cpu-2", cpu=2, mem_gi=4, price=0.1)], refuse="dark")
    invalid: list[str] = []
    pools = await offered_pools(cluster, cloud, component="test", on_invalid=lambda v: invalid.append(v.name))
    assert list(pools) == ["a", "b"]
    assert invalid == ["bad"]
    assert cloud.asked == ["a", "b", "dark"]
    inputs = solver_inputs(
        cluster, pools, existing=[], unavailable=[OfferingId("cpu-2", "z1", "spot")], component="test"
    )
    assert [t.name for t in inputs.templates] == ["a", "b"]
    assert set(inputs.instance_types) == {"cpu-2"}
    assert inputs.unavailable == frozenset({("cpu-2", "z1", "spot")})
    store._apply("DELETED", nodepool("a"))
    assert "a" not in cluster.nodepool_views()


def test_the_unavailable_offerings_are_the_solver_keys() -> None:
    assert unavailable_offerings([OfferingId("g", "z", "on-demand")]) == frozenset({("g", "z", "on-demand")})


def _agent(name: str, *, tolerations: list[Obj] | None = None, selector: dict[str, str] | None = None) -> Obj:
    spec: Obj = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}],
        "tolerations": tolerations or [],
    }
    if selector:
        spec["nodeSelector"] = selector
    return {
        "metadata": {"name": name, "namespace": "kube-system", "uid": f"uid-{name}"},
        "spec": {"template": {"metadata": {"labels": {"app": name}}, "spec": spec}},
    }


def test_a_machine_holds_the_room_of_each_daemonset_that_will_run_there_and_has_no_pod_there_yet() -> None:
    """A Node reserved to its planned pods keeps off the DaemonSets that do not tolerate the
    reservation until its pods are bound; a Node or a NodeClaim still coming up has no daemon pod yet.
    Their room is the DaemonSets': another plan must not fill it first."""
    from controller.scheduling.model import Pod
    from controller.scheduling.taints import Taint
    from controller.state.inputs import with_daemon_pods
    from tests.unit.scheduling.builders import node, res

    agents = [
        _agent("log-agent"),  # tolerates nothing
        _agent(
            "gpu-plugin",
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}],
            selector={"node.kubernetes.io/instance-type": "g6.xlarge"},
        ),
        _agent("arm-only", selector={"kubernetes.io/arch": "arm64"}),
        _agent("nfd-gpus", selector={"nvidia.com/gpu.present": "true"}),  # a label a NodeClaim does not know yet
    ]
    room = res(cpu=4, memory="16Gi", pods=110)
    reserved = node(
        "reserved", allocatable=room, taints=[Taint(key="joiner.sh/planned", value="x", effect="NoSchedule")]
    )
    running = node(
        "running", allocatable=room, bound=[Pod(name="log-agent-abc", namespace="kube-system", owner="uid-log-agent")]
    )
    gpu = node(
        "gpu",
        allocatable=room,
        taints=[Taint(key="nvidia.com/gpu", effect="NoSchedule")],
        labels={"node.kubernetes.io/instance-type": "g6.xlarge"},
    )
    flying = node("flying", allocatable=room, in_flight=True, labels={"node.kubernetes.io/instance-type": "m7i.large"})
    found = {
        n.name: sorted(p.name.rsplit("-", 1)[0] for p in n.pods)
        for n in with_daemon_pods([reserved, running, gpu, flying], agents)
    }
    assert found == {
        "reserved": ["log-agent"],
        "running": ["log-agent"],  # its own pod, bound: nothing more
        "gpu": ["gpu-plugin"],
        "flying": ["log-agent", "nfd-gpus"],
    }
    [held] = with_daemon_pods([reserved], agents)
    assert held.requested() - reserved.requested() == res(cpu="500m", memory="256Mi", pods=1)
    going = {**agents[0], "metadata": {**agents[0]["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert with_daemon_pods([reserved], [going]) == [reserved]
