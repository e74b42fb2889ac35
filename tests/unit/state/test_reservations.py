"""Which DaemonSets a planned Node's reservation would keep off it (controller/state/reservations.py)."""

from __future__ import annotations

from typing import Any

from controller.scheduling.kubeconv import daemonset_from_dict
from controller.state.reservations import DaemonSetsKeptOff, kept_off, unregistered_resources
from controller.state.views import NodeClaimView, NodeView

Obj = dict[str, Any]


def claim(*, taints: list[Obj] | None = None) -> NodeClaimView:
    return NodeClaimView.of(
        {
            "metadata": {"name": "gpu-00001", "labels": {"joiner.sh/nodepool": "gpu"}},
            "spec": {
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": ["g6.xlarge", "g6.2xlarge"],
                    },
                ],
                "taints": taints or [],
            },
        }
    )


def daemonset(name: str, *, tolerations: list[Obj] | None = None, selector: dict[str, str] | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "x"}], "tolerations": tolerations or []}
    if selector:
        spec["nodeSelector"] = selector
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "uid": f"u-{name}",
            "resourceVersion": "1",
            "generation": 1,
        },
        "spec": {"template": {"metadata": {"labels": {"app": name}}, "spec": spec}},
    }


GPU = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}


def test_a_daemonset_that_would_run_there_without_tolerating_the_reservation_keeps_the_node_from_being_reserved() -> (
    None
):
    daemons = [
        daemonset_from_dict(d)
        for d in (
            # would run there, no toleration of joiner.sh/planned: kept off
            daemonset("log-agent"),
            # selects on a label only the Node gets later (node-feature-discovery): may match, kept off
            daemonset(
                "device-plugin",
                tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                selector={"nvidia.com/gpu.present": "true"},
            ),
            # tolerates every taint (a CNI agent): runs there anyway
            daemonset("cni", tolerations=[{"operator": "Exists"}]),
            # tolerates the reservation
            daemonset("ready", tolerations=[{"key": "joiner.sh/planned", "operator": "Exists"}]),
            # excluded by a label the NodeClaim knows: never runs there
            daemonset("arm-only", selector={"kubernetes.io/arch": "arm64"}),
        )
    ]
    assert kept_off(claim(), daemons) == ("DaemonSet/log-agent", "DaemonSet/device-plugin")
    # on a Node with the GPU taint, only the DaemonSets that tolerate it would run there at all
    assert kept_off(claim(taints=[GPU]), daemons) == ("DaemonSet/device-plugin",)


def test_the_answer_is_kept_per_nodeclaim_until_a_daemonsets_spec_changes() -> None:
    objs = [daemonset("log-agent")]
    book = DaemonSetsKeptOff()
    assert book.of(claim(), lambda: objs) == ("DaemonSet/log-agent",)
    # its status moves with every Node it runs on: nothing to work out again
    objs[0]["metadata"]["resourceVersion"] = "2"
    objs[0]["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
    assert book.of(claim(), lambda: objs) == ("DaemonSet/log-agent",)
    objs = [daemonset("log-agent", tolerations=[{"key": "joiner.sh/planned", "operator": "Exists"}])]
    objs[0]["metadata"] |= {"resourceVersion": "3", "generation": 2}
    assert book.of(claim(), lambda: objs) == ()
    assert book.of(claim(), list) == ()


def node(allocatable: dict[str, str]) -> NodeView:
    return NodeView.of({"metadata": {"name": "gpu-00001"}, "status": {"allocatable": allocatable}})


def gpu_claim() -> NodeClaimView:
    raw = claim().raw
    raw["spec"]["resources"] = {"requests": {"cpu": "3", "memory": "12Gi", "nvidia.com/gpu": "1"}}
    return NodeClaimView.of(raw)


def test_a_node_registered_with_all_it_was_bought_for_is_reserved_despite_the_daemonsets_kept_off() -> None:
    """Nothing a DaemonSet kept off would bring is needed to take its pods: it waits for the reservation to
    end. Decided once, when the Node registers; until then the NodeClaim counts as reserved."""
    book = DaemonSetsKeptOff()
    kept = ("DaemonSet/log-agent",)
    assert book.despite(gpu_claim(), None, kept)
    assert book.despite(gpu_claim(), node({"cpu": "7", "memory": "30Gi", "nvidia.com/gpu": "1"}), kept)
    assert book.despite(gpu_claim(), node({"cpu": "7", "memory": "30Gi"}), kept), "decided for good"


def test_a_node_registered_without_its_gpus_is_not_reserved_while_a_daemonset_is_kept_off() -> None:
    """A device plugin registers the GPUs: kept off by the reservation, it never would. Decided once."""
    book = DaemonSetsKeptOff()
    kept = ("DaemonSet/device-plugin",)
    assert not book.despite(gpu_claim(), node({"cpu": "7", "memory": "30Gi", "nvidia.com/gpu": "0"}), kept)
    assert not book.despite(gpu_claim(), node({"cpu": "7", "memory": "30Gi", "nvidia.com/gpu": "1"}), kept)
    assert unregistered_resources(gpu_claim(), node({"cpu": "7", "memory": "30Gi"})) == ["nvidia.com/gpu"]
    book.forget(gpu_claim().name)
    assert book.despite(gpu_claim(), node({"cpu": "7", "memory": "30Gi", "nvidia.com/gpu": "1"}), kept)


def test_a_daemonset_being_deleted_keeps_nothing_off() -> None:
    """Its namespace is going (or it is deleted): the DaemonSet controller makes no pod for a new Node."""
    going = daemonset("log-agent")
    book = DaemonSetsKeptOff()
    assert book.of(claim(), lambda: [going]) == ("DaemonSet/log-agent",)
    going["metadata"] |= {"deletionTimestamp": "2026-01-01T00:00:00Z", "resourceVersion": "2", "generation": 2}
    assert book.of(claim(), lambda: [going]) == ()
