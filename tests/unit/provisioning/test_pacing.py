"""Pacing the pods of crossed zonal spreads (`controller.provisioning.pacing`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from controller.provisioning.pacing import Pacer, Rule, breaks, crossed_rules
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


def _pacer(*, holds: bool = False) -> tuple[Pacer, dict[str, Pod]]:
    """Two zones. Crossed: x1 (z1), x2 (z2) labelled a, spread over b; y1 (z1), y2 (z2) labelled b,
    spread over a. Pods only counted: a1 (z1), b1 (z1), b2 (z2). Without ``holds``, the pacing
    alone: no spread's counted pods are held."""
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
    if not holds:
        pacer.breaks = []
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


TWO = (("x", "a", "b"), ("y", "b", "a"), ("ma", "a", None), ("mb", "b", None))
# three spreads in a cycle: a over b, b over c, c over a
THREE = (("x", "a", "b"), ("y", "b", "c"), ("w", "c", "a"), ("ma", "a", None), ("mb", "b", None), ("mc", "c", None))


def _crossed(
    per_zone: int, kinds: tuple[tuple[str, str, str | None], ...] = TWO
) -> tuple[dict[str, Pod], dict[str, str]]:
    """In each of two zones, ``per_zone`` of each kind (name, label, the label its spread counts):
    by default x (labelled a, spread over b), y (labelled b, spread over a), and pods labelled a and
    b with no spread. Every count is even in the end."""
    pods: dict[str, Pod] = {}
    zones: dict[str, str] = {}
    for i in range(per_zone):
        for zone in ZONES:
            for kind, label, over in kinds:
                name = f"{kind}{i}{zone}"
                pods[f"default/{name}"] = pod(name, label, *([spread(over)] if over else []))
                zones[f"default/{name}"] = zone
    return pods, zones


def _kube_scheduler(pods: Mapping[str, Pod], zones: Mapping[str, str], order: list[str], pacer: Pacer | None) -> bool:
    return _rounds(pods, zones, order, pacer) is not None


def _rounds(pods: Mapping[str, Pod], zones: Mapping[str, str], order: list[str], pacer: Pacer | None) -> int | None:
    """The pods told (all, or as ``pacer`` allows, looked at in ``order``), and kube-scheduler binding
    each told pod it tries, in ``order``, when its spreads hold over the pods bound so far, until
    nothing moves. The rounds it took to bind every pod, or None when some were left (a round: all
    the telling allows without another bind is told, then kube-scheduler tries every told pod once,
    as its back-off lets a refused pod try again only after a while)."""
    bound: dict[str, set[str]] = {z: set() for z in ZONES}
    told: set[str] = set()
    moved = True
    rounds = 0
    while moved:
        moved = False
        rounds += 1
        telling = True
        while telling:  # the nominator looks at a held pod again every half second: no bind needed
            telling = False
            for key in order:
                if key not in told and (pacer is None or _allows(pacer, key, bound, told, pods)):
                    told.add(key)
                    telling = moved = True
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
    return rounds - 1 if sum(len(v) for v in bound.values()) == len(pods) else None


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


def test_with_a_hold_the_crossed_pods_bind_in_a_few_rounds_whatever_their_number() -> None:
    """Paced alone, a zone takes one more crossed pod of a kind only once one is bound there: the
    rounds grow with the pods (6 at 3 a zone, 10-11 at 6). With one spread's counted pods held while its
    own are bound, every pod binds, in any order, in a few rounds however many there are: two for two
    crossed spreads, three or four for three in a cycle."""
    import random

    rng = random.Random(11)
    for per_zone, kinds in ((3, TWO), (6, TWO), (3, THREE), (6, THREE)):
        pods, zones = _crossed(per_zone, kinds)
        held = Pacer.of(pods, zones)
        alone = Pacer.of(pods, zones)
        assert held is not None
        assert alone is not None
        assert len(held.breaks) == 1
        alone.breaks = []
        worst_held = worst_alone = 0
        for _ in range(25):
            order = sorted(pods)
            rng.shuffle(order)
            with_hold, without = _rounds(pods, zones, order, held), _rounds(pods, zones, order, alone)
            assert with_hold is not None, order
            assert without is not None, order
            worst_held, worst_alone = max(worst_held, with_hold), max(worst_alone, without)
        # two spreads: the held spread's own pods, then the pods it held; three: four at most
        assert worst_held <= (2 if kinds is TWO else 4), per_zone
        assert worst_alone >= per_zone, per_zone  # what the hold is for


