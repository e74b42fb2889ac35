"""The benchmark plan checker (hack/bench/checker.py): hand-made plans that break each rule, and
plans that keep them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from controller.scheduling import (
    ExistingNode,
    HostPort,
    InstanceChoice,
    InstanceType,
    NewNodeClaim,
    NodePoolTemplate,
    Offering,
    Plan,
    Pod,
    PodAffinityTerm,
    Requirement,
    Requirements,
    Resources,
    Taint,
    Toleration,
    TopologySpread,
    label_selector,
)
from controller.scheduling.kubeconv import pod_from_dict
from hack.bench.checker import Violation, check_plan, summarize

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
ZONES = ("a", "b", "c")
GPU_TAINT = Taint(key="nvidia.com/gpu", effect="NoSchedule")


def _offerings(price: float) -> tuple[Offering, ...]:
    return tuple(Offering(zone=z, capacity_type=ct, price=price) for z in ZONES for ct in ("spot", "on-demand"))


SMALL = InstanceType(
    name="small", capacity=Resources.parse({"cpu": "4", "memory": "8Gi", "pods": "10"}), offerings=_offerings(0.1)
)
BIG = InstanceType(
    name="big", capacity=Resources.parse({"cpu": "32", "memory": "64Gi", "pods": "100"}), offerings=_offerings(0.8)
)
GPU = InstanceType(
    name="gpu",
    capacity=Resources.parse({"cpu": "8", "memory": "32Gi", "pods": "20", "nvidia.com/gpu": "1"}),
    labels={"joiner.sh/gpu-name": "L4", "joiner.sh/gpu-count": "1"},
    offerings=_offerings(1.0),
)
CPU_POOL = NodePoolTemplate(name="cpu", instance_types=(SMALL, BIG))
GPU_POOL = NodePoolTemplate(name="gpu", instance_types=(GPU,), taints=(GPU_TAINT,))
POOLS = (CPU_POOL, GPU_POOL)


def _pod(name: str, cpu: str = "1", **kw: Any) -> Pod:
    extra = kw.pop("requests", {})
    return Pod(name=name, requests=Resources.parse({"cpu": cpu, "memory": "1Gi", **extra}), **kw)


def _claim(
    name: str, pods: Sequence[Pod], *, it: InstanceType = SMALL, zone: str = "a", pool: str = "cpu"
) -> NewNodeClaim:
    price = next(o.price for o in it.offerings if o.zone == zone and o.capacity_type == "on-demand")
    return NewNodeClaim(
        name=name,
        index=0,
        node_pool=pool,
        pods=tuple(p.key for p in pods),
        requests=Resources(),
        requirements=Requirements(),
        candidates=(),
        choice=InstanceChoice(instance_type=it.name, zone=zone, capacity_type="on-demand", price=price),
        taints=(GPU_TAINT,) if pool == "gpu" else (),
    )


def _existing(name: str, zone: str, pods: Sequence[Pod] = (), **kw: Any) -> ExistingNode:
    return ExistingNode(
        name=name,
        allocatable=Resources.parse({"cpu": "4", "memory": "8Gi", "pods": "10"}),
        labels={ZONE: zone, HOST: name, "joiner.sh/nodepool": "cpu"},
        pods=tuple(pods),
        **kw,
    )


def _check(
    pods: Sequence[Pod],
    claims: Sequence[NewNodeClaim] = (),
    *,
    existing: Sequence[ExistingNode] = (),
    placements: Mapping[str, tuple[str, ...]] | None = None,
    daemons: Sequence[Pod] = (),
    unschedulable: Mapping[str, str] | None = None,
) -> list[Violation]:
    plan = Plan(
        new_nodes=tuple(claims), existing_placements=dict(placements or {}), unschedulable=dict(unschedulable or {})
    )
    return check_plan(pods=pods, plan=plan, node_pools=POOLS, existing_nodes=existing, daemon_pods=daemons)


def _rules(violations: Sequence[Violation]) -> list[str]:
    return sorted(v.rule for v in violations)


# --- plan bookkeeping ---------------------------------------------------------------------------


def test_a_plan_that_keeps_every_rule_has_no_violation() -> None:
    pods = [_pod(f"p{i}") for i in range(3)]
    assert _check(pods, [_claim("n1", pods)]) == []
    assert summarize([]) == "0"


def test_pods_left_out_placed_twice_or_unknown_are_plan_violations() -> None:
    a, b, c = _pod("a"), _pod("b"), _pod("c")
    found = _check([a, b, c], [_claim("n1", [a, b]), _claim("n2", [a])], unschedulable={})
    assert _rules(found) == ["plan", "plan"]  # c left out, a placed twice
    assert _check([a], [_claim("n1", [a])], unschedulable={}) == []
    assert _check([a, c], [_claim("n1", [a])], unschedulable={"default/c": "too big"}) == []
    stray = _check([a], [_claim("n1", [a, b])])
    assert [v.pod for v in stray] == ["default/b"]


def test_a_claim_with_an_offering_the_pool_does_not_have_is_a_plan_violation() -> None:
    a = _pod("a")
    wrong_pool = _claim("n1", [a], it=GPU)  # gpu is not in the cpu pool
    assert _rules(_check([a], [wrong_pool])) == ["plan", "plan"]  # bad claim, so the pod is placed nowhere
    bad_price = dataclasses.replace(_claim("n1", [a]), choice=InstanceChoice("small", "a", "on-demand", 9.9))
    assert _rules(_check([a], [bad_price])) == ["plan"]


# --- resources --------------------------------------------------------------------------------


def test_cpu_over_allocatable_is_a_fit_violation() -> None:
    pods = [_pod(f"p{i}", "1500m") for i in range(3)]  # 4.5 CPU on a 4-CPU node
    found = _check(pods, [_claim("n1", pods)])
    assert _rules(found) == ["fit"]
    assert "cpu" in found[0].reason
    assert _check(pods[:2], [_claim("n1", pods[:2])]) == []


def test_the_pod_count_and_gpus_are_resources_too() -> None:
    pods = [_pod(f"p{i}", "100m", requests={"memory": "10Mi"}) for i in range(11)]  # 11 pods, 10 slots
    assert _rules(_check(pods, [_claim("n1", pods)])) == ["fit"]
    gpu_tol = (Toleration(key="nvidia.com/gpu", operator="Exists"),)
    g = [_pod(f"g{i}", requests={"nvidia.com/gpu": "1"}, tolerations=gpu_tol) for i in range(2)]
    found = _check(g, [_claim("n1", g, it=GPU, pool="gpu")])
    assert _rules(found) == ["fit"]
    assert "nvidia.com/gpu" in found[0].reason
    assert _check(g[:1], [_claim("n1", g[:1], it=GPU, pool="gpu")]) == []


def test_daemonset_pods_and_bound_pods_take_room() -> None:
    pods = [_pod("p0", "3")]
    assert _check(pods, [_claim("n1", pods)]) == []
    daemon = _pod("ds", "1500m")
    assert _rules(_check(pods, [_claim("n1", pods)], daemons=[daemon])) == ["fit"]
    # a daemonset that does not tolerate the GPU taint does not run on (or take room of) GPU nodes
    tol = (Toleration(key="nvidia.com/gpu", operator="Exists"),)
    g = [_pod("g", "7", tolerations=tol)]
    assert _check(g, [_claim("n1", g, it=GPU, pool="gpu")], daemons=[daemon]) == []
    node = _existing("e1", "a", pods=[_pod("old", "2")])
    assert _rules(_check(pods, existing=[node], placements={"e1": ("default/p0",)})) == ["fit"]


def test_two_pods_taking_one_host_port_on_a_node_is_a_host_ports_violation() -> None:
    web = [_pod(f"w{i}", host_ports=(HostPort(8080),)) for i in range(2)]
    assert _rules(_check(web, [_claim("n1", web)])) == ["host-ports", "host-ports"]
    assert _check(web, [_claim("n1", web[:1]), _claim("n2", web[1:])]) == []
    # another protocol, or two different addresses, share the port; 0.0.0.0 is every address
    udp = [_pod("u", host_ports=(HostPort(8080, "UDP"),))]
    assert _check(web[:1] + udp, [_claim("n1", web[:1] + udp)]) == []
    on_a, on_b = (_pod(n, host_ports=(HostPort(8080, ip=ip),)) for n, ip in (("a", "10.0.0.1"), ("b", "10.0.0.2")))
    assert _check([on_a, on_b], [_claim("n1", [on_a, on_b])]) == []
    assert _rules(_check([on_a, web[0]], [_claim("n1", [on_a, web[0]])])) == ["host-ports", "host-ports"]
    # a DaemonSet's pod on the new node, and a pod bound to an existing one, take theirs first
    daemon = _pod("exporter", "100m", host_ports=(HostPort(8080),))
    found = _check(web[:1], [_claim("n1", web[:1])], daemons=[daemon])
    assert _rules(found) == ["host-ports"]
    assert "TCP/8080 is taken by default/exporter" in found[0].reason
    node = _existing("e1", "a", pods=[_pod("old", "1", host_ports=(HostPort(8080, ip="10.0.0.9"),))])
    assert _rules(_check(web[:1], existing=[node], placements={"e1": ("default/w0",)})) == ["host-ports"]
    assert _check([on_a], existing=[node], placements={"e1": ("default/a",)}) == []


# --- node affinity and taints -------------------------------------------------------------------


def test_node_selector_against_the_new_nodes_labels() -> None:
    in_b = (Requirements((Requirement.in_(ZONE, "b"),)),)
    pod = _pod("p", node_requirements=in_b)
    assert _rules(_check([pod], [_claim("n1", [pod], zone="a")])) == ["node-affinity"]
    assert _check([pod], [_claim("n1", [pod], zone="b")]) == []
    by_type = (Requirements((Requirement.in_("node.kubernetes.io/instance-type", "big"),)),)
    pod = _pod("q", node_requirements=by_type)
    assert _rules(_check([pod], [_claim("n1", [pod])])) == ["node-affinity"]
    by_pool = (
        Requirements(
            (Requirement.in_("joiner.sh/nodepool", "cpu"), Requirement.in_("joiner.sh/capacity-type", "on-demand"))
        ),
    )
    pod = _pod("r", node_requirements=by_pool)
    assert _check([pod], [_claim("n1", [pod])]) == []


def test_gpu_labels_and_or_ed_terms() -> None:
    tol = (Toleration(key="nvidia.com/gpu", operator="Exists"),)
    h100 = Requirements((Requirement.in_("joiner.sh/gpu-name", "H100"),))
    l4 = Requirements((Requirement.in_("joiner.sh/gpu-name", "L4"),))
    pod = _pod("g", tolerations=tol, node_requirements=(h100,))
    assert _rules(_check([pod], [_claim("n1", [pod], it=GPU, pool="gpu")])) == ["node-affinity"]
    pod = _pod("g", tolerations=tol, node_requirements=(h100, l4))
    assert _check([pod], [_claim("n1", [pod], it=GPU, pool="gpu")]) == []


def test_taints_need_tolerations_and_cordoned_nodes_take_nothing() -> None:
    pod = _pod("p")
    found = _check([pod], [_claim("n1", [pod], it=GPU, pool="gpu")])
    assert _rules(found) == ["taint"]
    ok = _pod("p", tolerations=(Toleration(key="nvidia.com/gpu", operator="Equal", value="", effect="NoSchedule"),))
    assert _check([ok], [_claim("n1", [ok], it=GPU, pool="gpu")]) == []
    cordoned = _existing("e1", "a", unschedulable=True)
    assert _rules(_check([pod], existing=[cordoned], placements={"e1": ("default/p",)})) == ["taint"]
    prefer = _existing("e2", "a", taints=(Taint(key="x", effect="PreferNoSchedule"),))
    assert _check([pod], existing=[prefer], placements={"e2": ("default/p",)}) == []


# --- pod affinity and anti-affinity ---------------------------------------------------------


def _anti(app: str, key: str = HOST) -> tuple[PodAffinityTerm, ...]:
    return (
        PodAffinityTerm(topology_key=key, selector=label_selector({"app": app}), namespaces=frozenset({"default"})),
    )


def test_hostname_anti_affinity_between_pods_of_different_sizes() -> None:
    pods = [_pod(f"p{i}", f"{i + 1}00m", labels={"app": "x"}, anti_affinity=_anti("x")) for i in range(3)]
    found = _check(pods, [_claim("n1", pods[:2]), _claim("n2", pods[2:])])
    assert _rules(found) == ["pod-anti-affinity", "pod-anti-affinity"]
    assert _check(pods, [_claim(f"n{i}", [p]) for i, p in enumerate(pods)]) == []


def test_anti_affinity_of_a_bound_pod_keeps_new_pods_out_of_its_zone() -> None:
    guard = _pod("guard", labels={"app": "guard"}, anti_affinity=_anti("web", ZONE))
    node = _existing("e1", "a", pods=[guard])
    web = _pod("web", labels={"app": "web"})
    assert _rules(_check([web], [_claim("n1", [web], zone="a")], existing=[node])) == ["pod-anti-affinity"]
    assert _check([web], [_claim("n1", [web], zone="b")], existing=[node]) == []


def test_anti_affinity_counts_only_the_terms_namespaces() -> None:
    other = Pod(name="o", namespace="other", labels={"app": "x"}, requests=Resources.parse({"cpu": "1"}))
    node = _existing("e1", "a", pods=[other])
    pod = _pod("p", labels={"app": "x"}, anti_affinity=_anti("x"))
    assert _check([pod], existing=[node], placements={"e1": ("default/p",)}) == []
    term = (PodAffinityTerm(topology_key=HOST, selector=label_selector({"app": "x"}), all_namespaces=True),)
    pod = _pod("p", labels={"app": "x"}, anti_affinity=term)
    assert _rules(_check([pod], existing=[node], placements={"e1": ("default/p",)})) == ["pod-anti-affinity"]


def test_zone_affinity_must_join_a_matching_pod() -> None:
    anchor = _pod("db", labels={"app": "db"})
    node = _existing("e1", "a", pods=[anchor])
    web = _pod("web", anti_affinity=(), affinity=_anti("db", ZONE))
    assert _rules(_check([web], [_claim("n1", [web], zone="b")], existing=[node])) == ["pod-affinity"]
    assert _check([web], [_claim("n1", [web], zone="a")], existing=[node]) == []
    # nothing to join and the pod does not match its own term: kube-scheduler refuses it
    assert _rules(_check([web], [_claim("n1", [web], zone="a")])) == ["pod-affinity"]


def test_self_affine_pods_with_nothing_to_join_stay_in_one_zone() -> None:
    pods = [_pod(f"p{i}", f"{i + 1}00m", labels={"aff": "a"}, affinity=_anti_term("a")) for i in range(4)]
    assert _check(pods, [_claim("n1", pods[:2], zone="a"), _claim("n2", pods[2:], zone="a")]) == []
    split = _check(pods, [_claim("n1", pods[:2], zone="a"), _claim("n2", pods[2:], zone="b")])
    assert _rules(split) == ["pod-affinity", "pod-affinity"]  # two pods started a second zone
    lone = _check(pods[:1], [_claim("n1", pods[:1], zone="c")])
    assert lone == []


def _anti_term(value: str) -> tuple[PodAffinityTerm, ...]:
    return (
        PodAffinityTerm(topology_key=ZONE, selector=label_selector({"aff": value}), namespaces=frozenset({"default"})),
    )


# --- topology spread ----------------------------------------------------------------------------


def _spread(key: str = ZONE, skew: int = 1, **kw: Any) -> tuple[TopologySpread, ...]:
    return (TopologySpread(topology_key=key, max_skew=skew, selector=label_selector({"my-label": "a"}), **kw),)


def _six(**kw: Any) -> list[Pod]:
    return [_pod(f"p{i}", f"{i + 1}00m", labels={"my-label": "a"}, spread=_spread(**kw)) for i in range(6)]


def test_zone_spread_over_pods_of_different_sizes() -> None:
    pods = _six()
    others = [_existing("eb", "b"), _existing("ec", "c")]  # the cluster has nodes in every zone
    all_in_a = _check(pods, [_claim("n1", pods[:3], zone="a"), _claim("n2", pods[3:], zone="a")], existing=others)
    assert _rules(all_in_a) == ["topology-spread"] * 6  # every one of them would be refused as the last
    balanced = [_claim(f"n{z}", pods[2 * i : 2 * i + 2], zone=z) for i, z in enumerate(ZONES)]
    assert _check(pods, balanced, existing=others) == []
    # kube-scheduler knows only the zones that have nodes: in an empty cluster zone a is the only one
    assert _check(pods, [_claim("n1", pods[:3], zone="a"), _claim("n2", pods[3:], zone="a")]) == []


def test_spread_counts_every_matching_pod_even_without_the_constraint() -> None:
    bound = [_pod(f"old{i}", "100m", labels={"my-label": "a"}) for i in range(3)]
    existing = [_existing("e1", "a", pods=bound), _existing("e2", "b"), _existing("e3", "c")]
    pods = _six()
    # b and c get three each: 3/3/3 with the bound ones
    plan = [_claim("nb", pods[:3], zone="b"), _claim("nc", pods[3:], zone="c")]
    assert _check(pods, plan, existing=existing) == []
    plan = [_claim("na", pods[:1], zone="a"), _claim("nb", pods[1:3], zone="b"), _claim("nc", pods[3:], zone="c")]
    found = _check(pods, plan, existing=existing)  # 4/2/3: the pod in a makes a skew of 2 over b
    assert [(v.rule, v.pod) for v in found] == [("topology-spread", "default/p0")]


def test_spread_only_over_the_zones_the_pod_may_use() -> None:
    in_ab = (Requirements((Requirement.in_(ZONE, "a", "b"),)),)
    pods = [
        _pod(f"p{i}", f"{i + 1}00m", labels={"my-label": "a"}, spread=_spread(skew=2), node_requirements=in_ab)
        for i in range(6)
    ]
    existing = [_existing("ec", "c")]  # zone c is not eligible: it does not hold the minimum at 0
    plan = [_claim("na", pods[:4], zone="a"), _claim("nb", pods[4:], zone="b")]
    assert _check(pods, plan, existing=existing) == []
    plan = [_claim("na", pods[:5], zone="a"), _claim("nb", pods[5:], zone="b")]
    assert set(_rules(_check(pods, plan, existing=existing))) == {"topology-spread"}
    # nodeAffinityPolicy Ignore: zone c counts, with none there
    ignoring = [
        _pod(
            f"p{i}",
            labels={"my-label": "a"},
            spread=_spread(skew=2, honor_node_affinity=False),
            node_requirements=in_ab,
        )
        for i in range(4)
    ]
    plan = [_claim("na", ignoring[:2], zone="a"), _claim("nb", ignoring[2:], zone="b")]
    assert _check(ignoring, plan, existing=existing) == []
    plan = [_claim("na", ignoring[:3], zone="a"), _claim("nb", ignoring[3:], zone="b")]
    assert set(_rules(_check(ignoring, plan, existing=existing))) == {"topology-spread"}


def test_node_taints_policy_and_min_domains() -> None:
    tainted = ExistingNode(
        name="gc",
        allocatable=Resources.parse({"cpu": "8", "pods": "10"}),
        labels={ZONE: "c", HOST: "gc"},
        taints=(GPU_TAINT,),
    )
    pods = [_pod(f"p{i}", labels={"my-label": "a"}, spread=_spread()) for i in range(3)]
    plan = [_claim("na", pods[:2], zone="a"), _claim("nb", pods[2:], zone="b")]
    # nodeTaintsPolicy Ignore (default): the tainted node's zone c is a domain with 0 pods
    assert set(_rules(_check(pods, plan, existing=[tainted]))) == {"topology-spread"}
    honoring = [_pod(f"p{i}", labels={"my-label": "a"}, spread=_spread(honor_node_taints=True)) for i in range(3)]
    plan = [_claim("na", honoring[:2], zone="a"), _claim("nb", honoring[2:], zone="b")]
    assert _check(honoring, plan, existing=[tainted]) == []
    # minDomains 3 with two domains: the global minimum counts as 0
    few = [_pod(f"p{i}", labels={"my-label": "a"}, spread=_spread(min_domains=3)) for i in range(3)]
    plan = [_claim("na", few[:2], zone="a"), _claim("nb", few[2:], zone="b")]
    assert _check(few[:2], [_claim("na", few[:1], zone="a"), _claim("nb", few[1:2], zone="b")]) == []
    assert set(_rules(_check(few, plan))) == {"topology-spread"}
    plain = [_pod(f"p{i}", labels={"my-label": "a"}, spread=_spread()) for i in range(3)]
    assert _check(plain, [_claim("na", plain[:2], zone="a"), _claim("nb", plain[2:], zone="b")]) == []


def test_hostname_spread_counts_empty_eligible_nodes() -> None:
    pods = [_pod(f"p{i}", "100m", labels={"my-label": "a"}, spread=_spread(HOST)) for i in range(4)]
    assert _check(pods, [_claim("n1", pods[:2]), _claim("n2", pods[2:])]) == []
    assert _rules(_check(pods, [_claim("n1", pods[:3]), _claim("n2", pods[3:])])) == ["topology-spread"] * 3
    # an empty node the pods may use holds the minimum at 0
    empty = _existing("e1", "a")
    assert set(_rules(_check(pods, [_claim("n1", pods[:2]), _claim("n2", pods[2:])], existing=[empty]))) == {
        "topology-spread"
    }


def test_nodes_without_every_spread_key_are_not_domains() -> None:
    both = (*_spread(), *_spread("rack"))
    pods = [_pod(f"p{i}", labels={"my-label": "a"}, spread=both) for i in range(4)]
    racked = [
        ExistingNode(
            name=f"r{z}",
            allocatable=Resources.parse({"cpu": "4", "memory": "8Gi", "pods": "10"}),
            labels={ZONE: z, HOST: f"r{z}", "rack": "1"},
        )
        for z in ("a", "b")
    ]
    no_rack = _existing("ec", "c")  # zone c has no node with a rack label: not a domain
    # 2 / 2 in zones a and b; counting zone c (0 pods) as a domain would make the skew 2
    spread_out: dict[str, tuple[str, ...]] = {"ra": ("default/p0", "default/p1"), "rb": ("default/p2", "default/p3")}
    assert _check(pods, existing=[*racked, no_rack], placements=spread_out) == []
    together: dict[str, tuple[str, ...]] = {"ra": ("default/p0", "default/p1", "default/p2"), "rb": ("default/p3",)}
    assert set(_rules(_check(pods, existing=[*racked, no_rack], placements=together))) == {"topology-spread"}


def test_a_node_without_a_spread_or_affinity_key_takes_no_such_pod_not_even_the_first() -> None:
    unlabelled = _existing("e1", "a")
    alone = [_pod("s", spread=(TopologySpread(topology_key="rack", max_skew=1, selector=None),))]
    assert _rules(_check(alone, existing=[unlabelled], placements={"e1": ("default/s",)})) == ["topology-spread"]
    term = PodAffinityTerm(
        topology_key="rack", selector=label_selector({"app": "x"}), namespaces=frozenset({"default"})
    )
    first = [_pod("a", labels={"app": "x"}, affinity=(term,))]  # self-affine, nothing to join yet
    found = _check(first, existing=[unlabelled], placements={"e1": ("default/a",)})
    assert [(v.rule, v.reason) for v in found] == [("pod-affinity", "the node has no rack label")]


def test_spread_counts_only_the_same_namespace_and_match_label_keys() -> None:
    def pod(name: str, revision: str) -> Pod:
        return pod_from_dict(
            {
                "metadata": {"name": name, "namespace": "default", "labels": {"app": "w", "rev": revision}},
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": ZONE,
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": {"app": "w"}},
                            "matchLabelKeys": ["rev"],
                        }
                    ],
                },
            }
        )

    old = [pod(f"old{i}", "1") for i in range(2)]
    existing = [_existing("e1", "a", pods=old), _existing("e2", "b"), _existing("e3", "c")]
    new = [pod(f"new{i}", "2") for i in range(3)]
    plan = [_claim(f"n{z}", [p], zone=z) for z, p in zip(ZONES, new, strict=True)]
    assert _check(new, plan, existing=existing) == []  # the old revision does not count
    other_ns = Pod(name="x", namespace="other", labels={"my-label": "a"})
    pods = [_pod("p", labels={"my-label": "a"}, spread=_spread())]
    existing = [_existing("e1", "a", pods=[other_ns]), _existing("e2", "b")]
    assert _check(pods, [_claim("n", pods, zone="b")], existing=existing) == []


def test_summarize_counts_by_rule() -> None:
    found = [
        Violation("fit", "p", "n", "x"),
        Violation("topology-spread", "p", "n", "y"),
        Violation("fit", "q", "n", "z"),
    ]
    assert summarize(found) == "3 (fit 2, topology-spread 1)"
    assert str(found[0]) == "[fit] p on n: x"
