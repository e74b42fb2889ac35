"""The kwok provider's pure decisions: which offering to launch, the NodeClass, the Node it builds."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1.labels import (
    ANNOTATION_KWOK_NODE,
    FINALIZER_TERMINATION,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
    TAINT_UNREGISTERED,
)
from controller.cloudprovider.kwok.node import ANNOTATION_LAUNCHED_BY, LAUNCHED_BY_KWOK, build_node
from controller.cloudprovider.kwok.nodeclass import Failures, parse_nodeclass
from controller.cloudprovider.kwok.offerings import Candidate, choose, compatible, launch_order
from controller.cloudprovider.types import OfferingId
from controller.scheduling.instancetypes import InstanceType, parse_catalog
from controller.state.views import NodeClaimView
from tests.unit.harness import CATALOG

Obj = dict[str, Any]
TYPES = parse_catalog(CATALOG)
NO_FAILURES = Failures()


def claim(
    *, types: list[str] | None = None, requests: dict[str, str] | None = None, extra: list[Obj] | None = None
) -> Obj:
    reqs = list(extra or [])
    if types is not None:
        reqs.append({"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": types})
    return {
        "metadata": {"name": "nc-1", "uid": "u1", "labels": {LABEL_NODEPOOL: "gpu"}},
        "spec": {
            "requirements": reqs,
            "resources": {"requests": requests or {}},
            "nodeClassRef": {"name": "default"},
            "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "agent-not-ready", "effect": "NoSchedule"}],
        },
    }


def pick(nodeclaim: Obj, *, unavailable: frozenset[OfferingId] = frozenset(), failures: Failures = NO_FAILURES) -> str:
    choice = choose(
        candidates=compatible(nodeclaim=nodeclaim, catalog=TYPES), unavailable=unavailable, failures=failures
    )
    assert choice.chosen is not None, choice.reasons
    key = choice.chosen.key
    return f"{key.instance_type}/{key.zone}/{key.capacity_type}"


def test_the_cheapest_offering_among_the_candidates_is_chosen() -> None:
    assert pick(claim(types=["cpu-4", "gpu-1"])) == "cpu-4/zone-a/spot"
    assert pick(claim(types=["gpu-1", "gpu-8"])) == "gpu-1/zone-b/spot"  # zone-a spot is not offered


def test_zone_and_capacity_type_requirements_narrow_the_offerings() -> None:
    on_demand = {"key": LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
    zone_b = {"key": LABEL_ZONE, "operator": "In", "values": ["zone-b"]}
    assert pick(claim(types=["cpu-4"], extra=[on_demand])) == "cpu-4/zone-a/on-demand"
    assert pick(claim(types=["cpu-4"], extra=[on_demand, zone_b])) == "cpu-4/zone-b/on-demand"
    karpenter_key = {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]}
    assert pick(claim(types=["gpu-1"], extra=[karpenter_key])) == "gpu-1/zone-a/on-demand"


def test_an_unavailable_offering_falls_back_to_the_next_cheapest() -> None:
    gone = frozenset({OfferingId("cpu-4", "zone-a", "spot")})
    assert pick(claim(types=["cpu-4"]), unavailable=gone) == "cpu-4/zone-a/on-demand"


def test_injected_insufficient_capacity_is_skipped() -> None:
    failures = parse_nodeclass(
        {"metadata": {"name": "x"}, "spec": {"failures": {"insufficientCapacity": [{"capacityType": "spot"}]}}}
    ).failures
    assert pick(claim(types=["cpu-4", "gpu-1"]), failures=failures) == "cpu-4/zone-a/on-demand"


def test_when_every_offering_is_out_of_capacity_all_of_them_are_reported() -> None:
    failures = parse_nodeclass(
        {"metadata": {"name": "x"}, "spec": {"failures": {"insufficientCapacity": [{}]}}}
    ).failures
    choice = choose(
        candidates=compatible(nodeclaim=claim(types=["gpu-1"]), catalog=TYPES),
        unavailable=frozenset(),
        failures=failures,
    )
    assert choice.chosen is None
    assert set(choice.exhausted) == {
        OfferingId("gpu-1", "zone-a", "on-demand"),
        OfferingId("gpu-1", "zone-a", "spot"),
        OfferingId("gpu-1", "zone-b", "spot"),
    }
    assert any("not offered by the catalog" in r for r in choice.reasons)


def test_requests_filter_instance_types_when_no_candidates_are_named() -> None:
    assert pick(claim(requests={"nvidia.com/gpu": "2"})) == "gpu-8/zone-a/on-demand"
    assert pick(claim(requests={"nvidia.com/gpu": "1"})) == "gpu-1/zone-b/spot"
    assert compatible(nodeclaim=claim(types=["cpu-4"], requests={"nvidia.com/gpu": "1"}), catalog=TYPES) == []


def test_requirements_on_keys_the_catalog_does_not_know_do_not_filter() -> None:
    team = {"key": "team", "operator": "In", "values": ["ml"]}
    gpu_name = {"key": "joiner.sh/gpu-name", "operator": "In", "values": ["H100"]}
    assert pick(claim(extra=[team])) == "cpu-4/zone-a/spot"
    assert pick(claim(extra=[team, gpu_name])) == "gpu-8/zone-a/on-demand"


def test_integer_requirements_and_repeated_keys_narrow_the_offerings() -> None:
    at_least_two = {"key": "joiner.sh/gpu-count", "operator": "Gt", "values": ["1"]}
    assert pick(claim(extra=[at_least_two])) == "gpu-8/zone-a/on-demand"
    narrower = {"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": ["gpu-1", "cpu-4"]}
    assert pick(claim(types=["gpu-8", "gpu-1", "cpu-4"], extra=[narrower])) == "cpu-4/zone-a/spot"
    not_cpu = {"key": LABEL_INSTANCE_TYPE, "operator": "NotIn", "values": ["cpu-4"]}
    assert pick(claim(types=["cpu-4", "gpu-1"], extra=[not_cpu])) == "gpu-1/zone-b/spot"


def test_a_malformed_requirement_matches_no_offering() -> None:
    """The CRD does not admit one; should it get here, nothing is launched for it."""
    near = {"key": LABEL_ZONE, "operator": "Near", "values": ["zone-a"]}
    assert compatible(nodeclaim=claim(types=["cpu-4"], extra=[near]), catalog=TYPES) == []


def test_price_ties_follow_the_nodeclaims_candidate_order() -> None:
    twin: Obj = {
        "instanceTypes": [
            {"name": n, "capacity": {"cpu": "2"}, "offerings": [{"zone": "z", "capacityType": "spot", "price": 1.0}]}
            for n in ("b-type", "a-type")
        ]
    }
    types: tuple[InstanceType, ...] = parse_catalog(twin)
    cands: list[Candidate] = compatible(nodeclaim=claim(types=["b-type", "a-type"]), catalog=types)
    choice = choose(candidates=cands, unavailable=frozenset(), failures=Failures())
    assert choice.chosen is not None
    assert choice.chosen.instance_type.name == "b-type"


def test_price_ties_between_zones_go_to_the_planned_zone_and_fall_back_to_the_others() -> None:
    zones: Obj = {
        "instanceTypes": [
            {
                "name": "c-type",
                "capacity": {"cpu": "2"},
                "offerings": [{"zone": z, "capacityType": "spot", "price": 1.0} for z in ("z-a", "z-b", "z-c")],
            }
        ]
    }
    types: tuple[InstanceType, ...] = parse_catalog(zones)
    cands: list[Candidate] = compatible(nodeclaim=claim(types=["c-type"]), catalog=types)
    planned = choose(candidates=cands, unavailable=frozenset(), failures=Failures(), planned_zone="z-b")
    assert planned.chosen is not None
    assert planned.chosen.offering.zone == "z-b"
    unplanned = choose(candidates=cands, unavailable=frozenset(), failures=Failures())
    assert unplanned.chosen is not None
    assert unplanned.chosen.offering.zone == "z-a"
    full = frozenset({OfferingId("c-type", "z-b", "spot")})
    fallback = choose(candidates=cands, unavailable=full, failures=Failures(), planned_zone="z-b")
    assert fallback.chosen is not None
    assert fallback.chosen.offering.zone == "z-a"


def test_the_cloud_providers_launch_order_takes_tier_then_price_then_rank_then_the_planned_zone() -> None:
    catalog: Obj = {
        "instanceTypes": [
            {
                "name": name,
                "capacity": {"cpu": "2"},
                "offerings": [
                    {"zone": z, "capacityType": ct, "price": price + (0.5 if ct == "on-demand" else 0.0)}
                    for z in ("z-a", "z-b", "z-c")
                    for ct in ("spot", "on-demand")
                ],
            }
            for name, price in (("dear", 2.0), ("cheap", 1.0))
        ]
    }
    types = parse_catalog(catalog)
    nodeclaim = claim(types=["dear", "cheap"])  # the NodeClaim's own order: dear ranks first
    nodeclaim["metadata"]["annotations"] = {"joiner.sh/planned-zone": "z-c"}
    cands = compatible(nodeclaim=nodeclaim, catalog=types)
    order = [
        f"{c.key.instance_type}/{c.key.zone}/{c.key.capacity_type}" for c in launch_order(cands, nodeclaim=nodeclaim)
    ]
    assert order[:4] == ["cheap/z-c/spot", "cheap/z-a/spot", "cheap/z-b/spot", "cheap/z-c/on-demand"]
    tiers = {"on-demand": 0, "spot": 1}
    tiered = launch_order(cands, nodeclaim=nodeclaim, tiers=tiers)
    assert [c.offering.capacity_type for c in tiered] == ["on-demand"] * 6 + ["spot"] * 6
    assert f"{tiered[0].key.instance_type}/{tiered[0].key.zone}" == "cheap/z-c"
    del nodeclaim["metadata"]["annotations"]
    assert launch_order(cands, nodeclaim=nodeclaim)[0].key.zone == "z-a"  # no plan: the catalog's order


def test_nodeclass_parsing_reads_delay_and_failures() -> None:
    spec = parse_nodeclass(
        {
            "metadata": {"name": "flaky"},
            "spec": {
                "registrationDelay": "1m30s",
                "failures": {
                    "insufficientCapacity": [{"instanceType": "gpu-1", "zone": "zone-a"}],
                    "neverRegister": ["gpu-8"],
                    "neverReady": ["cpu-4"],
                    "hideGPUs": ["gpu-1"],
                },
            },
        }
    )
    assert spec.registration_delay_seconds == 90
    assert spec.failures.insufficient(OfferingId("gpu-1", "zone-a", "spot"))
    assert not spec.failures.insufficient(OfferingId("gpu-1", "zone-b", "spot"))
    assert "gpu-8" in spec.failures.never_register
    assert "gpu-1" not in spec.failures.never_register
    assert "cpu-4" in spec.failures.never_ready
    assert "gpu-1" in spec.failures.hide_gpus


def test_a_malformed_nodeclass_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"spec\.registrationDelay"):
        parse_nodeclass({"metadata": {"name": "x"}, "spec": {"registrationDelay": "soon"}})


def test_a_nodeclass_marked_not_ready_says_why() -> None:
    spec = parse_nodeclass(
        {
            "metadata": {"name": "x"},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "False", "message": "catalog missing"}]},
        }
    )
    assert not spec.ready
    assert spec.not_ready_message == "catalog missing"


def _node(failures: Obj | None = None, it: str = "gpu-1") -> Obj:
    nodeclass = parse_nodeclass({"metadata": {"name": "default"}, "spec": {"failures": failures or {}}})
    instance_type = next(t for t in TYPES if t.name == it)
    offering = instance_type.offerings[0]
    return build_node(
        nodeclaim=NodeClaimView.of(claim(types=[it])),
        instance_type=instance_type,
        offering=offering,
        nodeclass=nodeclass,
    )


def test_the_node_carries_the_claims_identity_labels_taints_and_resources() -> None:
    node = _node()
    meta = node["metadata"]
    assert meta["name"] == "nc-1"
    assert node["spec"]["providerID"] == "kwok://nc-1"
    assert meta["annotations"] == {ANNOTATION_KWOK_NODE: "fake", ANNOTATION_LAUNCHED_BY: LAUNCHED_BY_KWOK}
    assert meta["finalizers"] == [FINALIZER_TERMINATION]
    assert meta["ownerReferences"][0]["uid"] == "u1"
    labels = meta["labels"]
    assert labels[LABEL_NODEPOOL] == "gpu"
    assert labels[LABEL_INSTANCE_TYPE] == "gpu-1"
    assert labels[LABEL_ZONE] == "zone-a"
    assert labels[LABEL_CAPACITY_TYPE] == "on-demand"
    assert labels[LABEL_HOSTNAME] == "nc-1"
    assert labels["joiner.sh/gpu-name"] == "L4"
    assert labels["kubernetes.io/os"] == "linux"
    # as the kubelet registers them: otherwise kube-controller-manager adds them, a GET and a PATCH a Node
    assert labels["beta.kubernetes.io/os"] == labels["kubernetes.io/os"]
    assert labels["beta.kubernetes.io/arch"] == labels["kubernetes.io/arch"]
    taints = {(t["key"], t["effect"]) for t in node["spec"]["taints"]}
    assert taints == {("gpu", "NoSchedule"), ("agent-not-ready", "NoSchedule"), (TAINT_UNREGISTERED, "NoSchedule")}
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert node["status"]["capacity"]["cpu"] == "8"


def test_allocatable_is_capacity_minus_overhead() -> None:
    node = _node(it="cpu-4")
    assert node["status"]["allocatable"]["cpu"] == "3900m"
    assert node["status"]["allocatable"]["memory"] == "15Gi"


def test_failure_injection_shapes_the_node() -> None:
    node = _node({"neverReady": ["gpu-1"], "hideGPUs": ["gpu-1"]})
    assert ANNOTATION_KWOK_NODE not in node["metadata"]["annotations"]
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
