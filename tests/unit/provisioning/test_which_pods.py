"""Which pending pods the provisioner plans, and what it tells those it does not: a pod whose
volumes or devices no node it buys would satisfy, a pod kube-scheduler is preempting for, a pod
joiner cannot read."""

from __future__ import annotations

import asyncio
from typing import Any

from api.v1.labels import LABEL_ZONE
from controller.kube.resources import NODES, PODS, PVCS, PVS, STORAGECLASSES
from controller.provisioning.provisioner import Provisioner
from tests.unit.harness import Harness
from tests.unit.provisioning.world import claims, container, pending

Obj = dict[str, Any]


async def test_a_pod_gets_its_node_in_its_volumes_zone_and_one_whose_claim_is_not_bound_gets_none(h: Harness) -> None:
    """kube-scheduler runs a pod only where its bound volume is (zone-b here, though zone-a is cheaper),
    and a pod whose claim binds at once only once it is bound: joiner buys accordingly."""
    await h.kube.create(
        PVS,
        {
            "metadata": {"name": "pv-data"},
            "spec": {
                "capacity": {"storage": "100Gi"},
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": LABEL_ZONE, "operator": "In", "values": ["zone-b"]}]}
                        ]
                    }
                },
            },
        },
    )
    await h.kube.create(STORAGECLASSES, {"metadata": {"name": "gp2"}, "provisioner": "ebs.csi.aws.com"})
    for name, spec, notes in (
        ("data", {"volumeName": "pv-data"}, {"pv.kubernetes.io/bind-completed": "yes"}),
        ("scratch", {"storageClassName": "gp2"}, {}),
    ):
        await h.kube.create(
            PVCS, {"metadata": {"name": name, "namespace": "default", "annotations": notes}, "spec": spec}
        )
        await h.cached("PersistentVolumeClaim", f"default/{name}")
    await h.cached("PersistentVolume", "pv-data")
    await h.cached("StorageClass", "gp2")
    for name, claim_name in (("reader", "data"), ("writer", "scratch")):
        await h.kube.create(
            PODS,
            {
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "containers": [container("1")],
                    "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim_name}}],
                },
                "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
            },
        )
        await h.cached("Pod", f"default/{name}")
    plan = await Provisioner(h.ctx).reconcile()
    assert plan is not None
    assert [(n.pods, n.choice.zone) for n in plan.new_nodes] == [(("default/reader",), "zone-b")]
    assert plan.unschedulable["default/writer"] == (
        'joiner cannot provision this pod: PersistentVolumeClaim "scratch" is not bound, and StorageClass "gp2" '
        "binds at once (volumeBindingMode Immediate): the pod is placed once the claim is bound"
    )


async def test_a_pod_that_claims_devices_through_dra_gets_no_node_and_is_told_why(h: Harness) -> None:
    """kube-scheduler places a pod with resourceClaims only where a DRA driver published the devices:
    no node joiner buys has them yet, so it buys none rather than one the pod never runs on."""
    await h.kube.create(
        PODS,
        {
            "metadata": {"name": "dra", "namespace": "default"},
            "spec": {
                "containers": [
                    {**container("1"), "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            },
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        },
    )
    await h.cached("Pod", "default/dra")
    await pending(h, "plain", "1")
    plan = await Provisioner(h.ctx).reconcile()
    assert plan is not None
    assert [n.pods for n in plan.new_nodes] == [("default/plain",)]
    assert plan.unschedulable["default/dra"].startswith(
        "joiner cannot provision this pod: it claims devices through Dynamic Resource Allocation"
    )


async def test_a_pod_preempting_on_an_existing_node_gets_no_node_until_its_nomination_is_gone(h: Harness) -> None:
    """kube-scheduler nominated a high-priority pod to a Node where it evicts lower-priority pods: it
    binds there once they are gone (as Karpenter, joiner buys nothing for it); the evicted pods come
    back pending and are provisioned for. If the preemption is given up, the pod is planned."""
    await h.kube.create(
        NODES,
        {
            "metadata": {"name": "busy", "labels": {LABEL_ZONE: "zone-a"}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    await h.cached("Node", "busy")
    await h.bind_pod("low", "busy", spec={"containers": [container("1500m")]})
    await pending(h, "urgent", "1500m")
    await h.kube.patch(
        PODS, "urgent", {"status": {"nominatedNodeName": "busy"}}, namespace="default", subresource="status"
    )
    await h.eventually(
        lambda: (v := h.cluster.pod_view("default/urgent")) is not None and v.nominated_node_name == "busy",
        "the nomination cached",
    )
    provisioner = Provisioner(h.ctx)
    assert await provisioner.reconcile() is None
    assert claims(h) == []
    await h.kube.patch(
        PODS, "urgent", {"status": {"nominatedNodeName": None}}, namespace="default", subresource="status"
    )
    await h.eventually(
        lambda: (v := h.cluster.pod_view("default/urgent")) is not None and not v.nominated_node_name,
        "the nomination gone",
    )
    plan = await provisioner.reconcile()
    assert plan is not None
    assert [n.pods for n in plan.new_nodes] == [("default/urgent",)]


async def test_a_pod_joiner_cannot_read_gets_a_failedprovisioning_event_naming_the_field(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    await pending(h, "negative", "-1")
    await pending(h, "fine", "1")
    plan = await provisioner.reconcile()
    assert plan is not None
    assert [n.pods for n in plan.new_nodes] == [("default/fine",)]
    assert "spec.containers[0].resources.requests.cpu: must not be negative" in plan.unschedulable["default/negative"]
    await asyncio.gather(*provisioner._event_tasks)
    [event] = [e for e in h.kube.events("negative") if e["reason"] == "FailedProvisioning"]
    assert event["type"] == "Warning"
    assert "spec.containers[0].resources.requests.cpu: must not be negative" in event["message"]


async def test_a_batch_of_only_unreadable_pods_still_tells_them_why(h: Harness) -> None:
    provisioner = Provisioner(h.ctx)
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "skewed", "namespace": "default"},
        "spec": {"containers": [container("1")], "topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "z"}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    await h.kube.create(PODS, pod)
    await h.cached("Pod", "default/skewed")
    plan = await provisioner.reconcile()
    assert plan is not None
    assert plan.new_nodes == ()
    assert "maxSkew: must be at least 1" in plan.unschedulable["default/skewed"]
