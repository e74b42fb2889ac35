"""Pods' volumes -> where they may run, as kube-scheduler's VolumeBinding and VolumeZone filters read them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from controller.scheduling import Requirement, Requirements, solve
from controller.scheduling.kubeconv import pod_from_dict
from controller.scheduling.kubeconv_volumes import (
    BIND_COMPLETED,
    VolumeNotReady,
    Volumes,
    default_class,
    has_claims,
    with_volumes,
)
from tests.unit.scheduling.builders import ZONE, itype, pool

ZONE_B = Requirement.in_(ZONE, "zone-b")


def a_pod(*volumes: dict[str, Any], selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        "volumes": list(volumes),
    }
    if selector:
        spec["nodeSelector"] = selector
    return {"metadata": {"name": "train", "namespace": "ml", "uid": "pod-uid"}, "spec": spec}


def claim_volume(claim: str, name: str = "data") -> dict[str, Any]:
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def claim(
    name: str, *, volume: str | None = None, storage_class: str | None = None, bound: bool = True, **meta: Any
) -> dict[str, Any]:
    annotations = {BIND_COMPLETED: "yes"} if volume and bound else {}
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"]}
    if volume:
        spec["volumeName"] = volume
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name, "namespace": "ml", "annotations": annotations, **meta}, "spec": spec}


def volume(name: str, *terms: list[dict[str, Any]], labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": "100Gi"},
        "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": name},
    }
    if terms:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def storage_class(
    name: str, *, wait: bool = True, zones: list[str] | None = None, default: bool = False
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"} if default else {},
        },
        "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer" if wait else "Immediate",
    }
    if zones:
        obj["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "values": zones}]}
        ]
    return obj


def lookup(
    claims: Sequence[dict[str, Any]] = (),
    volumes: Sequence[dict[str, Any]] = (),
    classes: Sequence[dict[str, Any]] = (),
) -> Volumes:
    return Volumes(
        {f"{c['metadata']['namespace']}/{c['metadata']['name']}": c for c in claims},
        {v["metadata"]["name"]: v for v in volumes},
        {c["metadata"]["name"]: c for c in classes},
    )


def narrowed(obj: dict[str, Any], found: Volumes) -> tuple[Requirements, ...]:
    return with_volumes(pod_from_dict(obj), obj, found).node_requirements


def test_a_bound_claim_allows_the_nodes_its_volume_allows_with_a_drivers_zone_key_read_as_the_zone() -> None:
    obj = a_pod(claim_volume("data"))
    pv = volume("pv-1", [{"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["zone-b"]}])
    assert narrowed(obj, lookup([claim("data", volume="pv-1")], [pv])) == (Requirements((ZONE_B,)),)
    # the zone label of an older volume (beta key, several zones joined by "__") counts the same
    labelled = volume("pv-2", labels={"failure-domain.beta.kubernetes.io/zone": "zone-a__zone-b"})
    got = narrowed(a_pod(claim_volume("old")), lookup([claim("old", volume="pv-2")], [labelled]))
    assert got == (Requirements((Requirement.in_(ZONE, "zone-a", "zone-b"),)),)
    # a region key is the cluster's: left out; a volume without node affinity allows anywhere
    regional = volume("pv-3", [{"key": "topology.kubernetes.io/region", "operator": "In", "values": ["r1"]}])
    assert narrowed(a_pod(claim_volume("r")), lookup([claim("r", volume="pv-3")], [regional])) == ()
    assert narrowed(a_pod(claim_volume("any")), lookup([claim("any", volume="pv-4")], [volume("pv-4")])) == ()


def test_the_pods_own_node_selection_and_each_volume_are_all_kept() -> None:
    in_b = [{"key": ZONE, "operator": "In", "values": ["zone-b"]}]
    b_or_c = [{"key": ZONE, "operator": "In", "values": ["zone-b", "zone-c"]}]
    found = lookup(
        [claim("a", volume="pv-a"), claim("b", volume="pv-b")], [volume("pv-a", in_b), volume("pv-b", b_or_c)]
    )
    obj = a_pod(claim_volume("a", "x"), claim_volume("b", "y"), selector={"joiner.sh/gpu-name": "L4"})
    (term,) = narrowed(obj, found)
    zone = term.get(ZONE)
    assert zone is not None
    assert zone.allows("zone-b")
    assert not zone.allows("zone-c")
    assert term.get("joiner.sh/gpu-name") == Requirement.in_("joiner.sh/gpu-name", "L4")
    with pytest.raises(VolumeNotReady, match="its own node selection rules out"):
        narrowed(a_pod(claim_volume("a"), selector={ZONE: "zone-c"}), found)


def test_an_unbound_claim_that_waits_for_its_pod_allows_the_storage_class_topologies() -> None:
    obj = a_pod(claim_volume("scratch"))
    got = narrowed(
        obj, lookup([claim("scratch", storage_class="gp3")], classes=[storage_class("gp3", zones=["zone-b"])])
    )
    assert got == (Requirements((ZONE_B,)),)
    anywhere = lookup([claim("scratch", storage_class="gp3")], classes=[storage_class("gp3")])
    assert narrowed(obj, anywhere) == ()
    # no class named: the default class (the newest of those marked so)
    classes = [storage_class("old", zones=["zone-a"], default=True), storage_class("fast", zones=["zone-b"])]
    classes[0]["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    assert default_class(classes) == "old"
    eph = {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "fast"}}}}
    # an ephemeral volume's claim the controller has not made yet: its template's class
    assert narrowed(a_pod(eph), lookup(classes=classes)) == (Requirements((ZONE_B,)),)


@pytest.mark.parametrize(
    ("found", "message"),
    [
        (lookup(), 'PersistentVolumeClaim "data" not found'),
        (lookup([claim("data", storage_class="gp2")], classes=[storage_class("gp2", wait=False)]), "binds at once"),
        (lookup([claim("data", storage_class="")]), "no StorageClass"),
        (
            lookup([claim("data", storage_class="nope")]),
            'StorageClass "nope" of PersistentVolumeClaim "data" not found',
        ),
        (lookup([claim("data", volume="pv-1", bound=False)], [volume("pv-1")]), "is not bound to it yet"),
        (lookup([claim("data", volume="pv-9")]), 'PersistentVolume "pv-9" of PersistentVolumeClaim "data" not found'),
        (
            lookup([claim("data", volume="pv-1", deletionTimestamp="2026-11-27T00:00:00Z")], [volume("pv-1")]),
            "being deleted",
        ),
    ],
)
def test_a_claim_kube_scheduler_cannot_place_the_pod_with_yet_says_what_it_waits_for(
    found: Volumes, message: str
) -> None:
    with pytest.raises(VolumeNotReady, match=message):
        narrowed(a_pod(claim_volume("data")), found)


def test_an_ephemeral_claim_made_for_another_pod_is_not_used() -> None:
    eph = {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "fast"}}}}
    theirs = claim("train-tmp", storage_class="fast", ownerReferences=[{"uid": "other", "controller": True}])
    with pytest.raises(VolumeNotReady, match="not made for this pod"):
        narrowed(a_pod(eph), lookup([theirs], classes=[storage_class("fast")]))
    mine = claim("train-tmp", storage_class="fast", ownerReferences=[{"uid": "pod-uid", "controller": True}])
    assert narrowed(a_pod(eph), lookup([mine], classes=[storage_class("fast", zones=["zone-b"])])) == (
        Requirements((ZONE_B,)),
    )


def test_pods_without_claims_are_left_as_they_are() -> None:
    spec = {"volumes": [{"name": "cfg", "configMap": {"name": "x"}}, {"name": "t", "projected": {"sources": []}}]}
    assert not has_claims(spec)
    obj = a_pod({"name": "cfg", "configMap": {"name": "x"}})
    pod = pod_from_dict(obj)
    assert with_volumes(pod, obj, lookup()) is pod


def test_the_solver_buys_in_the_volumes_zone() -> None:
    types = [itype("c.large", cpu=2, mem_gi=4, price=0.08, zones=("zone-a", "zone-b", "zone-c"))]
    pv = volume("pv-1", [{"key": "topology.gke.io/zone", "operator": "In", "values": ["zone-c"]}])
    obj = a_pod(claim_volume("data"))
    pod = with_volumes(pod_from_dict(obj), obj, lookup([claim("data", volume="pv-1")], [pv]))
    plan = solve(pods=[pod], node_pools=[pool("default", types)])
    assert [n.choice.zone for n in plan.new_nodes] == ["zone-c"]
