"""Topology spread and pod (anti-)affinity count every pod their selector matches, whatever its size.

kube-scheduler counts a spread constraint over all pods of the namespace that its labelSelector
matches; pods that differ only in their requests are different groups to the solver, and the
counts must be shared between them.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.scheduling import (
    ExistingNode,
    NodePoolTemplate,
    Plan,
    PodAffinityTerm,
    Requirement,
    Requirements,
    TopologySpread,
    label_selector,
    solve,
)
from controller.scheduling.model import Pod
from hack.bench.checker import check_plan as replay_plan
from hack.bench.karpenter_workload import karpenter_catalog, karpenter_pods, karpenter_pool
from tests.unit.scheduling.builders import (
    HOSTNAME,
    TOLERATE_GPU,
    ZONE,
    ZONES,
    check_plan,
    itype,
    matching_per_domain,
    node,
    pod,
    pool,
    res,
    spread_violations,
)

CPU_TYPES = [
    itype("c.large", cpu=2, mem_gi=4, price=0.08),
    itype("c.xlarge", cpu=4, mem_gi=8, price=0.16),
    itype("c.2xlarge", cpu=8, mem_gi=16, price=0.32),
    itype("c.4xlarge", cpu=16, mem_gi=32, price=0.64),
]
GPU_TYPES = [
    itype("g.1gpu", cpu=8, mem_gi=32, gpu=1, price=1.0),
    itype("g.4gpu", cpu=48, mem_gi=192, gpu=4, price=3.8),
    itype("g.8gpu", cpu=96, mem_gi=768, gpu=8, price=7.2),
]


def zone_spread(value: str, *, max_skew: int = 1, min_domains: int | None = None) -> TopologySpread:
    return TopologySpread(
        topology_key=ZONE, max_skew=max_skew, selector=label_selector({"my-label": value}), min_domains=min_domains
    )


def host_anti(value: str) -> PodAffinityTerm:
    return PodAffinityTerm(
        topology_key=HOSTNAME, selector=label_selector({"my-label": value}), namespaces=frozenset({"default"})
    )


def sized(value: str, cpus: Sequence[int], **kwargs: object) -> list[Pod]:
    """One pod per entry of ``cpus``, labelled ``my-label: value``, each with its own request."""
    return [
        pod(
            f"{value}-{i}",
            labels={"my-label": value},
            requests=res(cpu=c, memory="1Gi"),
            **kwargs,  # type: ignore[arg-type]
        )
        for i, c in enumerate(cpus)
    ]


def per_zone(plan: Plan, pending: Sequence[Pod], value: str, existing: Sequence[ExistingNode] = ()) -> dict[str, int]:
    return matching_per_domain(
        plan,
        pending=pending,
        existing=existing,
        key=ZONE,
        namespace="default",
        selector=label_selector({"my-label": value}),
        domains=ZONES,
    )


def all_zones(pending: Sequence[Pod], zones: Sequence[str] = ZONES) -> dict[str, Sequence[str]]:
    return {p.key: zones for p in pending}


def test_six_pods_of_different_sizes_spread_two_per_zone() -> None:
    p = pool("default", CPU_TYPES)
    pending = sized("a", [1, 2, 3, 4, 5, 6], spread=[zone_spread("a")])
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    assert per_zone(plan, pending, "a") == {"zone-a": 2, "zone-b": 2, "zone-c": 2}
    assert spread_violations(plan, pending=pending, zones=all_zones(pending)) == []


def test_sizes_sharing_a_spread_balance_what_each_zone_buys() -> None:
    p = pool("default", CPU_TYPES)
    pending = sized("a", [1, 2, 3, 4, 5, 6], spread=[zone_spread("a")])
    plan = solve(pods=pending, node_pools=[p])
    cpu = {x.key: x.requests.get("cpu") for x in pending}
    per_zone_cpu = dict.fromkeys(ZONES, 0)
    for n in plan.new_nodes:
        per_zone_cpu[n.choice.zone] += sum(cpu[k] for k in n.pods)
    assert per_zone_cpu == {"zone-a": 7000, "zone-b": 7000, "zone-c": 7000}


def test_two_labels_side_by_side_each_spread_on_its_own() -> None:
    p = pool("default", CPU_TYPES)
    pending = sized("a", [1, 2, 3, 4, 5, 6], spread=[zone_spread("a")]) + sized(
        "b", [6, 5, 4, 3, 2, 1], spread=[zone_spread("b")]
    )
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    assert per_zone(plan, pending, "a") == {"zone-a": 2, "zone-b": 2, "zone-c": 2}
    assert per_zone(plan, pending, "b") == {"zone-a": 2, "zone-b": 2, "zone-c": 2}
    assert spread_violations(plan, pending=pending, zones=all_zones(pending)) == []


def test_spread_with_hostname_anti_affinity_over_different_sizes() -> None:
    p = pool("default", CPU_TYPES)
    pending = sized("a", [1, 2, 3, 4, 5, 6], spread=[zone_spread("a")], anti_affinity=[host_anti("a")])
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    assert per_zone(plan, pending, "a") == {"zone-a": 2, "zone-b": 2, "zone-c": 2}
    assert all(len(n.pods) == 1 for n in plan.new_nodes)
    assert spread_violations(plan, pending=pending, zones=all_zones(pending)) == []


def test_gpu_pods_of_mixed_gpu_counts_spread_across_zones() -> None:
    p = pool("gpu", GPU_TYPES)
    pending = [
        pod(
            f"g-{i}",
            labels={"my-label": "a"},
            requests=res(cpu="2", memory="8Gi", gpu=gpus),
            tolerations=[TOLERATE_GPU],
            spread=[zone_spread("a")],
        )
        for i, gpus in enumerate([1, 2, 4, 1, 2, 4])
    ]
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    assert per_zone(plan, pending, "a") == {"zone-a": 2, "zone-b": 2, "zone-c": 2}
    assert spread_violations(plan, pending=pending, zones=all_zones(pending)) == []


def test_max_skew_two_over_the_two_zones_the_pods_allow() -> None:
    p = pool("default", CPU_TYPES)
    two = Requirements((Requirement.in_(ZONE, "zone-a", "zone-b"),))
    pending = sized("a", [1, 2, 3, 4, 5, 6, 7], spread=[zone_spread("a", max_skew=2)], terms=[two])
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    counts = per_zone(plan, pending, "a")
    assert counts["zone-c"] == 0
    assert abs(counts["zone-a"] - counts["zone-b"]) <= 2
    assert spread_violations(plan, pending=pending, zones=all_zones(pending, ("zone-a", "zone-b"))) == []


def test_existing_nodes_already_holding_matching_pods_count() -> None:
    p = pool("default", CPU_TYPES)
    full = res(cpu="1", memory="1Gi", pods=110)
    existing = [
        node("n1", zone="zone-a", allocatable=full, bound=[pod(f"old-{i}", labels={"my-label": "a"}) for i in (1, 2)]),
        node("n2", zone="zone-b", allocatable=full, bound=[pod("old-3", labels={"my-label": "a"})]),
    ]
    pending = sized("a", [1, 2, 3], spread=[zone_spread("a")])
    plan = solve(pods=pending, node_pools=[p], existing_nodes=existing)
    check_plan(plan, pending=pending, pools=[p], existing=existing)
    assert not plan.unschedulable
    assert per_zone(plan, pending, "a", existing) == {"zone-a": 2, "zone-b": 2, "zone-c": 2}
    assert spread_violations(plan, pending=pending, existing=existing, zones=all_zones(pending)) == []


def test_min_domains_above_the_zone_count_caps_every_zone_across_sizes() -> None:
    p = pool("default", CPU_TYPES)
    pending = sized("a", [1, 2, 3, 4, 5, 6, 7, 8], spread=[zone_spread("a", min_domains=5)])
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert per_zone(plan, pending, "a") == {"zone-a": 1, "zone-b": 1, "zone-c": 1}
    assert len(plan.unschedulable) == 5
    assert spread_violations(plan, pending=pending, zones=all_zones(pending)) == []


def test_hostname_anti_affinity_counts_pods_of_every_size() -> None:
    p = pool("default", CPU_TYPES)
    pending = sized("db", [1, 1, 2, 3], anti_affinity=[host_anti("db")])
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    assert len(plan.new_nodes) == 4


def test_hostname_anti_affinity_counts_running_pods_no_pending_pod_matches() -> None:
    p = pool("default", CPU_TYPES)
    roomy = res(cpu="8", memory="16Gi", pods=110)
    existing = [node("n1", allocatable=roomy, bound=[pod("db-0", labels={"my-label": "db"})])]
    pending = sized("web", [1, 2], anti_affinity=[host_anti("db")])
    plan = solve(pods=pending, node_pools=[p], existing_nodes=existing)
    check_plan(plan, pending=pending, pools=[p], existing=existing)
    assert not plan.existing_placements
    assert sorted(k for n in plan.new_nodes for k in n.pods) == ["default/web-0", "default/web-1"]


def test_zone_anti_affinity_counts_pods_of_every_size() -> None:
    p = pool("default", CPU_TYPES)
    zone_anti = PodAffinityTerm(
        topology_key=ZONE, selector=label_selector({"my-label": "zk"}), namespaces=frozenset({"default"})
    )
    pending = sized("zk", [1, 2, 3, 4], anti_affinity=[zone_anti])
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert len(plan.unschedulable) == 1
    assert sorted(n.choice.zone for n in plan.new_nodes) == list(ZONES)


def test_zone_affinity_follows_a_target_of_another_size() -> None:
    p = pool("default", CPU_TYPES)
    near = PodAffinityTerm(
        topology_key=ZONE, selector=label_selector({"my-label": "cache"}), namespaces=frozenset({"default"})
    )
    pending = sized("cache", [4], selector={ZONE: "zone-b"}) + sized("api", [1, 2, 3], affinity=[near])
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    assert {n.choice.zone for n in plan.new_nodes} == {"zone-b"}


# --- pods the selector matches that carry no spread of their own ------------------------------------


def no_replay_violations(
    plan: Plan, pending: Sequence[Pod], pools: Sequence[NodePoolTemplate], existing: Sequence[ExistingNode] = ()
) -> list[str]:
    """What the benchmark's independent checker (kube-scheduler's rules, every pod judged as the
    last one bound) finds wrong with the plan."""
    return [str(v) for v in replay_plan(pods=pending, plan=plan, node_pools=pools, existing_nodes=existing)]


def test_unconstrained_pods_of_other_sizes_count_for_the_spread() -> None:
    p = pool("default", CPU_TYPES)
    constrained = sized("a", [1, 2, 3], spread=[zone_spread("a")])
    loose = [
        pod(f"loose-{i}", labels={"my-label": "a"}, requests=res(cpu=c, memory="1Gi"))
        for i, c in enumerate([1, 1, 2, 2, 3, 4, 5, 6, 1, 2, 7])
    ]
    pending = constrained + loose
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    assert spread_violations(plan, pending=pending, zones=all_zones(pending)) == []
    assert no_replay_violations(plan, pending, [p]) == []
    counts = per_zone(plan, pending, "a")
    assert sum(counts.values()) == 14
    assert max(counts.values()) - min(counts.values()) <= 1


def test_constrained_pods_whose_own_label_another_spread_counts() -> None:
    """Pods labelled ``a`` that spread over ``b`` (and the reverse) count for each other's spread."""
    p = pool("default", CPU_TYPES)
    pending = (
        sized("a", [1, 2, 3, 4], spread=[zone_spread("b")])
        + [
            pod(f"b-{i}", labels={"my-label": "b"}, requests=res(cpu=c, memory="1Gi"), spread=[zone_spread("a")])
            for i, c in enumerate([2, 3, 5])
        ]
        + [pod(f"x-{i}", labels={"my-label": "a"}, requests=res(cpu=c, memory="1Gi")) for i, c in enumerate([1, 6, 2])]
    )
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    assert spread_violations(plan, pending=pending, zones=all_zones(pending)) == []
    assert no_replay_violations(plan, pending, [p]) == []


