"""A plan in the order kube-scheduler binds it: NodeClaims written zone by zone in turn, and the pods
of a kind a topology spread counts dealt to their places in the order kube-scheduler tries them.

kube-scheduler counts a spread over the pods bound so far, one bind at a time, in its own order.
The check here replays that: every planned Node open, the pods tried once each in rank order, a
try refused when it would put its domain more than ``maxSkew`` ahead of the emptiest one. Dealt in
order, every pod binds on its first try; dealt as the solver leaves them (zone after zone), most
of a zone's pods are refused until the other zones catch up, and each refusal is a status write
and a back-off of up to 10 s on a real cluster."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scheduling import Plan, Pod, solve
from controller.scheduling.binding_order import deal_in_order, interleave_zones
from tests.unit.scheduling.builders import CAPACITY_TYPE, HOSTNAME, ZONE, ZONES, itype, node, pod, pool, res, spread


def in_binding_order(plan: Plan, pods: Sequence[Pod], existing: Mapping[str, Mapping[str, str]] | None = None) -> Plan:
    """What the provisioner does with a plan; ``pods`` are in the order kube-scheduler tries them."""
    order = {p.key: i for i, p in enumerate(pods)}
    plan = Plan(
        new_nodes=tuple(interleave_zones(plan.new_nodes)),
        existing_placements=plan.existing_placements,
        unschedulable=plan.unschedulable,
        total_price=plan.total_price,
    )
    return deal_in_order(plan, {p.key: p for p in pods}, order.__getitem__, existing=existing)


def refused_tries(plan: Plan, pods: Sequence[Pod], existing: Mapping[str, Mapping[str, str]] | None = None) -> int:
    """kube-scheduler's tries, in the pods' order, that a spread refuses with every planned Node open."""
    where: dict[str, dict[str, str]] = {}  # pod -> its node's labels (the hostname: the node)
    for name, keys in plan.existing_placements.items():
        for k in keys:
            where[k] = {**(existing or {})[name], HOSTNAME: name}
    for n in plan.new_nodes:
        for k in n.pods:
            where[k] = {ZONE: n.choice.zone, CAPACITY_TYPE: n.choice.capacity_type, HOSTNAME: n.name}
    bound: dict[tuple[str, str], Counter[str]] = {}  # (key, app) -> count per domain
    refused = 0
    for p in pods:
        labels = where[p.key]
        ok = True
        for sp in p.spread:
            counts = bound.setdefault((sp.topology_key, p.labels["app"]), Counter())
            low = min(counts[node[sp.topology_key]] for node in where.values())
            ok = ok and counts[labels[sp.topology_key]] + 1 - low <= sp.max_skew
        if not ok:
            refused += 1
            continue
        for sp in p.spread:
            bound[(sp.topology_key, p.labels["app"])][labels[sp.topology_key]] += 1
    return refused


def per_node_kinds(plan: Plan, pods: Sequence[Pod]) -> dict[str, Counter[tuple[object, ...]]]:
    by_key = {p.key: p for p in pods}
    out = {n.name: Counter(by_key[k].scheduling_key() for k in n.pods) for n in plan.new_nodes}
    out |= {name: Counter(by_key[k].scheduling_key() for k in keys) for name, keys in plan.existing_placements.items()}
    return out


TYPES = [
    itype("small", cpu=4, mem_gi=16, price=0.2),
    itype("large", cpu=16, mem_gi=64, price=0.8),
]


def web(count: int, *, max_skew: int = 1, key: str = ZONE, cpu: str = "1") -> list[Pod]:
    return [
        pod(
            f"web-{i}",
            requests=res(cpu=cpu, memory="1Gi"),
            labels={"app": "web"},
            spread=[spread(key, "web", max_skew)],
        )
        for i in range(count)
    ]


def test_a_zone_spread_binds_every_pod_on_its_first_try_once_dealt_in_order() -> None:
    pods = web(60)
    plan = solve(pods=pods, node_pools=[pool("p", TYPES)])
    assert refused_tries(plan, pods) > 20  # the solver's dealing: zone after zone
    dealt = in_binding_order(plan, pods)
    assert refused_tries(dealt, pods) == 0
    # the kube-scheduler's first pods go round the zones, and the first of a zone to its first Node
    zones = {k: n.choice.zone for n in dealt.new_nodes for k in n.pods}
    assert [zones[p.key] for p in pods[:6]] == [zones[pods[0].key], zones[pods[1].key], zones[pods[2].key]] * 2
    assert len({zones[p.key] for p in pods[:3]}) == 3
    # what is bought and how many pods of a kind go where is the plan's
    assert [(n.name, n.choice, len(n.pods)) for n in sorted(dealt.new_nodes, key=lambda n: n.name)] == [
        (n.name, n.choice, len(n.pods)) for n in sorted(plan.new_nodes, key=lambda n: n.name)
    ]
    assert per_node_kinds(dealt, pods) == per_node_kinds(plan, pods)


def test_within_a_zone_the_first_pods_tried_go_to_the_first_node_written() -> None:
    pods = web(60)
    dealt = in_binding_order(solve(pods=pods, node_pools=[pool("p", TYPES)]), pods)
    order = {p.key: i for i, p in enumerate(pods)}
    for zone in ZONES:
        nodes = [n for n in dealt.new_nodes if n.choice.zone == zone]
        assert len(nodes) > 1
        ranks = [sorted(order[k] for k in n.pods) for n in nodes]
        assert all(a[-1] < b[0] for a, b in itertools.pairwise(ranks)), ranks


def test_nodeclaims_are_written_zone_by_zone_in_turn() -> None:
    plan = solve(pods=web(60), node_pools=[pool("p", TYPES)])
    zones = [n.choice.zone for n in plan.new_nodes]
    assert zones == sorted(zones)  # the solver opens them zone after zone
    written = [n.choice.zone for n in interleave_zones(plan.new_nodes)]
    per_zone = len(written) // 3
    assert written[:3] == written[3:6]
    assert len(set(written[:3])) == 3
    assert Counter(written) == Counter(zones) == dict.fromkeys(ZONES, per_zone)


def test_a_spread_over_the_nodes_deals_the_nodes_in_turn() -> None:
    pods = web(30, key=HOSTNAME, cpu="500m")
    plan = solve(pods=pods, node_pools=[pool("p", TYPES)])
    dealt = in_binding_order(plan, pods)
    assert refused_tries(dealt, pods) == 0
    assert per_node_kinds(dealt, pods) == per_node_kinds(plan, pods)


def test_kinds_without_a_spread_keep_the_solvers_dealing_and_share_nodes_with_those_that_move() -> None:
    spread_pods = web(24)
    plain = [pod(f"api-{i}", requests=res(cpu="1", memory="2Gi"), labels={"app": "api"}) for i in range(24)]
    pods = [p for pair in zip(plain, spread_pods, strict=True) for p in pair]
    plan = Plan(
        new_nodes=tuple(interleave_zones(solve(pods=pods, node_pools=[pool("p", TYPES)]).new_nodes)),
        existing_placements={},
        unschedulable={},
        total_price=0.0,
    )
    dealt = in_binding_order(plan, pods)
    plain_keys = {p.key for p in plain}
    for before, after in zip(plan.new_nodes, dealt.new_nodes, strict=True):
        assert [k for k in before.pods if k in plain_keys] == [k for k in after.pods if k in plain_keys]
    assert refused_tries(dealt, spread_pods) == 0
    assert per_node_kinds(dealt, pods) == per_node_kinds(plan, pods)


def test_room_on_existing_nodes_is_dealt_first_then_the_nodeclaims() -> None:
    open_now = {
        "n-a": node("n-a", allocatable=res(cpu=4, memory="16Gi", pods=110), zone="zone-a"),
        "n-b": node("n-b", allocatable=res(cpu=4, memory="16Gi", pods=110), zone="zone-b"),
        "n-c": node("n-c", allocatable=res(cpu=4, memory="16Gi", pods=110), zone="zone-c"),
    }
    pods = web(30)
    plan = solve(pods=pods, node_pools=[pool("p", TYPES)], existing_nodes=list(open_now.values()))
    labels = {name: n.labels for name, n in open_now.items()}
    assert sum(len(v) for v in plan.existing_placements.values()) == 12
    dealt = in_binding_order(plan, pods, existing=labels)
    assert refused_tries(dealt, pods, labels) == 0
    first = {k for keys in dealt.existing_placements.values() for k in keys}
    assert first == {p.key for p in pods[:12]}


def test_a_spread_over_spot_and_on_demand_deals_the_capacity_types_in_turn() -> None:
    """A spread on the capacity type: its domains are what the NodeClaims were bought as, which the
    plan knows before any Node exists (here two spot and two on-demand machines, four pods each)."""
    pods = web(16, key=CAPACITY_TYPE, cpu="900m")
    solved = solve(pods=pods, node_pools=[pool("p", [itype("small", cpu=4, mem_gi=16, price=0.2, zones=["zone-a"])])])
    assert [len(n.pods) for n in solved.new_nodes] == [4, 4, 4, 4]
    bought = [
        replace(n.choice, capacity_type=t)
        for n, t in zip(solved.new_nodes, ["spot", "spot", "on-demand", "on-demand"], strict=True)
    ]
    plan = replace(solved, new_nodes=tuple(replace(n, choice=c) for n, c in zip(solved.new_nodes, bought, strict=True)))
    assert refused_tries(plan, pods) > 0
    dealt = in_binding_order(plan, pods)
    assert refused_tries(dealt, pods) == 0
    kinds = {k: n.choice.capacity_type for n in dealt.new_nodes for k in n.pods}
    assert [kinds[p.key] for p in pods[:4]] == ["spot", "on-demand", "spot", "on-demand"]
    assert per_node_kinds(dealt, pods) == per_node_kinds(plan, pods)


def test_a_plan_without_spread_constraints_is_returned_as_it_is() -> None:
    pods = [pod(f"api-{i}", requests=res(cpu="1", memory="2Gi")) for i in range(20)]
    plan = solve(pods=pods, node_pools=[pool("p", TYPES)])
    assert deal_in_order(plan, {p.key: p for p in pods}, lambda k: k) is plan


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from(["250m", "500m", "1", "2", "3"]), min_size=1, max_size=3),
    counts=st.lists(st.integers(1, 40), min_size=3, max_size=3),
    max_skew=st.integers(1, 3),
    key=st.sampled_from([ZONE, HOSTNAME]),
    shuffle=st.randoms(use_true_random=False),
)
def test_any_dealing_keeps_the_plan_and_binds_each_spread_pod_on_its_first_try(
    sizes: list[str], counts: list[int], max_skew: int, key: str, shuffle: object
) -> None:
    pods: list[Pod] = []
    for i, cpu in enumerate(sizes):
        app = f"app{i}"
        pods += [
            pod(
                f"{app}-{j}",
                requests=res(cpu=cpu, memory="1Gi"),
                labels={"app": app},
                spread=[spread(key, app, max_skew)] if i % 2 == 0 else [],
            )
            for j in range(counts[i])
        ]
    shuffle.shuffle(pods)  # type: ignore[attr-defined]
    plan = solve(pods=pods, node_pools=[pool("p", TYPES)])
    dealt = in_binding_order(plan, pods)
    assert per_node_kinds(dealt, pods) == per_node_kinds(plan, pods)
    assert sorted(k for n in dealt.new_nodes for k in n.pods) == sorted(k for n in plan.new_nodes for k in n.pods)
    assert {n.name: n.choice for n in dealt.new_nodes} == {n.name: n.choice for n in plan.new_nodes}
    assert refused_tries(dealt, [p for p in pods if p.spread]) == 0
