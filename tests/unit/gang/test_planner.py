"""Planning a gang in one solve: one zone, all or nothing, limits reserved whole, and "not now" vs "never"."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controller.gang.planner import (
    GangPlan,
    NoFit,
    PlanRequest,
    PoolGangDefaults,
    convert_pods,
    plan_gang,
    pool_gang_defaults,
    refused_by_bounds,
    template_pods,
)
from controller.scheduling import kubeconv_nodes
from controller.scheduling.bounds import PoolBounds
from controller.scheduling.model import ExistingNode, NodePoolTemplate
from controller.scheduling.resources import Resources
from controller.state.views import PodView
from tests.unit.gang.builders import CATALOG, GID, KEY, gpu_member, pool


def request(
    members: list[dict[str, Any]],
    *,
    pools: list[dict[str, Any]] | None = None,
    usage: Resources | None = None,
    existing: tuple[ExistingNode, ...] = (),
    avoid: frozenset[tuple[str, str, str]] = frozenset(),
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
    same_zone: bool | None = None,
) -> PlanRequest:
    pools = pools or [pool()]
    templates: list[NodePoolTemplate] = [
        kubeconv_nodes.nodepool_from_dict(p, CATALOG, usage=usage or Resources()) for p in pools
    ]
    pods, problems = convert_pods([PodView.of(m) for m in members], GID)
    assert not problems
    return PlanRequest(
        key=KEY,
        gid=GID,
        pods=tuple(pods),
        pools=tuple(templates),
        defaults={p["metadata"]["name"]: pool_gang_defaults(p) for p in pools},
        existing=existing,
        unavailable=unavailable,
        avoid=avoid,
        same_zone=same_zone,
    )


def test_the_whole_gang_goes_in_one_zone_labelled_and_tainted_for_it() -> None:
    result = plan_gang(request([gpu_member(f"w{i}") for i in range(4)]))
    assert isinstance(result, GangPlan)
    nodes = result.plan.new_nodes
    assert len(nodes) == 4
    assert {n.choice.zone for n in nodes} == {"zone-b"}, "the cheapest zone that hosts the whole gang"
    for node in nodes:
        assert node.gang == GID
        assert dict(node.labels).get("joiner.sh/gang") == GID or node.requirements.get("joiner.sh/gang") is not None
        assert any(t.key == "joiner.sh/gang" and t.value == GID for t in node.taints)
    assert result.same_zone


def test_a_gang_bigger_than_the_limit_can_never_fit_and_says_why() -> None:
    result = plan_gang(request([gpu_member(f"w{i}") for i in range(9)], pools=[pool(limits={"nvidia.com/gpu": "64"})]))
    assert isinstance(result, NoFit)
    assert result.permanent
    assert "72 nvidia.com/gpu" in result.reason
    assert "spec.limits nvidia.com/gpu: 64" in result.reason
    assert "Raise the NodePool's limits or make the gang smaller" in result.reason


def test_a_gang_that_fits_only_without_other_gangs_waits_whole() -> None:
    # another gang holds 48 of the 64 GPUs in flight: this 4-node gang (32 GPUs) must wait, not take 2 nodes
    result = plan_gang(
        request(
            [gpu_member(f"w{i}") for i in range(4)],
            pools=[pool(limits={"nvidia.com/gpu": "64"})],
            usage=Resources.parse({"nvidia.com/gpu": "48"}),
        )
    )
    assert isinstance(result, NoFit)
    assert not result.permanent
    assert "waiting for capacity" in result.reason
    assert "16 of its 64 nvidia.com/gpu left" in result.reason


def test_a_member_no_instance_type_can_host_makes_the_gang_unschedulable() -> None:
    result = plan_gang(request([gpu_member("w0"), gpu_member("w1", gpus=16)]))
    assert isinstance(result, NoFit)
    assert result.permanent
    assert "can never fit" in result.reason
    assert "nvidia.com/gpu" in result.reason


def test_failed_offerings_are_avoided_when_possible() -> None:
    members = [gpu_member(f"w{i}") for i in range(2)]
    result = plan_gang(request(members, avoid=frozenset({("gpu-8", "zone-b", "on-demand")})))
    assert isinstance(result, GangPlan)
    assert {n.choice.zone for n in result.plan.new_nodes} == {"zone-a"}
    assert result.avoided


def test_when_avoiding_leaves_nothing_the_failed_offering_is_tried_again() -> None:
    members = [gpu_member(f"w{i}") for i in range(2)]
    avoid = frozenset({("gpu-8", "zone-b", "on-demand"), ("gpu-8", "zone-a", "on-demand")})
    result = plan_gang(request(members, avoid=avoid))
    assert isinstance(result, GangPlan)
    assert not result.avoided


def test_offerings_out_of_capacity_make_the_gang_wait_not_fail() -> None:
    members = [gpu_member(f"w{i}") for i in range(2)]
    gone = frozenset({("gpu-8", "zone-b", "on-demand"), ("gpu-8", "zone-a", "on-demand")})
    result = plan_gang(request(members, unavailable=gone))
    assert isinstance(result, NoFit)
    assert not result.permanent


def zoned(name: str, zone: str) -> dict[str, Any]:
    pod = gpu_member(name)
    pod["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": zone}
    return pod


def test_one_zone_is_preferred_even_where_the_pool_allows_more() -> None:
    members = [gpu_member("w0"), gpu_member("w1")]
    defaults = pool_gang_defaults(pool(gang={"sameZone": False, "timeout": "20m"}))
    assert defaults == PoolGangDefaults(same_zone=False, timeout_seconds=1200.0)
    result = plan_gang(request(members, pools=[pool(gang={"sameZone": False, "timeout": "20m"})]))
    assert isinstance(result, GangPlan)
    assert result.same_zone
    assert result.timeout_seconds == 1200.0


def test_a_gang_spans_zones_only_where_the_pool_allows_it() -> None:
    members = [zoned("w0", "zone-a"), zoned("w1", "zone-b")]
    one_zone = plan_gang(request(members))
    assert isinstance(one_zone, NoFit)
    assert one_zone.permanent
    assert "zone" in one_zone.reason
    spread = plan_gang(request(members, pools=[pool(gang={"sameZone": False})]))
    assert isinstance(spread, GangPlan)
    assert not spread.same_zone
    assert {n.choice.zone for n in spread.plan.new_nodes} == {"zone-a", "zone-b"}


def test_an_explicit_annotation_beats_the_pool() -> None:
    members = [gpu_member("w0"), gpu_member("w1")]
    result = plan_gang(request(members, same_zone=False))
    assert isinstance(result, GangPlan)
    assert not result.same_zone


def test_members_can_be_pod_templates_times_counts() -> None:
    template = {
        "metadata": {"labels": {"app": "llm"}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
    }
    small = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}
    pods, problems = template_pods("ml", "req", [(template, 3), (small, 1)], GID)
    assert problems == []
    assert [p.key for p in pods] == ["ml/req-0-0", "ml/req-0-1", "ml/req-0-2", "ml/req-1-0"]
    assert all(p.gang == GID for p in pods)
    base = request([])
    result = plan_gang(replace(base, pods=tuple(pods)))
    assert isinstance(result, GangPlan)
    assert sorted(n.choice.instance_type for n in result.plan.new_nodes) == ["gpu-8", "gpu-8", "gpu-8"]
    assert all(any(t.key == "joiner.sh/gang" for t in n.taints) for n in result.plan.new_nodes)


def test_an_unreadable_template_is_reported_once_and_none_of_its_copies_kept() -> None:
    bad = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "lots"}}}]}}
    good = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    pods, problems = template_pods("ml", "req", [(bad, 4), (good, 2)], GID)
    assert [p.key for p in pods] == ["ml/req-1-0", "ml/req-1-1"]
    assert len(problems) == 1
    assert "ml/req-0-0" in problems[0]


def test_the_pools_node_limit_refuses_a_gang_whole() -> None:
    result = plan_gang(request([gpu_member(f"w{i}") for i in range(3)]))
    assert isinstance(result, GangPlan)
    assert refused_by_bounds(result.plan, {}) is None
    assert refused_by_bounds(result.plan, {"gpu": PoolBounds(max_nodes=3)}) is None
    why = refused_by_bounds(result.plan, {"gpu": PoolBounds(max_nodes=4, nodes=2)})
    assert why is not None
    assert "gpu" in why