def test_a_hold_holds_the_pods_its_spread_counts_until_its_own_are_bound_and_makes_those_sure() -> None:
    pacer, pods = _pacer(holds=True)
    # the spread over a counts three pods (x1, x2, a1), the one over b four: the a pods are held
    assert [r.selector for r in pacer.breaks] == [label_selector({"my-label": "a"})]
    nothing: dict[str, set[str]] = {}
    for key in ("default/x1", "default/x2", "default/a1"):
        assert not _allows(pacer, key, nothing, set(), pods)
    # the y pods (spread over a) bind against counts that stay put: told, they are sure to come
    tally = pacer.tally(bound=lambda _rule: Counter(), waiting=lambda _key: True, told={"default/y2"})
    assert tally.holding == set(pacer.breaks)
    assert pacer.sure(tally, "default/y2")
    # and the spread over b, whose own pods (x1, x2) the hold keeps back, paces nothing meanwhile:
    # z1 may take its second b pod with nothing told in z2 (paced alone, it could not)
    assert _allows(pacer, "default/y1", nothing, {"default/b1"}, pods)
    assert not _allows(_pacer()[0], "default/y1", nothing, {"default/b1"}, pods)
    # once every y pod is bound, the a pods are told together
    bound = {"z1": {"default/y1", "default/b1"}, "z2": {"default/y2", "default/b2"}}
    for key in ("default/x1", "default/x2", "default/a1"):
        assert _allows(pacer, key, bound, set(), pods)


def test_a_hold_is_not_kept_when_the_counts_it_would_freeze_refuse_its_own_pods() -> None:
    """Two a pods bound in z1 that no plan placed: the y pod planned in z1 could not bind until a
    pods bind in z2, so the a pods are paced as without a hold, not held."""
    pacer, pods = _pacer(holds=True)
    extra = {"default/e1": pod("e1", "a"), "default/e2": pod("e2", "a")}
    everything = {**pods, **extra}
    bound = {"z1": {"default/e1", "default/e2"}, "z2": set[str]()}
    assert _allows(pacer, "default/x2", bound, set(), everything)  # z2 catches up
    assert not _allows(pacer, "default/x1", bound, set(), everything)  # z1 is ahead already


def test_breaks_leave_no_cycle_and_no_hold_waits_on_another() -> None:
    """Three spreads in a cycle: one is held. Two cycles apart: one in each. A spread counting its
    own pods as well as the others' is never held (its hold would wait on its own pods)."""

    def rule(name: str) -> Rule:
        return Rule("default", label_selector({"r": name}), 1)

    r1, r2, r3, r4, r5 = (rule(str(i)) for i in range(1, 6))
    owners = {r1: {"o1"}, r2: {"o2"}, r3: {"o3"}, r4: {"o4"}, r5: {"o5"}}
    # r1 counts r2's pods, r2 r3's, r3 r1's; r4 and r5 each other's
    counted = {r1: {"o2", "p"}, r2: {"o3"}, r3: {"o1", "q", "s"}, r4: {"o5"}, r5: {"o4", "t"}}
    chosen = breaks([r1, r2, r3, r4, r5], owners, counted)
    assert chosen == [r2, r4]  # the fewest counted on each cycle
    # a spread counting its own pods too is passed over for the other on its cycle
    assert breaks([r4, r5], owners, {r4: {"o5", "o4"}, r5: {"o4", "t", "u"}}) == [r5]
    assert breaks([r4, r5], owners, {r4: {"o5", "o4"}, r5: {"o4", "o5"}}) == []


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


def test_which_spreads_wait_on_which_is_the_same_as_comparing_every_pair() -> None:
    """`crossed_rules` compares a selector only with the spreads whose pods carry a value it
    requires (hundreds of Deployments spread over their own pods: one look each); on random pods and
    selectors of every operator, namespaces and label sets apart, it finds what comparing every
    spread with every other's pods finds."""
    import random

    from controller.provisioning.pacing import _waits
    from controller.scheduling.requirements import Requirement, Requirements

    rng = random.Random(5)
    values = ("a", "b", "c", "d")
    for _ in range(200):
        pods = []
        for i in range(rng.randint(2, 14)):
            labels = {k: rng.choice(values) for k in ("my-label", "team") if rng.random() < 0.8}
            reqs = []
            for key in rng.sample(("my-label", "team"), rng.randint(1, 2)):
                op = rng.choice(("In", "In", "NotIn", "Exists", "DoesNotExist"))
                vals = rng.sample(values, rng.randint(1, 2)) if op in ("In", "NotIn") else []
                reqs.append(Requirement.new(key, op, vals))
            rule = TopologySpread(topology_key=LABEL_ZONE, max_skew=1, selector=Requirements(reqs))
            ns = rng.choice(("default", "team-b"))
            pods.append(
                Pod(name=f"p{i}", namespace=ns, requests=Resources.parse({"cpu": "1"}), labels=labels, spread=(rule,))
            )
        _crossed_found, owners = crossed_rules(pods)
        rules = list(owners)
        pairwise = {r: {o for o in rules if o != r and any(r.counts(p) for p in owners[o])} for r in rules}
        assert _waits(rules, owners) == pairwise