def test_existing_nodes_holding_unconstrained_matching_pods_in_one_zone() -> None:
    p = pool("default", CPU_TYPES)
    full = res(cpu="1", memory="1Gi", pods=110)
    existing = [
        node(
            "n1", zone="zone-a", allocatable=full, bound=[pod(f"old-{i}", labels={"my-label": "a"}) for i in range(5)]
        ),
        node("n2", zone="zone-b", allocatable=full),
    ]
    constrained = sized("a", [1, 2, 3, 4, 5, 6], spread=[zone_spread("a")])
    loose = [
        pod(f"loose-{i}", labels={"my-label": "a"}, requests=res(cpu=c, memory="1Gi")) for i, c in enumerate([1, 2])
    ]
    pending = constrained + loose
    plan = solve(pods=pending, node_pools=[p], existing_nodes=existing)
    check_plan(plan, pending=pending, pools=[p], existing=existing)
    assert not plan.unschedulable
    assert spread_violations(plan, pending=pending, existing=existing, zones=all_zones(pending)) == []
    assert no_replay_violations(plan, pending, [p], existing) == []
    zone_of = {k: n.choice.zone for n in plan.new_nodes for k in n.pods}
    assert all(zone_of[x.key] != "zone-a" for x in constrained)
    assert per_zone(plan, pending, "a", existing)["zone-a"] == 5


