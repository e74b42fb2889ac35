"""Behaviour of the solver: what it buys, where pods go, and why pods are refused."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

from controller.scheduling import (
    Gang,
    HostPort,
    Offering,
    Plan,
    Pod,
    Requirement,
    Requirements,
    Taint,
    Toleration,
    solve,
)
from controller.scheduling.kubeconv import daemonset_from_dict
from tests.unit.scheduling.builders import (
    GPU_TAINT,
    HOSTNAME,
    TOLERATE_GPU,
    ZONE,
    anti,
    check_plan,
    itype,
    node,
    pod,
    pods,
    pool,
    res,
    spread,
)

CPU_TYPES = [
    itype("c.large", cpu=2, mem_gi=4, price=0.08),
    itype("c.xlarge", cpu=4, mem_gi=8, price=0.16),
    itype("c.4xlarge", cpu=16, mem_gi=32, price=0.64),
    itype("m.xlarge", cpu=4, mem_gi=16, price=0.19),
]
GPU_TYPES = [
    itype("g.1gpu", cpu=8, mem_gi=32, gpu=1, price=1.0),
    itype("g.4gpu", cpu=48, mem_gi=192, gpu=4, price=3.8),
    itype("g.8gpu", cpu=96, mem_gi=768, gpu=8, price=7.2),
]


def gpu_pod(name: str, gpus: int = 1, gang: str | None = None) -> Pod:
    return pod(name, requests=res(cpu="2", memory="8Gi", gpu=gpus), tolerations=[TOLERATE_GPU], gang=gang)


def expect_types(plan: Plan) -> list[str]:
    return sorted(n.choice.instance_type for n in plan.new_nodes)


# --- GPU-aware packing --------------------------------------------------------------------------


def test_one_gpu_pod_gets_the_cheapest_one_gpu_machine_not_an_eight_gpu_one() -> None:
    pools = [pool("gpu", GPU_TYPES, taints=[GPU_TAINT])]
    pending = [gpu_pod("train-0")]
    plan = solve(pods=pending, node_pools=pools)
    check_plan(plan, pending=pending, pools=pools)
    assert expect_types(plan) == ["g.1gpu"]
    assert [c.instance_type for c in plan.new_nodes[0].candidates] == ["g.1gpu", "g.4gpu", "g.8gpu"]


def test_eight_one_gpu_pods_share_the_cheaper_eight_gpu_machine() -> None:
    pools = [pool("gpu", GPU_TYPES, taints=[GPU_TAINT])]
    pending = [gpu_pod(f"p-{i}") for i in range(8)]
    plan = solve(pods=pending, node_pools=pools)
    check_plan(plan, pending=pending, pools=pools)
    assert expect_types(plan) == ["g.8gpu"]
    assert plan.total_price == 7.2


def test_five_gpus_buy_four_plus_one_not_eight() -> None:
    pools = [pool("gpu", GPU_TYPES, taints=[GPU_TAINT])]
    pending = [gpu_pod(f"p-{i}") for i in range(5)]
    plan = solve(pods=pending, node_pools=pools)
    assert expect_types(plan) == ["g.1gpu", "g.4gpu"]


def test_cpu_pods_do_not_land_on_gpu_nodes_when_a_cpu_node_is_cheaper() -> None:
    pools = [pool("mixed", CPU_TYPES + GPU_TYPES)]  # no taint: GPU machines are allowed
    pending = pods("web", 6, requests=res(cpu="1", memory="1Gi"))
    plan = solve(pods=pending, node_pools=pools)
    check_plan(plan, pending=pending, pools=pools)
    assert all(not t.startswith("g.") for t in expect_types(plan))


def test_cpu_pods_fill_the_leftover_of_a_gpu_node_being_bought_anyway() -> None:
    pools = [pool("mixed", CPU_TYPES + GPU_TYPES)]
    pending = [gpu_pod("infer-0"), pod("sidecar-0", requests=res(cpu="2", memory="4Gi"))]
    plan = solve(pods=pending, node_pools=pools)
    check_plan(plan, pending=pending, pools=pools)
    assert expect_types(plan) == ["g.1gpu"]
    assert sorted(plan.new_nodes[0].pods) == ["default/infer-0", "default/sidecar-0"]


def test_gpu_pods_are_packed_before_cpu_pods() -> None:
    pools = [pool("mixed", CPU_TYPES + GPU_TYPES)]
    pending = [pod("cpu-0", requests=res(cpu="5", memory="20Gi")), gpu_pod("gpu-0")]
    plan = solve(pods=pending, node_pools=pools)
    check_plan(plan, pending=pending, pools=pools)
    # the GPU node was chosen first; the CPU pod fits its leftover (8 cpu, 32Gi) for free
    assert expect_types(plan) == ["g.1gpu"]


def test_cheapest_offering_wins_across_capacity_types_and_zones() -> None:
    t = itype("c.xlarge", cpu=4, mem_gi=8, price=0.16, spot=0.05, unavailable=[("zone-a", "spot")])
    pools = [pool("default", [t])]
    plan = solve(pods=[pod("a")], node_pools=pools)
    choice = plan.new_nodes[0].choice
    assert (choice.capacity_type, choice.zone, choice.price) == ("spot", "zone-b", 0.05)


def test_equal_prices_spread_new_nodes_over_the_zones_in_turn() -> None:
    t = itype("c.xlarge", cpu=4, mem_gi=8, price=0.16, spot=0.05)
    pools = [pool("default", [t])]
    pending = pods("w", 7, requests=res(cpu="3", memory="4Gi"))
    plan = solve(pods=pending, node_pools=pools)
    check_plan(plan, pending=pending, pools=pools)
    assert [n.choice.zone for n in plan.new_nodes] == ["zone-a", "zone-b", "zone-c"] * 2 + ["zone-a"]
    assert {n.choice.capacity_type for n in plan.new_nodes} == {"spot"}
    # each NodeClaim may still launch in any zone: the chosen one comes first among equal prices
    second = plan.new_nodes[1].candidates[0].offerings
    spot_first = [("zone-b", "spot"), ("zone-a", "spot"), ("zone-c", "spot")]
    assert [(o.zone, o.capacity_type) for o in second[:3]] == spot_first
    assert {z for r in plan.new_nodes[1].requirements.items if r.key == ZONE for z in r.values} == {
        "zone-a",
        "zone-b",
        "zone-c",
    }
    assert plan == solve(pods=pending, node_pools=pools)  # deterministic


def test_equal_prices_spread_a_mixed_plan_over_the_zones_after_local_search() -> None:
    zones = ("zone-a", "zone-b", "zone-c", "zone-d")
    types = [itype(f"c.{n}x", cpu=n, mem_gi=2 * n, price=0.02 * n, zones=zones) for n in (2, 8, 32, 64)]
    pools = [pool("default", types)]
    pending = [
        *pods("web", 50, requests=res(cpu="500m", memory="1Gi")),
        *pods("batch", 40, requests=res(cpu="2", memory="4Gi")),
        *pods("big", 10, requests=res(cpu="4", memory="16Gi")),
    ]
    plan = solve(pods=pending, node_pools=pools)
    check_plan(plan, pending=pending, pools=pools)
    per_zone = Counter(n.choice.zone for n in plan.new_nodes)
    assert len(plan.new_nodes) > 1
    assert max(per_zone.values()) - min(per_zone[z] for z in zones) <= 1, per_zone


def test_equal_prices_go_first_to_the_zones_with_fewest_existing_nodes() -> None:
    t = itype("c.xlarge", cpu=4, mem_gi=8, price=0.16)
    pools = [pool("default", [t])]
    full = res(cpu="0", memory="0", pods=110)
    existing = [node("a1", zone="zone-a", allocatable=full), node("c1", zone="zone-c", allocatable=full)]
    pending = pods("w", 3, requests=res(cpu="3", memory="4Gi"))
    plan = solve(pods=pending, node_pools=pools, existing_nodes=existing)
    assert [n.choice.zone for n in plan.new_nodes] == ["zone-b", "zone-a", "zone-b"]


def test_a_cheaper_zone_still_wins_over_spreading() -> None:
    cheap_b = itype("c.xlarge", cpu=4, mem_gi=8, price=0.16, zones=("zone-a", "zone-c"))
    cheap_b = replace(cheap_b, offerings=(*cheap_b.offerings, Offering("zone-b", "on-demand", 0.15)))
    pools = [pool("default", [cheap_b])]
    plan = solve(pods=pods("w", 3, requests=res(cpu="3", memory="4Gi")), node_pools=pools)
    assert [n.choice.zone for n in plan.new_nodes] == ["zone-b"] * 3


def test_a_gang_keeps_to_one_zone_on_equal_prices() -> None:
    t = itype("g.8gpu", cpu=96, mem_gi=768, gpu=8, price=7.2)
    p = pool("gpu", [t], taints=[GPU_TAINT])
    for same_zone in (True, False):
        pending = [gpu_pod(f"w-{i}", gpus=8, gang="g") for i in range(3)]
        plan = solve(pods=pending, node_pools=[p], gangs=[Gang("g", same_zone=same_zone)])
        assert len(plan.new_nodes) == 3
        assert len({n.choice.zone for n in plan.new_nodes}) == 1


def test_groups_kept_to_one_zone_are_dealt_over_the_zones_on_equal_prices() -> None:
    # each app's pods must share a zone (a required pod affinity to their own app over the zone):
    # on equal prices the apps go to different zones, not all to the first
    t = itype("c.xlarge", cpu=4, mem_gi=8, price=0.16)
    pools = [pool("default", [t])]
    pending = [
        p
        for app in ("x", "y", "z")
        for p in pods(app, 4, labels={"app": app}, affinity=[anti(ZONE, app)], requests=res(cpu="3", memory="4Gi"))
    ]
    plan = solve(pods=pending, node_pools=pools)
    check_plan(plan, pending=pending, pools=pools)
    zone_of = {k: n.choice.zone for n in plan.new_nodes for k in n.pods}
    apps = {app: {zone_of[f"default/{app}-{i}"] for i in range(4)} for app in ("x", "y", "z")}
    assert all(len(zones) == 1 for zones in apps.values()), apps  # each app in one zone
    assert {z for zones in apps.values() for z in zones} == {"zone-a", "zone-b", "zone-c"}, apps
    assert Counter(n.choice.zone for n in plan.new_nodes) == {"zone-a": 4, "zone-b": 4, "zone-c": 4}
    assert plan == solve(pods=pending, node_pools=pools)  # deterministic


def test_nodes_free_to_move_fill_the_zones_the_pinned_nodes_left_short() -> None:
    # pods kept to zone-a by their node selector, on a node the plan lists after the plain pods' two:
    # those go to the other zones (dealt in plan order, the first would have gone to zone-a too)
    pools = [
        pool(
            "default",
            [itype("c.xlarge", cpu=4, mem_gi=8, price=0.16), itype("c.2xlarge", cpu=8, mem_gi=16, price=0.32)],
        )
    ]
    plain = pods("w", 2, requests=res(cpu="7", memory="1Gi"))
    pinned = pods("a", 2, requests=res(cpu="3", memory="1Gi"), selector={ZONE: "zone-a"})
    plan = solve(pods=[*plain, *pinned], node_pools=pools)
    check_plan(plan, pending=[*plain, *pinned], pools=pools)
    assert [n.pods for n in plan.new_nodes][-1] == ("default/a-0", "default/a-1")
    zone_of = {k: n.choice.zone for n in plan.new_nodes for k in n.pods}
    assert {zone_of["default/a-0"], zone_of["default/a-1"]} == {"zone-a"}
    assert sorted((zone_of["default/w-0"], zone_of["default/w-1"])) == ["zone-b", "zone-c"]


def test_unavailable_offerings_are_avoided() -> None:
    t = itype("c.xlarge", cpu=4, mem_gi=8, price=0.16, spot=0.05)
    pools = [pool("default", [t])]
    avoid = {("c.xlarge", z, "spot") for z in ("zone-a", "zone-b")}
    plan = solve(pods=[pod("a")], node_pools=pools, unavailable=avoid)
    assert plan.new_nodes[0].choice.zone == "zone-c"
    everything = {("c.xlarge", z, ct) for z in ("zone-a", "zone-b", "zone-c") for ct in ("spot", "on-demand")}
    plan = solve(pods=[pod("a")], node_pools=pools, unavailable=everything)
    assert "default/a" in plan.unschedulable


# --- existing capacity first -------------------------------------------------------------------


def test_existing_nodes_are_filled_before_anything_is_bought() -> None:
    pools = [pool("default", CPU_TYPES)]
    existing = [node("n1", allocatable=res(cpu="4", memory="8Gi", pods=110))]
    pending = pods("web", 3, requests=res(cpu="1", memory="1Gi"))
    plan = solve(pods=pending, node_pools=pools, existing_nodes=existing)
    check_plan(plan, pending=pending, pools=pools, existing=existing)
    assert not plan.new_nodes
    assert len(plan.existing_placements["n1"]) == 3


def test_ready_nodes_come_before_in_flight_nodes_and_cordoned_or_tainted_are_skipped() -> None:
    pools = [pool("default", CPU_TYPES)]
    alloc = res(cpu="2", memory="4Gi", pods=110)
    existing = [
        node("a-in-flight", allocatable=alloc, in_flight=True),
        node("b-cordoned", allocatable=alloc, unschedulable=True),
        node("c-tainted", allocatable=alloc, taints=[Taint("dedicated", "NoSchedule", "db")]),
        node("d-ready", allocatable=alloc),
    ]
    pending = pods("web", 3, requests=res(cpu="1", memory="1Gi"))
    plan = solve(pods=pending, node_pools=pools, existing_nodes=existing)
    check_plan(plan, pending=pending, pools=pools, existing=existing)
    assert len(plan.existing_placements["d-ready"]) == 2
    assert len(plan.existing_placements["a-in-flight"]) == 1
    assert "b-cordoned" not in plan.existing_placements
    assert "c-tainted" not in plan.existing_placements
    assert not plan.new_nodes


def test_bound_pods_use_up_existing_capacity() -> None:
    pools = [pool("default", CPU_TYPES)]
    bound = [pod("old-0", requests=res(cpu="1500m", memory="1Gi"))]
    existing = [node("n1", allocatable=res(cpu="2", memory="4Gi", pods=110), bound=bound)]
    pending = [pod("new-0", requests=res(cpu="1", memory="1Gi"))]
    plan = solve(pods=pending, node_pools=pools, existing_nodes=existing)
    assert not plan.existing_placements
    assert len(plan.new_nodes) == 1


# --- NodePools: requirements, weights, limits, taints, daemonsets ---------------------------


def test_higher_weight_pool_is_used_first_even_if_pricier() -> None:
    cheap = pool("cheap", [itype("c.cheap", cpu=4, mem_gi=8, price=0.1)])
    preferred = pool("reserved", [itype("c.dear", cpu=4, mem_gi=8, price=0.3)], weight=50)
    plan = solve(pods=[pod("a")], node_pools=[cheap, preferred])
    assert plan.new_nodes[0].node_pool == "reserved"


def test_pool_limits_cap_what_is_bought_and_say_so() -> None:
    gpu = pool("h100", GPU_TYPES, taints=[GPU_TAINT], limits=res(gpu=16), usage=res(gpu=8))
    pending = [gpu_pod(f"job-{i}", gpus=8) for i in range(2)]
    plan = solve(pods=pending, node_pools=[gpu])
    check_plan(plan, pending=pending, pools=[gpu])
    assert len(plan.new_nodes) == 1
    [reason] = plan.unschedulable.values()
    assert reason == (
        'nodepool "h100": all available instance types exceed limits for nodepool '
        "(nvidia.com/gpu: 16 of 16 in use, the cheapest instance type that fits has 8)"
    )


def test_limits_count_the_capacity_of_the_chosen_machines() -> None:
    p = pool("cpu", CPU_TYPES, limits=res(cpu="4"))
    pending = pods("web", 3, requests=res(cpu="1500m", memory="1Gi"))
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    bought = sum(
        next(t for t in CPU_TYPES if t.name == n.choice.instance_type).capacity.get("cpu") for n in plan.new_nodes
    )
    assert bought <= 4000
    assert len(plan.unschedulable) == 1
    assert next(iter(plan.unschedulable.values())).startswith(
        'nodepool "cpu": all available instance types exceed limits for nodepool (cpu: '
    )


def test_pool_requirements_and_labels_constrain_instance_types() -> None:
    p = pool(
        "arm-only", CPU_TYPES, requirements=[Requirement.new("node.kubernetes.io/instance-type", "In", ["m.xlarge"])]
    )
    plan = solve(pods=[pod("a")], node_pools=[p])
    assert expect_types(plan) == ["m.xlarge"]
    team = pool("team", CPU_TYPES, labels={"team": "ml"})
    plan = solve(pods=[pod("a", selector={"team": "ml"}), pod("b", selector={"team": "web"})], node_pools=[team])
    assert list(plan.unschedulable) == ["default/b"]
    assert "team In [web]" in plan.unschedulable["default/b"]


def test_daemonset_overhead_is_added_to_new_nodes_it_would_run_on() -> None:
    p = pool("default", CPU_TYPES)
    daemon = pod("agent", requests=res(cpu="500m", memory="512Mi"))
    pending = [pod("a", requests=res(cpu="1800m", memory="1Gi"))]
    without = solve(pods=pending, node_pools=[p])
    assert expect_types(without) == ["c.large"]
    plan = solve(pods=pending, node_pools=[p], daemon_pods=[daemon])
    check_plan(plan, pending=pending, pools=[p], daemons=[daemon])
    assert expect_types(plan) == ["c.xlarge"]
    assert plan.new_nodes[0].requests.get("cpu") == 2300
    assert plan.new_nodes[0].requests.get("pods") == 2000


def test_daemonsets_that_cannot_run_on_a_pool_add_no_overhead() -> None:
    p = pool("gpu", GPU_TYPES, taints=[GPU_TAINT])
    selective = pod("cpu-agent", requests=res(cpu="4"), selector={"kubernetes.io/arch": "arm64"})
    intolerant = pod("web-agent", requests=res(cpu="4"))
    tolerant = pod("gpu-agent", requests=res(cpu="7"), tolerations=[Toleration("", "Exists")])
    pending = [gpu_pod("a")]
    plan = solve(pods=pending, node_pools=[p], daemon_pods=[selective, intolerant])
    assert expect_types(plan) == ["g.1gpu"]
    plan = solve(pods=pending, node_pools=[p], daemon_pods=[tolerant])
    assert expect_types(plan) == ["g.4gpu"]


def test_startup_taints_need_no_toleration() -> None:
    p = pool("gpu", GPU_TYPES, startup_taints=[Taint("nvidia.com/gpu-driver", "NoSchedule")])
    plan = solve(pods=[pod("a", requests=res(cpu="1", gpu=1))], node_pools=[p])
    assert len(plan.new_nodes) == 1
    assert plan.new_nodes[0].startup_taints == (Taint("nvidia.com/gpu-driver", "NoSchedule"),)


def test_min_values_keeps_enough_candidates() -> None:
    req = Requirement.new("node.kubernetes.io/instance-type", "Exists", min_values=3)
    p = pool("flex", CPU_TYPES, requirements=[req])
    plan = solve(pods=pods("w", 2, requests=res(cpu="1", memory="1Gi")), node_pools=[p])
    assert all(len(n.candidates) >= 3 for n in plan.new_nodes)
    p2 = pool(
        "flex", CPU_TYPES, requirements=[Requirement.new("node.kubernetes.io/instance-type", "Exists", min_values=5)]
    )
    plan = solve(pods=[pod("a")], node_pools=[p2])
    reason = plan.unschedulable["default/a"]
    # the reason names the requirement, how many types could host the pod, and what to change
    assert "node.kubernetes.io/instance-type has minValues 5" in reason
    assert f"only {len(CPU_TYPES)} value(s)" in reason
    assert "lower minValues" in reason


# --- affinity and preferences ---------------------------------------------------------------


def test_node_selector_and_required_affinity_terms_are_ored() -> None:
    p = pool("mixed", CPU_TYPES + GPU_TYPES)
    terms = [
        Requirements((Requirement.new("node.kubernetes.io/instance-type", "In", ["nope"]),)),
        Requirements((Requirement.new("node.kubernetes.io/instance-type", "In", ["m.xlarge"]),)),
    ]
    plan = solve(pods=[pod("a", terms=terms)], node_pools=[p])
    assert expect_types(plan) == ["m.xlarge"]


def test_preferred_node_affinity_is_tried_first_then_relaxed() -> None:
    p = pool("default", CPU_TYPES)
    prefer_b = Requirements((Requirement.in_(ZONE, "zone-b"),))
    plan = solve(pods=[pod("a", preferred=[(10, prefer_b)])], node_pools=[p])
    assert plan.new_nodes[0].choice.zone == "zone-b"
    prefer_missing = Requirements((Requirement.in_(ZONE, "zone-x"),))
    plan = solve(pods=[pod("a", preferred=[(10, prefer_missing)])], node_pools=[p])
    assert plan.new_nodes[0].choice.zone == "zone-a"
    assert not plan.unschedulable


def test_free_capacity_beats_preferences() -> None:
    p = pool("default", CPU_TYPES)
    existing = [node("n1", zone="zone-a", allocatable=res(cpu="4", memory="8Gi", pods=110))]
    prefer_b = Requirements((Requirement.in_(ZONE, "zone-b"),))
    plan = solve(pods=[pod("a", preferred=[(10, prefer_b)])], node_pools=[p], existing_nodes=existing)
    assert plan.existing_placements == {"n1": ("default/a",)}


# --- reasons ----------------------------------------------------------------------------------


def test_a_zone_only_tainted_nodes_make_a_spread_domain_is_named_with_the_policy_that_leaves_it_out() -> None:
    # the add-ons' Node, tainted, in a zone no pool can buy in: kube-scheduler counts its zone among
    # the spread's domains (nodeTaintsPolicy: Ignore), so pods that must go there fit nowhere
    addons = node(
        "addons-0",
        zone="zone-x",
        allocatable=res(cpu="4", memory="16Gi", pods=110),
        taints=[Taint(key="CriticalAddonsOnly", value="true", effect="NoSchedule")],
    )
    p = pool("default", CPU_TYPES)
    pending = pods("web", 4, labels={"app": "web"}, spread=[spread(ZONE, "web")])
    plan = solve(pods=pending, node_pools=[p], existing_nodes=[addons])
    assert plan.unschedulable
    reason = next(iter(plan.unschedulable.values()))
    assert "needs it in zone zone-x (zone zone-x is one of its domains only through Node addons-0" in reason
    assert "nodeTaintsPolicy: Honor would leave such Nodes out" in reason
    honored = [replace(w, spread=(replace(w.spread[0], honor_node_taints=True),)) for w in pending]
    plan = solve(pods=honored, node_pools=[p], existing_nodes=[addons])
    assert not plan.unschedulable
    check_plan(plan, pending=honored, pools=[p], existing=[addons])
    # a zone a pool does buy in is not such a case: no hint there
    tolerated = pods("ok", 4, labels={"app": "ok"}, spread=[spread(ZONE, "ok")])
    addons_a = replace(addons, labels={**addons.labels, ZONE: "zone-a"})
    plan = solve(pods=tolerated, node_pools=[p], existing_nodes=[addons_a])
    assert not plan.unschedulable


def test_reasons_name_the_pool_and_the_cause() -> None:
    gpu = pool("gpu", GPU_TYPES, taints=[GPU_TAINT])
    cpu = pool("cpu", CPU_TYPES)
    huge = pod("huge", requests=res(cpu="1", gpu=16), tolerations=[TOLERATE_GPU])
    intolerant = pod("intolerant", requests=res(cpu="1", gpu=1))
    b200 = pod(
        "b200", requests=res(cpu="1", gpu=1), tolerations=[TOLERATE_GPU], selector={"joiner.sh/gpu-name": "B200"}
    )
    plan = solve(pods=[huge, intolerant, b200], node_pools=[gpu, cpu])
    assert plan.unschedulable["default/huge"] == (
        'nodepool "cpu": no instance type has nvidia.com/gpu; '
        'nodepool "gpu": no instance type has 16 nvidia.com/gpu (largest: 8)'
    )
    assert plan.unschedulable["default/intolerant"].startswith(
        'nodepool "cpu": no instance type has nvidia.com/gpu; '
        'nodepool "gpu": pod does not tolerate taint nvidia.com/gpu=:NoSchedule'
    )
    assert 'nodepool "gpu": no instance type matches joiner.sh/gpu-name In [B200]' in plan.unschedulable["default/b200"]


def test_no_pools_at_all() -> None:
    plan = solve(pods=[pod("a")], node_pools=[])
    assert plan.unschedulable == {"default/a": "no NodePool exists and no existing node has room"}


# --- topology -------------------------------------------------------------------------------


def zones_of(plan: Plan) -> list[str]:
    return sorted(n.choice.zone for n in plan.new_nodes for _ in n.pods)


def test_zonal_spread_balances_pods_across_zones() -> None:
    p = pool("default", CPU_TYPES)
    pending = pods("web", 7, labels={"app": "web"}, spread=[spread(ZONE, "web")])
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    counts = {z: zones_of(plan).count(z) for z in ("zone-a", "zone-b", "zone-c")}
    assert sorted(counts.values()) == [2, 2, 3]


def test_zonal_spread_counts_existing_pods_and_skips_zones_without_capacity() -> None:
    t = itype("c.xlarge", cpu=4, mem_gi=8, price=0.16, zones=("zone-a", "zone-b"))
    p = pool("default", [t])
    bound = [pod(f"old-{i}", labels={"app": "web"}) for i in range(2)]
    existing = [node("n1", zone="zone-a", allocatable=res(cpu="1", memory="1Gi", pods=110), bound=bound)]
    pending = pods("web", 4, labels={"app": "web"}, spread=[spread(ZONE, "web")])
    plan = solve(pods=pending, node_pools=[p], existing_nodes=existing)
    check_plan(plan, pending=pending, pools=[p], existing=existing)
    counts = {z: zones_of(plan).count(z) for z in ("zone-a", "zone-b")}
    assert counts == {"zone-a": 1, "zone-b": 3}  # ends 3 and 3


def test_hostname_spread_caps_pods_per_node() -> None:
    p = pool("default", CPU_TYPES)
    pending = pods("web", 6, labels={"app": "web"}, spread=[spread(HOSTNAME, "web", max_skew=2)])
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert len(plan.new_nodes) == 3


def test_hostname_anti_affinity_puts_each_replica_on_its_own_node() -> None:
    p = pool("default", CPU_TYPES)
    existing = [node("n1", allocatable=res(cpu="8", memory="16Gi", pods=110), bound=[pod("old", labels={"app": "db"})])]
    pending = pods("db", 3, labels={"app": "db"}, anti_affinity=[anti(HOSTNAME, "db")])
    plan = solve(pods=pending, node_pools=[p], existing_nodes=existing)
    check_plan(plan, pending=pending, pools=[p], existing=existing)
    assert len(plan.new_nodes) == 3
    assert not plan.existing_placements


def test_existing_pods_anti_affinity_is_respected_too() -> None:
    p = pool("default", CPU_TYPES)
    loner = pod("loner", labels={"app": "loner"}, anti_affinity=[anti(HOSTNAME, "web")])
    existing = [node("n1", allocatable=res(cpu="8", memory="16Gi", pods=110), bound=[loner])]
    plan = solve(pods=[pod("web-0", labels={"app": "web"})], node_pools=[p], existing_nodes=existing)
    assert not plan.existing_placements
    assert len(plan.new_nodes) == 1


def test_pods_that_take_one_host_port_get_a_node_each() -> None:
    # four small replicas would share one node; kube-scheduler's NodePorts filter lets one a node
    # take TCP/8080, and a pod that takes UDP/8080 or none at all may join them
    p = pool("default", CPU_TYPES)
    web = pods("web", 4, labels={"app": "web"}, host_ports=[HostPort(8080)])
    dns = pods("dns", 4, labels={"app": "dns"}, host_ports=[HostPort(8080, "UDP")])
    batch = pods("batch", 4, labels={"app": "batch"})
    pending = web + dns + batch
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert len(plan.new_nodes) == 4
    for n in plan.new_nodes:
        assert sum(k.startswith("default/web") for k in n.pods) == 1
        assert sum(k.startswith("default/dns") for k in n.pods) == 1
    assert all(len(n.pods) == 1 for n in solve(pods=web, node_pools=[p]).new_nodes)


def test_host_ports_on_two_addresses_share_a_node_and_zero_address_takes_every_address() -> None:
    p = pool("default", CPU_TYPES)
    on_a = pod("on-a", host_ports=[HostPort(53, "UDP", "10.0.0.1")])
    on_b = pod("on-b", host_ports=[HostPort(53, "UDP", "10.0.0.2")])
    plan = solve(pods=[on_a, on_b], node_pools=[p])
    assert len(plan.new_nodes) == 1
    anywhere = pod("any", host_ports=[HostPort(53, "UDP")])
    plan = solve(pods=[on_a, on_b, anywhere], node_pools=[p])
    check_plan(plan, pending=[on_a, on_b, anywhere], pools=[p])
    assert len(plan.new_nodes) == 2


def test_a_host_port_taken_on_an_existing_node_keeps_the_pod_off_it() -> None:
    p = pool("default", CPU_TYPES)
    agent = pod("agent", namespace="kube-system", host_ports=[HostPort(9100)])
    existing = [
        node("n1", allocatable=res(cpu="8", memory="16Gi", pods=110), bound=[agent]),
        node("n2", allocatable=res(cpu="8", memory="16Gi", pods=110), in_flight=True, bound=[agent]),
    ]
    clash = pods("exporter", 2, host_ports=[HostPort(9100)])
    plan = solve(pods=clash, node_pools=[p], existing_nodes=existing)
    check_plan(plan, pending=clash, pools=[p], existing=existing)
    assert not plan.existing_placements
    assert len(plan.new_nodes) == 2
    other = pods("web", 2, host_ports=[HostPort(8080)])
    plan = solve(pods=other, node_pools=[p], existing_nodes=existing)
    assert not plan.new_nodes  # one on each existing node


def test_a_daemonset_that_takes_the_port_keeps_the_pods_off_its_nodes_and_says_so() -> None:
    exporter = daemonset_from_dict(
        {
            "metadata": {"name": "node-exporter", "namespace": "monitoring"},
            "spec": {
                "template": {
                    "spec": {
                        "hostNetwork": True,
                        "nodeSelector": {"joiner.sh/nodepool": "default"},
                        "containers": [{"name": "e", "ports": [{"containerPort": 9100}]}],
                    }
                }
            },
        }
    )
    default, other = pool("default", CPU_TYPES), pool("other", CPU_TYPES[:1])
    clash = pods("metrics", 2, host_ports=[HostPort(9100)])
    plan = solve(pods=clash, node_pools=[default], daemon_pods=[exporter])
    assert not plan.new_nodes
    reason = plan.unschedulable["default/metrics-0"]
    assert (
        reason == 'nodepool "default": host port TCP/9100 is taken on its nodes by the pods of DaemonSet/node-exporter'
    )
    # a pool whose nodes the DaemonSet does not run on takes them, a node each
    plan = solve(pods=clash, node_pools=[default, other], daemon_pods=[exporter])
    check_plan(plan, pending=clash, pools=[default, other], daemons=[exporter])
    assert [n.node_pool for n in plan.new_nodes] == ["other", "other"]
    assert not plan.unschedulable


def test_zonal_anti_affinity_allows_one_per_zone() -> None:
    p = pool("default", CPU_TYPES)
    pending = pods("zk", 4, labels={"app": "zk"}, anti_affinity=[anti(ZONE, "zk")])
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert sorted(zones_of(plan)) == ["zone-a", "zone-b", "zone-c"]
    assert len(plan.unschedulable) == 1
    assert "anti-affinity" in next(iter(plan.unschedulable.values()))


def test_zonal_pod_affinity_follows_the_existing_pod() -> None:
    from controller.scheduling import PodAffinityTerm, label_selector

    p = pool("default", CPU_TYPES)
    existing = [
        node(
            "n1",
            zone="zone-c",
            allocatable=res(cpu="1", memory="1Gi", pods=110),
            bound=[pod("cache", labels={"app": "cache"})],
        )
    ]
    near = PodAffinityTerm(
        topology_key=ZONE, selector=label_selector({"app": "cache"}), namespaces=frozenset({"default"})
    )
    plan = solve(pods=pods("api", 3, affinity=[near]), node_pools=[p], existing_nodes=existing)
    assert set(zones_of(plan)) == {"zone-c"}
    assert not plan.unschedulable
    lonely = PodAffinityTerm(
        topology_key=ZONE, selector=label_selector({"app": "nothing"}), namespaces=frozenset({"default"})
    )
    plan = solve(pods=[pod("x", affinity=[lonely])], node_pools=[p])
    assert "pod affinity" in plan.unschedulable["default/x"]


def test_self_affinity_on_hostname_keeps_replicas_together() -> None:
    from controller.scheduling import PodAffinityTerm, label_selector

    p = pool("default", CPU_TYPES)
    together = PodAffinityTerm(
        topology_key=HOSTNAME, selector=label_selector({"app": "t"}), namespaces=frozenset({"default"})
    )
    plan = solve(
        pods=pods("t", 4, labels={"app": "t"}, affinity=[together], requests=res(cpu="1", memory="1Gi")), node_pools=[p]
    )
    assert len(plan.new_nodes) == 1
    assert len(plan.new_nodes[0].pods) == 4


# --- gangs ----------------------------------------------------------------------------------


def test_gang_is_placed_together_and_tagged() -> None:
    p = pool("gpu", GPU_TYPES, taints=[GPU_TAINT])
    pending = [gpu_pod(f"w-{i}", gpus=8, gang="train") for i in range(4)]
    plan = solve(pods=pending, node_pools=[p], gangs=[Gang("train")])
    check_plan(plan, pending=pending, pools=[p])
    assert len(plan.new_nodes) == 4
    assert all(n.gang == "train" for n in plan.new_nodes)


def test_gang_that_cannot_fully_fit_places_nobody_and_each_member_gets_the_reason() -> None:
    p = pool("gpu", GPU_TYPES, taints=[GPU_TAINT], limits=res(gpu=24))
    pending = [gpu_pod(f"w-{i}", gpus=8, gang="train") for i in range(4)]
    others = [gpu_pod("solo")]
    plan = solve(pods=pending + others, node_pools=[p])
    assert set(plan.unschedulable) == {f"default/w-{i}" for i in range(4)}
    assert set(plan.unschedulable.values()) == {
        "gang 'train': 1 of 4 pods cannot be placed, so none is: "
        'nodepool "gpu": all available instance types exceed limits for nodepool '
        "(nvidia.com/gpu: 24 of 24 in use, the cheapest instance type that fits has 8)"
    }
    assert [n.pods for n in plan.new_nodes] == [("default/solo",)]


def test_gang_nodes_are_not_shared_with_other_pods() -> None:
    p = pool("mixed", CPU_TYPES + GPU_TYPES)
    pending = [gpu_pod("w-0", gang="g"), pod("web", requests=res(cpu="1", memory="1Gi"))]
    plan = solve(pods=pending, node_pools=[p])
    gang_nodes = [n for n in plan.new_nodes if n.gang == "g"]
    assert [n.pods for n in gang_nodes] == [("default/w-0",)]


def test_same_zone_gang_lands_in_one_zone() -> None:
    t = itype("g.8gpu", cpu=96, mem_gi=768, gpu=8, price=7.2, zones=("zone-a", "zone-b", "zone-c"))
    p = pool("gpu", [t], taints=[GPU_TAINT])
    existing = [
        node("busy", zone="zone-a", allocatable=res(cpu="96", memory="768Gi", gpu=8, pods=110), taints=[GPU_TAINT])
    ]
    pending = [gpu_pod(f"w-{i}", gpus=8, gang="g") for i in range(3)]
    plan = solve(pods=pending, node_pools=[p], existing_nodes=existing, gangs=[Gang("g", same_zone=True)])
    zones = {n.choice.zone for n in plan.new_nodes} | {"zone-a" for _ in plan.existing_placements}
    assert len(zones) == 1
    assert not plan.unschedulable


# --- determinism -----------------------------------------------------------------------------


def test_same_input_same_plan_regardless_of_order() -> None:
    p = [pool("mixed", CPU_TYPES + GPU_TYPES)]
    pending = (
        pods("web", 7, labels={"app": "web"}, spread=[spread(ZONE, "web")])
        + pods("db", 3, labels={"app": "db"}, anti_affinity=[anti(HOSTNAME, "db")])
        + [gpu_pod(f"g-{i}") for i in range(3)]
    )
    first = solve(pods=pending, node_pools=p)
    shuffled = list(pending)
    random.Random(3).shuffle(shuffled)
    assert solve(pods=shuffled, node_pools=p) == first
