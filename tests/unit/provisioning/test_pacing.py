"""Pacing the pods of crossed zonal spreads (`controller.provisioning.pacing`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from controller.provisioning.pacing import Pacer, Rule, crossed_rules
from controller.scheduling import Resources, label_selector
from controller.scheduling.labels import LABEL_ZONE
from controller.scheduling.model import Pod, TopologySpread

ZONES = ("z1", "z2")


def spread(value: str, *, key: str = LABEL_ZONE, skew: int = 1) -> TopologySpread:
    return TopologySpread(topology_key=key, max_skew=skew, selector=label_selector({"my-label": value}))


def pod(name: str, label: str, *spreads: TopologySpread) -> Pod:
    return Pod(name=name, requests=Resources.parse({"cpu": "1"}), labels={"my-label": label}, spread=spreads)


def test_spreads_that_count_each_others_pods_are_crossed_and_one_that_counts_its_own_is_not() -> None:
    x = pod("x", "a", spread("b"))  # labelled a, spread over the b pods
    y = pod("y", "b", spread("a"))  # labelled b, spread over the a pods
    own = pod("web", "c", spread("c"))  # its own replicas
    other = pod("d", "d", spread("b"))  # spread over b, counted by nobody: waits on the cycle, not in it
    rules, owners = crossed_rules([x, y, own, other])
    assert {r.selector for r in rules} == {label_selector({"my-label": "a"}), label_selector({"my-label": "b"})}
    assert len(owners) == 3  # b (x and d), a (y), c (web)
    assert crossed_rules([own, pod("web-2", "c", spread("c"))])[0] == []
    # a spread over the hostname is not a zonal one
    assert crossed_rules([pod("x", "a", spread("b", key="kubernetes.io/hostname")), y])[0] == []


def _pacer() -> tuple[Pacer, dict[str, Pod]]:
    """Two zones. Crossed: x1 (z1), x2 (z2) labelled a, spread over b; y1 (z1), y2 (z2) labelled b,
    spread over a. Pods only counted: a1 (z1), b1 (z1), b2 (z2)."""
    pods = {
        "default/x1": pod("x1", "a", spread("b")),
        "default/x2": pod("x2", "a", spread("b")),
        "default/y1": pod("y1", "b", spread("a")),
        "default/y2": pod("y2", "b", spread("a")),
        "default/a1": pod("a1", "a"),
        "default/b1": pod("b1", "b"),
        "default/b2": pod("b2", "b"),
    }
    zones = {k: ("z1" if k.endswith("1") else "z2") for k in pods}
    pacer = Pacer.of(pods, zones)
    assert pacer is not None
    return pacer, pods


def test_the_pods_crossed_spreads_count_are_paced_and_no_other() -> None:
    pacer, _pods = _pacer()
    assert set(pacer.counted) == {
        "default/x1",
        "default/x2",
        "default/y1",
        "default/y2",
        "default/a1",
        "default/b1",
        "default/b2",
    }
    assert Pacer.of({"default/w": pod("w", "c", spread("c"))}, {"default/w": "z1"}) is None


def _allows(pacer: Pacer, key: str, bound: Mapping[str, set[str]], told: set[str], pods: Mapping[str, Pod]) -> bool:
    """``bound``: zone -> pod keys bound there."""

    def counts(rule: Rule) -> Counter[str]:
        return Counter({z: sum(1 for k in keys if rule.counts(pods[k])) for z, keys in bound.items()})

    done = {k for keys in bound.values() for k in keys}
    tally = pacer.tally(bound=counts, waiting=lambda k: k not in done, told=told - {key})
    return pacer.turn(tally, key)


def test_a_pod_is_told_only_while_its_zone_stays_within_max_skew_where_the_spreads_pods_wait() -> None:
    pacer, pods = _pacer()
    nothing: dict[str, set[str]] = {}
    # b1 told in z1: b counts z1 1, z2 0 -- within maxSkew 1 of z2, where x2 waits: fine
    assert _allows(pacer, "default/b1", nothing, set(), pods)
    # a second b pod told in z1 would put z1 two ahead while x1 waits there: not yet
    assert not _allows(pacer, "default/y1", nothing, {"default/b1"}, pods)
    # ... but in z2 it may go
    assert _allows(pacer, "default/b2", nothing, {"default/b1"}, pods)
    # once b2 is bound in z2, z1 may take its second b pod
    assert _allows(pacer, "default/y1", {"z1": {"default/b1"}, "z2": {"default/b2"}}, set(), pods)
    # ... or once b2 is told: it carries no spread, nothing keeps it from binding
    assert _allows(pacer, "default/y1", nothing, {"default/b1", "default/b2"}, pods)
    # but not when what was told in z2 is y2, which waits on the a counts itself
    assert not _allows(pacer, "default/y1", nothing, {"default/b1", "default/y2"}, pods)


def test_a_zone_where_none_of_the_spreads_pods_wait_is_not_held_back() -> None:
    pacer, pods = _pacer()
    # x1 and x2 (spread over b) bound: nothing waits on the b counts any more
    bound = {"z1": {"default/x1", "default/b1", "default/y1"}, "z2": {"default/x2"}}
    assert _allows(pacer, "default/b2", bound, set(), pods)


def _crossed(per_zone: int) -> tuple[dict[str, Pod], dict[str, str]]:
    """In each of two zones, ``per_zone`` each of: x (labelled a, spread over b), y (labelled b,
    spread over a), and pods labelled a and b with no spread. Every count is even in the end."""
    pods: dict[str, Pod] = {}
    zones: dict[str, str] = {}
    for i in range(per_zone):
        for zone in ZONES:
            for kind, label, over in (("x", "a", "b"), ("y", "b", "a"), ("ma", "a", None), ("mb", "b", None)):
                name = f"{kind}{i}{zone}"
                pods[f"default/{name}"] = pod(name, label, *([spread(over)] if over else []))
                zones[f"default/{name}"] = zone
    return pods, zones


def _kube_scheduler(pods: Mapping[str, Pod], zones: Mapping[str, str], order: list[str], pacer: Pacer | None) -> bool:
    """The pods told (all, or as ``pacer`` allows, looked at in ``order``), and kube-scheduler binding
    each told pod it tries, in ``order``, when its spreads hold over the pods bound so far, until
    nothing moves. Whether every pod was bound."""
    bound: dict[str, set[str]] = {z: set() for z in ZONES}
    told: set[str] = set()
    moved = True
    while moved:
        moved = False
        for key in order:
            if key not in told and (pacer is None or _allows(pacer, key, bound, told, pods)):
                told.add(key)
                moved = True
        for key in order:
            zone = zones[key]
            if key not in told or key in bound[zone]:
                continue
            fits = True
            for s in pods[key].spread:
                counts = {z: sum(1 for k in bound[z] if s.selects(pods[k].labels)) for z in ZONES}
                own = 1 if s.selects(pods[key].labels) else 0
                fits = fits and counts[zone] + own - min(counts.values()) <= s.max_skew
            if fits:
                bound[zone].add(key)
                moved = True
    return sum(len(v) for v in bound.values()) == len(pods)


def test_paced_crossed_pods_all_bind_in_any_order_kube_scheduler_tries_them() -> None:
    """Told all at once, kube-scheduler binding in its own order leaves crossed pods where neither
    spread lets them go (here in about one order of five); told as the pacer allows, every pod is
    bound, whatever the order (a crossed pod told may wait for pods that are sure to bind, never
    for another crossed one)."""
    import random

    pods, zones = _crossed(3)
    pacer = Pacer.of(pods, zones)
    assert pacer is not None
    rng = random.Random(7)
    stuck = 0
    for trial in range(300):
        order = sorted(pods)
        rng.shuffle(order)
        if trial % 3 == 1:  # the pods the spreads only count first, as their Nodes open
            order.sort(key=lambda k: 0 if k.split("/")[1].startswith("m") else 1)
        elif trial % 3 == 2:  # or last
            order.sort(key=lambda k: 1 if k.split("/")[1].startswith("m") else 0)
        assert _kube_scheduler(pods, zones, order, pacer), order
        stuck += not _kube_scheduler(pods, zones, order, None)
    assert stuck > 0  # the case the pacer is for


def test_a_plans_pacer_knows_the_zone_of_every_pending_pod_new_or_keeping_its_place() -> None:
    """`pacer_of` reads each pending pod's zone from the plan: on a new NodeClaim, placed on a node
    or NodeClaim already there, or keeping its place on an in-flight one (a pod an earlier decision
    placed, counted in that NodeClaim's pods); bound pods are not paced."""
    from controller.provisioning.provisioner import pacer_of
    from controller.scheduling import solve
    from tests.unit.scheduling.builders import itype, node, pool, res

    types = [itype("m", cpu=4, mem_gi=16, price=1.0, zones=ZONES)]
    crossed = [
        *[pod(f"x{i}", "a", spread("b")) for i in range(4)],
        *[pod(f"y{i}", "b", spread("a")) for i in range(4)],
        *[pod(f"m{i}", "a") for i in range(2)],
    ]
    held = pod("y-held", "b", spread("a"))  # planned by an earlier decision on the in-flight NodeClaim
    done = pod("x-done", "a", spread("b"))  # bound there already
    flight = node(
        "race-1", allocatable=res(cpu="4", memory="16Gi", pods=110), zone="z2", in_flight=True, bound=[held, done]
    )
    plan = solve(pods=crossed, node_pools=[pool("race", types)], existing_nodes=[flight])
    pending = {p.key: p for p in [*crossed, held]}
    pacer = pacer_of(plan, crossed, [flight], pending)
    assert pacer is not None
    for p in crossed:
        assert pacer.zone_of[p.key] == plan_zone(plan, p.key, {"race-1": "z2"})
    assert pacer.zone_of[held.key] == "z2"
    assert held.key in pacer.counted  # it counts for the b spread where it waits
    assert done.key not in pacer.counted
    assert pacer_of(plan, crossed[-2:], [flight], {p.key: p for p in crossed[-2:]}) is None  # no spreads: none


def plan_zone(plan: Any, key: str, existing: Mapping[str, str]) -> str:
    for n in plan.new_nodes:
        if key in n.pods:
            return str(n.choice.zone)
    for name, keys in plan.existing_placements.items():
        if key in keys:
            return existing[name]
    raise AssertionError(f"{key} not placed")
