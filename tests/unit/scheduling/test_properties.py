"""Property tests: on random small worlds every plan is valid, honest, all-or-nothing and stable."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.scheduling import (
    ExistingNode,
    Gang,
    HostPort,
    InstanceType,
    NodePoolTemplate,
    Plan,
    Pod,
    Requirement,
    Requirements,
    SolveCache,
    first_untolerated,
    solve,
)
from controller.scheduling.resources import ONE_POD
from controller.scheduling.solver_candidates import CandidateTypes
from tests.unit.scheduling.builders import (
    GPU_TAINT,
    HOSTNAME,
    TOLERATE_GPU,
    ZONE,
    ZONES,
    anti,
    check_plan,
    daemon_overhead,
    itype,
    node,
    pod,
    pool,
    res,
    spread,
)

SETTINGS = settings(
    # SOLVER_PROPERTY_EXAMPLES=5000 for a long soak; the default keeps the suite fast
    max_examples=int(os.environ.get("SOLVER_PROPERTY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SHAPES = [  # (cpu, memory GiB, gpus, gpu name, on-demand price)
    (2, 4, 0, None, 0.08),
    (4, 16, 0, None, 0.19),
    (8, 16, 0, None, 0.30),
    (16, 64, 0, None, 0.80),
    (8, 32, 1, "L4", 0.98),
    (16, 64, 1, "A10G", 1.60),
    (48, 192, 4, "L4", 4.60),
    (96, 768, 8, "H100", 55.0),
]


@dataclass
class World:
    pods: list[Pod]
    pools: list[NodePoolTemplate]
    existing: list[ExistingNode]
    daemons: list[Pod]
    unavailable: set[tuple[str, str, str]]
    gangs: list[Gang]


@st.composite
def worlds(draw: st.DrawFn, *, with_limits: bool = False, with_topology: bool = True) -> World:
    rng = random.Random(draw(st.integers(0, 2**32)))
    shapes = rng.sample(SHAPES, rng.randint(2, 5))
    types: list[InstanceType] = []
    for i, (cpu, mem, gpus, name, price) in enumerate(shapes):
        zones = tuple(sorted(rng.sample(ZONES, rng.randint(1, 3))))
        spot = round(price * rng.uniform(0.3, 0.7), 4) if rng.random() < 0.5 else None
        types.append(itype(f"t{i}", cpu=cpu, mem_gi=mem, gpu=gpus, gpu_name=name, price=price, zones=zones, spot=spot))
    unavailable: set[tuple[str, str, str]] = set()
    for t in types:
        for o in t.offerings:
            if rng.random() < 0.15:
                unavailable.add((t.name, o.zone, o.capacity_type))
    pools = [pool("general", types, limits=res(cpu=rng.choice([8, 24, 64])) if with_limits else None)]
    if rng.random() < 0.5:
        pools.append(
            pool(
                "gpu",
                types,
                weight=rng.choice([0, 10]),
                taints=[GPU_TAINT],
                requirements=[Requirement.new("joiner.sh/gpu-count", "Exists")],
                limits=res(gpu=rng.choice([1, 4, 8])) if with_limits else None,
            )
        )
    existing = []
    for i in range(rng.randint(0, 2)):
        ports = [HostPort(9100)] if with_topology and rng.random() < 0.3 else []
        bound = [pod(f"old-{i}", labels={"app": "old"}, requests=res(cpu="1", memory="1Gi"), host_ports=ports)]
        existing.append(
            node(
                f"n{i}",
                zone=rng.choice(ZONES),
                allocatable=res(cpu=rng.choice([2, 4]), memory="8Gi", pods=110),
                bound=bound,
                in_flight=rng.random() < 0.3,
                unschedulable=rng.random() < 0.2,
            )
        )
    daemons = [pod("ds", requests=res(cpu="100m", memory="128Mi"))] if rng.random() < 0.5 else []
    if with_topology and rng.random() < 0.2:  # a node agent on the host network
        daemons.append(pod("agent", requests=res(cpu="50m", memory="64Mi"), host_ports=[HostPort(9100)]))
    pods: list[Pod] = []
    gangs: list[Gang] = []
    for g in range(rng.randint(1, 5)):
        count = rng.randint(1, 5)
        app = f"app{g}"
        gpus = rng.choice([0, 0, 0, 1, 1, 2, 8])
        requests = res(cpu=rng.choice(["250m", "1", "2", "3"]), memory=rng.choice(["512Mi", "2Gi", "6Gi"]))
        if gpus:
            requests = requests + res(gpu=gpus)
        kwargs: dict[str, object] = {"labels": {"app": app}, "requests": requests}
        if gpus or rng.random() < 0.2:
            kwargs["tolerations"] = [TOLERATE_GPU]
        roll = rng.random()
        if roll < 0.15:
            kwargs["selector"] = {ZONE: rng.choice(ZONES)}
        elif roll < 0.25 and gpus:
            kwargs["selector"] = {"joiner.sh/gpu-name": rng.choice(["L4", "A10G", "H100"])}
        elif roll < 0.3:
            kwargs["terms"] = [Requirements((Requirement.new("joiner.sh/gpu-count", "DoesNotExist"),))]
        if with_topology:
            kind = rng.random()
            if kind < 0.15:
                kwargs["spread"] = [spread(ZONE, app)]
            elif kind < 0.25:
                kwargs["spread"] = [spread(HOSTNAME, app, max_skew=rng.randint(1, 2))]
            elif kind < 0.35:
                kwargs["anti_affinity"] = [anti(HOSTNAME, app)]
            elif kind < 0.4:
                kwargs["anti_affinity"] = [anti(ZONE, app)]
        if with_topology and rng.random() < 0.2:  # kube-scheduler's NodePorts filter
            kwargs["host_ports"] = [HostPort(rng.choice([8080, 9100]), rng.choice(["TCP", "UDP"]))]
        if rng.random() < 0.15:
            gang = f"gang{g}"
            kwargs["gang"] = gang
            gangs.append(Gang(gang, same_zone=rng.random() < 0.5))
        pods.extend(pod(f"{app}-{i}", **kwargs) for i in range(count))  # type: ignore[arg-type]
    return World(pods, pools, existing, daemons, unavailable, gangs)


def run(world: World) -> Plan:
    return solve(
        pods=world.pods,
        node_pools=world.pools,
        existing_nodes=world.existing,
        daemon_pods=world.daemons,
        unavailable=world.unavailable,
        gangs=world.gangs,
    )


def fits_somewhere_alone(world: World, p: Pod) -> bool:
    """Brute force: some pool, instance type and offering could host this pod on a fresh node."""
    for np in world.pools:
        if first_untolerated(p.tolerations, np.taints) is not None:
            continue
        for it in np.instance_types:
            for o in it.offerings:
                if not o.available or (it.name, o.zone, o.capacity_type) in world.unavailable:
                    continue
                labels = {**it.labels, ZONE: o.zone, "joiner.sh/capacity-type": o.capacity_type}
                if not np.requirements.matches({**labels, "joiner.sh/nodepool": np.name}):
                    continue
                if p.node_requirements and not any(t.matches(labels) for t in p.node_requirements):
                    continue
                need = p.requests + ONE_POD + daemon_overhead(world.daemons, np, labels)
                if need.fits_in(it.allocatable):
                    return True
    return False


@SETTINGS
@given(worlds())
def test_every_plan_is_valid(world: World) -> None:
    plan = run(world)
    check_plan(
        plan,
        pending=world.pods,
        pools=world.pools,
        existing=world.existing,
        daemons=world.daemons,
        unavailable=world.unavailable,
    )


@SETTINGS
@given(worlds(with_limits=True))
def test_limits_are_never_exceeded(world: World) -> None:
    plan = run(world)
    check_plan(plan, pending=world.pods, pools=world.pools, existing=world.existing, daemons=world.daemons)
    for np in world.pools:
        types = {t.name: t for t in np.instance_types}
        for name, limit in np.limits.items:
            used = sum(
                types[n.choice.instance_type].capacity.get(name) for n in plan.new_nodes if n.node_pool == np.name
            )
            assert used <= limit, f"{np.name} exceeds its {name} limit"


@SETTINGS
@given(worlds(with_topology=False))
def test_unschedulable_pods_fit_nowhere(world: World) -> None:
    plan = run(world)
    by_key = {p.key: p for p in world.pods}
    for key, reason in plan.unschedulable.items():
        p = by_key[key]
        assert reason
        if p.gang is None:
            assert not fits_somewhere_alone(world, p), f"{key} was refused ({reason}) but fits a fresh node"


@SETTINGS
@given(worlds())
def test_gangs_are_all_or_nothing(world: World) -> None:
    plan = run(world)
    for gang in world.gangs:
        members = [p.key for p in world.pods if p.gang == gang.id]
        refused = [k for k in members if k in plan.unschedulable]
        assert not refused or len(refused) == len(members), f"gang {gang.id} partly placed"
        if not refused and gang.same_zone:
            zones = {n.choice.zone for n in plan.new_nodes if set(n.pods) & set(members)}
            for name, keys in plan.existing_placements.items():
                if set(keys) & set(members):
                    zones.add(next(e.labels[ZONE] for e in world.existing if e.name == name))
            assert len(zones) <= 1, f"gang {gang.id} spans zones {zones}"
        for n in plan.new_nodes:
            if set(n.pods) & set(members):
                assert n.gang == gang.id
                assert set(n.pods) <= set(members), "gang nodes are the gang's alone"


@SETTINGS
@given(worlds(), st.randoms(use_true_random=False))
def test_same_input_same_plan(world: World, shuffle: random.Random) -> None:
    first = run(world)
    assert run(world) == first
    shuffled = list(world.pods)
    shuffle.shuffle(shuffled)
    world.pods = shuffled
    assert run(world) == first


@SETTINGS
@given(worlds())
def test_zonal_spread_stays_within_max_skew(world: World) -> None:
    plan = run(world)
    zone_of: dict[str, str] = {}
    for n in plan.new_nodes:
        for k in n.pods:
            zone_of[k] = n.choice.zone
    for name, keys in plan.existing_placements.items():
        for k in keys:
            zone_of[k] = next(e.labels[ZONE] for e in world.existing if e.name == name)
    groups: dict[str, list[Pod]] = {}
    for p in world.pods:
        if any(sc.topology_key == ZONE for sc in p.spread):
            groups.setdefault(p.labels["app"], []).append(p)
    for members in groups.values():
        if any(m.key in plan.unschedulable for m in members):
            continue
        counts: dict[str, int] = {}
        for m in members:
            counts[zone_of[m.key]] = counts.get(zone_of[m.key], 0) + 1
        assert max(counts.values()) - min(counts.values()) <= 1


@SETTINGS
@given(worlds(), st.randoms(use_true_random=False))
def test_a_shared_cache_never_changes_a_plan(world: World, rng: random.Random) -> None:
    """Consolidation solves many variants of one world with one SolveCache: each variant's plan must be
    the plan it gets alone."""
    cache = SolveCache()
    for _ in range(3):
        existing = [e for e in world.existing if rng.random() < 0.7]
        pods = [p for p in world.pods if rng.random() < 0.8]
        kwargs = {
            "pods": pods,
            "node_pools": world.pools,
            "existing_nodes": existing,
            "daemon_pods": world.daemons,
            "unavailable": world.unavailable,
            "gangs": world.gangs,
        }
        assert solve(**kwargs, cache=cache) == solve(**kwargs)  # type: ignore[arg-type]


@st.composite
def ladders(draw: st.DrawFn) -> World:
    """Karpenter's benchmark in small: a ladder of instance types that differ only in size and price
    (so simulations of one can be replayed on a bigger one), pods of many sizes, some with zonal or
    hostname spread, hostname anti-affinity or a zone selector."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    zones = tuple(sorted(rng.sample(ZONES, rng.randint(1, 3))))
    types = [
        itype(
            f"l{i}",
            cpu=i,
            mem_gi=2 * i,
            price=round(0.05 * i * rng.uniform(0.9, 1.1), 4),
            zones=zones,
            spot=round(0.02 * i, 4) if rng.random() < 0.3 else None,
            pods=rng.choice([4, 8, 110]),
        )
        for i in range(1, rng.randint(3, 12))
    ]
    pods: list[Pod] = []
    for g in range(rng.randint(1, 12)):
        app = f"app{rng.randint(0, 3)}"
        kwargs: dict[str, object] = {
            "labels": {"app": app},
            "requests": res(
                cpu=rng.choice(["100m", "250m", "500m", "1", "1500m"]), memory=rng.choice(["256Mi", "1Gi", "3Gi"])
            ),
        }
        kind = rng.random()
        if kind < 0.2:
            kwargs["spread"] = [spread(ZONE, app)]
        elif kind < 0.35:
            kwargs["spread"] = [spread(HOSTNAME, app, max_skew=rng.randint(1, 2))]
        elif kind < 0.5:
            kwargs["anti_affinity"] = [anti(HOSTNAME, f"solo{g}")]
            kwargs["labels"] = {"app": f"solo{g}"}
        elif kind < 0.6:
            kwargs["selector"] = {ZONE: rng.choice(ZONES)}
        pods.extend(pod(f"g{g}-{i}", **kwargs) for i in range(rng.randint(1, 6)))  # type: ignore[arg-type]
    daemons = [pod("ds", requests=res(cpu="100m", memory="128Mi"))] if rng.random() < 0.3 else []
    return World(pods, [pool("general", types)], [], daemons, set(), [])


@SETTINGS
@given(st.one_of(worlds(), ladders()))
def test_replaying_simulations_on_twins_never_changes_a_plan(world: World) -> None:
    """Simulations replayed on a roomier twin slot (`NodeChoice._replay`) give the plan that
    simulating every candidate gives."""
    with mock.patch.object(CandidateTypes, "_build_twins", return_value=None):
        simulated = run(world)
    assert run(world) == simulated