def test_hostname_spread_counts_unconstrained_pods_joining_the_node() -> None:
    p = pool("default", CPU_TYPES)
    host = TopologySpread(topology_key=HOSTNAME, max_skew=1, selector=label_selector({"my-label": "a"}))
    constrained = sized("a", [1, 1, 2], spread=[host])
    loose = [pod(f"loose-{i}", labels={"my-label": "a"}, requests=res(cpu="500m", memory="512Mi")) for i in range(6)]
    pending = constrained + loose
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    assert spread_violations(plan, pending=pending, zones=all_zones(pending)) == []
    assert no_replay_violations(plan, pending, [p]) == []
    for n in plan.new_nodes:
        if any(x.key in n.pods for x in constrained):
            assert sum(1 for k in n.pods if k.startswith(("default/a-", "default/loose-"))) == 1


def test_karpenter_benchmark_mix_at_small_scale_keeps_every_constraint() -> None:
    p = karpenter_pool(karpenter_catalog(24))
    pending = karpenter_pods(150)
    plan = solve(pods=pending, node_pools=[p])
    assert not plan.unschedulable
    assert no_replay_violations(plan, pending, [p]) == []


# --- property: the final plan never breaks maxSkew, whatever the mix of sizes -----------------------

SETTINGS = settings(
    max_examples=int(os.environ.get("SOLVER_PROPERTY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def spread_worlds(
    draw: st.DrawFn,
) -> tuple[list[Pod], list[NodePoolTemplate], list[ExistingNode], dict[str, list[str]]]:
    """Pods of mixed sizes (some with GPUs), in one or two namespaces, sharing one or two zonal
    spread selectors (maybe with a hostname spread or hostname anti-affinity too), one NodePool
    whose instance types each host any of the pods, offerings in random zones, maybe existing or
    in-flight nodes that already run matching pods. Returns (pods, pools, existing nodes, eligible
    zones per pod)."""
    return spread_world(random.Random(draw(st.integers(0, 2**32))))


@st.composite
def spread_worlds_with_unconstrained(
    draw: st.DrawFn,
) -> tuple[list[Pod], list[NodePoolTemplate], list[ExistingNode], dict[str, list[str]]]:
    """`spread_worlds`, plus pods the selectors match that carry no spread constraint."""
    return spread_world(random.Random(draw(st.integers(0, 2**32))), unconstrained=True)


def spread_world(
    rng: random.Random,
    *,
    unconstrained: bool = False,
) -> tuple[list[Pod], list[NodePoolTemplate], list[ExistingNode], dict[str, list[str]]]:
    types = []
    for i, (cpu, mem, gpus, price) in enumerate(
        [(16, 64, 0, 0.6), (32, 128, 0, 1.1), (48, 192, 4, 4.6), (96, 768, 8, 9)]
    ):
        zones = tuple(sorted(rng.sample(ZONES, rng.randint(1, 3))))
        types.append(itype(f"t{i}", cpu=cpu, mem_gi=mem, gpu=gpus, price=price, zones=zones))
    gpu_only = rng.random() < 0.4
    if gpu_only:
        types = [t for t in types if "nvidia.com/gpu" in t.capacity] or types[2:]
    pools = [pool("general", types)]
    offered = sorted({o.zone for t in types for o in t.offerings})
    values = ["a", "b"][: rng.randint(1, 2)]
    constraint = {
        v: zone_spread(v, max_skew=rng.choice([1, 1, 2]), min_domains=rng.choice([None, None, 2, 4])) for v in values
    }
    with_anti = rng.random() < 0.25
    host_skew = rng.choice([None, None, 1, 2])
    namespaces = ["default", "other"][: rng.choice([1, 1, 2])]
    existing: list[ExistingNode] = []
    for i in range(rng.randint(0, 3)):
        bound = [pod(f"old-{i}-{j}", labels={"my-label": rng.choice(values)}) for j in range(rng.randint(0, 3))]
        existing.append(
            node(
                f"n{i}",
                zone=rng.choice(offered),
                allocatable=res(cpu=rng.choice([1, 4]), memory="8Gi", pods=110),
                bound=bound,
                in_flight=rng.random() < 0.3,
            )
        )
    pending: list[Pod] = []
    for i in range(rng.randint(1, 14)):
        v = rng.choice(values)
        requests = res(cpu=rng.choice([1, 2, 3, 4, 6]), memory=f"{rng.choice([1, 2, 4])}Gi")
        gpus = rng.choice([1, 2, 4]) if gpu_only else 0
        if gpus:
            requests = requests + res(gpu=gpus)
        pending.append(
            pod(
                f"p{i}",
                namespace=rng.choice(namespaces),
                labels={"my-label": v},
                requests=requests,
                tolerations=[TOLERATE_GPU] if gpus else [],
                spread=[constraint[v]]
                + (
                    [
                        TopologySpread(
                            topology_key=HOSTNAME, max_skew=host_skew, selector=label_selector({"my-label": v})
                        )
                    ]
                    if host_skew is not None
                    else []
                ),
                anti_affinity=[host_anti(v)] if with_anti else [],
            )
        )
    eligible = sorted(set(offered) | {e.labels[ZONE] for e in existing})
    eligible_zones = {p.key: eligible for p in pending}
    if unconstrained:
        # pods the selectors match that carry no spread of their own, of any size, maybe more of them
        for i in range(rng.randint(1, 20)):
            requests = res(cpu=rng.choice([1, 2, 3, 4, 6]), memory=f"{rng.choice([1, 2, 4])}Gi")
            gpus = rng.choice([1, 2, 4]) if gpu_only else 0
            if gpus:
                requests = requests + res(gpu=gpus)
            pending.append(
                pod(
                    f"u{i}",
                    namespace=rng.choice(namespaces),
                    labels={"my-label": rng.choice(values)},
                    requests=requests,
                    tolerations=[TOLERATE_GPU] if gpus else [],
                )
            )
    return pending, pools, existing, eligible_zones


@SETTINGS
@given(spread_worlds())
def test_spread_over_pods_of_mixed_sizes_never_breaks_max_skew(
    world: tuple[list[Pod], list[NodePoolTemplate], list[ExistingNode], dict[str, list[str]]],
) -> None:
    pending, pools, existing, zones = world
    plan = solve(pods=pending, node_pools=pools, existing_nodes=existing)
    check_plan(plan, pending=pending, pools=pools, existing=existing)
    assert spread_violations(plan, pending=pending, existing=existing, zones=zones) == []


@SETTINGS
@given(spread_worlds_with_unconstrained())
def test_spread_counts_matching_pods_without_a_spread_of_their_own(
    world: tuple[list[Pod], list[NodePoolTemplate], list[ExistingNode], dict[str, list[str]]],
) -> None:
    pending, pools, existing, zones = world
    plan = solve(pods=pending, node_pools=pools, existing_nodes=existing)
    check_plan(plan, pending=pending, pools=pools, existing=existing)
    assert spread_violations(plan, pending=pending, existing=existing, zones=zones) == []
    assert no_replay_violations(plan, pending, pools, existing) == []


@settings(
    max_examples=int(os.environ.get("SOLVER_PROPERTY_EXAMPLES", "60")) // 4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.integers(10, 90), st.integers(0, 2**31), st.integers(6, 20))
def test_karpenter_benchmark_mix_keeps_every_constraint(count: int, seed: int, types: int) -> None:
    """Karpenter's benchmark mix (zone and hostname spread, zone self-affinity, hostname
    anti-affinity, all sharing labels with unconstrained pods), random draws: nothing is broken."""
    p = karpenter_pool(karpenter_catalog(types))
    pending = karpenter_pods(count, seed=seed)
    plan = solve(pods=pending, node_pools=[p])
    assert not plan.unschedulable
    assert no_replay_violations(plan, pending, [p]) == []


def test_zone_self_affinity_pods_the_spread_counts_are_placed_before_the_quotas() -> None:
    """Pods bound to one zone by their pod affinity stay there; the spread balances around them."""
    p = pool("default", CPU_TYPES)
    together = PodAffinityTerm(
        topology_key=ZONE, selector=label_selector({"my-label": "a"}), namespaces=frozenset({"default"})
    )
    stay = [
        pod(f"stay-{i}", labels={"my-label": "a"}, requests=res(cpu=c, memory="1Gi"), affinity=[together])
        for i, c in enumerate([1, 2, 3, 1])
    ]
    constrained = sized("a", [1, 2, 3, 4, 5, 6], spread=[zone_spread("a")])
    pending = stay + constrained
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    assert spread_violations(plan, pending=pending, zones=all_zones(pending)) == []
    assert no_replay_violations(plan, pending, [p]) == []
    assert len({n.choice.zone for n in plan.new_nodes if any(k.startswith("default/stay-") for k in n.pods)}) == 1


# --- spread over a label the machine decides (capacity type, a NodePool's label) ----------------

CAPACITY = "joiner.sh/capacity-type"
SPOT_TYPES = [itype(f"s.{c}", cpu=c, mem_gi=2 * c, price=0.04 * c, spot=0.012 * c) for c in (2, 4, 8, 16)]


def capacity_spread(value: str, max_skew: int = 1) -> TopologySpread:
    return TopologySpread(topology_key=CAPACITY, max_skew=max_skew, selector=label_selector({"my-label": value}))


def by_capacity(plan: Plan, pending: Sequence[Pod], existing: Sequence[ExistingNode] = ()) -> dict[str, int]:
    """Pods labelled ``my-label: a`` per capacity type once the plan is carried out."""
    by_key = {p.key: p for p in pending}
    counts: dict[str, int] = {}
    for e in existing:
        hosted = [*e.pods, *(by_key[k] for k in plan.existing_placements.get(e.name, ()))]
        n = sum(1 for q in hosted if q.labels.get("my-label") == "a")
        counts[e.labels[CAPACITY]] = counts.get(e.labels[CAPACITY], 0) + n
    for c in plan.new_nodes:
        n = sum(1 for k in c.pods if by_key[k].labels.get("my-label") == "a")
        counts[c.choice.capacity_type] = counts.get(c.choice.capacity_type, 0) + n
    return {k: v for k, v in counts.items() if v}


def test_a_spread_over_spot_and_on_demand_buys_both_not_only_the_cheaper() -> None:
    p = pool("default", SPOT_TYPES)
    pending = sized("a", [1, 2, 3, 1, 2, 3], spread=[capacity_spread("a")])
    plan = solve(pods=pending, node_pools=[p])
    check_plan(plan, pending=pending, pools=[p])
    assert not plan.unschedulable
    assert by_capacity(plan, pending) == {"on-demand": 3, "spot": 3}
    assert no_replay_violations(plan, pending, [p]) == []


def test_pods_already_running_on_one_capacity_type_count_and_a_pods_own_choice_leaves_one_domain() -> None:
    p = pool("default", SPOT_TYPES)
    running = [pod(f"old-{i}", labels={"my-label": "a"}, requests=res(cpu="1", memory="1Gi")) for i in range(3)]
    existing = [
        node("od-1", allocatable=res(cpu="4", memory="8Gi", pods=110), labels={CAPACITY: "on-demand"}, bound=running)
    ]
    pending = sized("a", [1, 1, 1, 1, 1], spread=[capacity_spread("a")])
    plan = solve(pods=pending, node_pools=[p], existing_nodes=existing)
    counts = by_capacity(plan, pending, existing)
    assert counts == {"on-demand": 4, "spot": 4}
    assert no_replay_violations(plan, pending, [p], existing) == []
    # pods that choose spot themselves have one domain: nothing to deal, all on spot
    spot_only = sized("a", [1, 1, 1, 1], spread=[capacity_spread("a")], selector={CAPACITY: "spot"})
    plan = solve(pods=spot_only, node_pools=[p])
    assert {n.choice.capacity_type for n in plan.new_nodes} == {"spot"}


def test_a_spread_over_a_nodepool_label_deals_the_pods_over_the_pools_that_give_it() -> None:
    rack = "example.com/rack"
    pools = [
        NodePoolTemplate(name=f"rack-{r}", instance_types=tuple(CPU_TYPES), labels={rack: r}) for r in ("r1", "r2")
    ]
    spread = TopologySpread(topology_key=rack, max_skew=1, selector=label_selector({"my-label": "a"}))
    pending = sized("a", [1, 1, 1, 1, 2, 2], spread=[spread])
    plan = solve(pods=pending, node_pools=pools)
    assert not plan.unschedulable
    per_pool = {p.name: sum(len(n.pods) for n in plan.new_nodes if n.node_pool == p.name) for p in pools}
    assert per_pool == {"rack-r1": 3, "rack-r2": 3}
    assert no_replay_violations(plan, pending, pools) == []


@st.composite
def capacity_worlds(draw: st.DrawFn) -> tuple[list[Pod], list[NodePoolTemplate], list[ExistingNode]]:
    rng = random.Random(draw(st.integers(0, 2**32)))
    pools = [pool("default", rng.sample(SPOT_TYPES, rng.randint(2, 4)))]
    existing = []
    for i in range(rng.randint(0, 2)):
        kind = rng.choice(["spot", "on-demand"])
        bound = [pod(f"old-{i}-{j}", labels={"my-label": "a"}) for j in range(rng.randint(0, 3))]
        existing.append(
            node(f"n{i}", allocatable=res(cpu="2", memory="4Gi", pods=110), labels={CAPACITY: kind}, bound=bound)
        )
    pending: list[Pod] = []
    skew = rng.randint(1, 2)
    for g in range(rng.randint(1, 3)):  # kinds of different sizes share the label and the spread
        cpus = [rng.choice([1, 2, 3]) for _ in range(rng.randint(1, 6))]
        for i, c in enumerate(cpus):
            kwargs: dict[str, object] = {"labels": {"my-label": "a"}, "requests": res(cpu=c, memory="1Gi")}
            if g or rng.random() < 0.8:  # the first kind may be counted without a spread of its own
                kwargs["spread"] = [capacity_spread("a", skew)]
            pending.append(pod(f"a{g}-{i}", **kwargs))  # type: ignore[arg-type]
    return pending, pools, existing


@SETTINGS
@given(capacity_worlds())
def test_a_spread_over_the_capacity_type_never_breaks_max_skew(
    world: tuple[list[Pod], list[NodePoolTemplate], list[ExistingNode]],
) -> None:
    pending, pools, existing = world
    plan = solve(pods=pending, node_pools=pools, existing_nodes=existing)
    check_plan(plan, pending=pending, pools=pools, existing=existing)
    assert not plan.unschedulable
    assert no_replay_violations(plan, pending, pools, existing) == []


def test_pods_affine_over_the_capacity_type_land_on_one_or_where_their_peers_run() -> None:
    p = pool("default", SPOT_TYPES)
    together = PodAffinityTerm(
        topology_key=CAPACITY, selector=label_selector({"my-label": "a"}), namespaces=frozenset({"default"})
    )
    pending = sized("a", [5, 5, 5, 5, 5], affinity=[together])  # more than one node: every node on one value
    plan = solve(pods=pending, node_pools=[p])
    assert not plan.unschedulable
    assert len(plan.new_nodes) > 1
    assert {n.choice.capacity_type for n in plan.new_nodes} == {"spot"}  # the cheaper, for all of them
    assert no_replay_violations(plan, pending, [p]) == []
    # a peer already running on an on-demand node: they join it there
    peer = pod("peer", labels={"my-label": "a"}, requests=res(cpu="1", memory="1Gi"))
    existing = [
        node("od", allocatable=res(cpu="2", memory="4Gi", pods=110), labels={CAPACITY: "on-demand"}, bound=[peer])
    ]
    plan = solve(pods=pending, node_pools=[p], existing_nodes=existing)
    assert not plan.unschedulable
    assert {n.choice.capacity_type for n in plan.new_nodes} == {"on-demand"}
    assert no_replay_violations(plan, pending, [p], existing) == []
