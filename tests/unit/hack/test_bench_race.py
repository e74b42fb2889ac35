"""The race's GPU variant: joiner's catalog as a Karpenter kwok instance-types file, and back."""

from __future__ import annotations

import itertools
import json
from typing import Any

from controller.cloudprovider.catalog import builtin_catalog_text, parse_catalog_text
from hack.bench.race_setup import (
    CONSTRAINTS,
    GPU,
    GPU_MIX,
    LABELS,
    MIX,
    MIXES,
    SYSTEM_NODE_LABEL,
    joiner_catalog,
    karpenter_types,
    prices,
    system_node,
    workloads,
)


def _catalog() -> dict[str, Any]:
    return dict(json.loads(builtin_catalog_text()))


def test_the_gpu_catalog_keeps_the_cpu_types_and_only_the_l4_machines() -> None:
    types = karpenter_types(_catalog())
    gpu = sorted(t["name"] for t in types if GPU in t["resources"])
    assert gpu
    assert all(name.startswith("g6.") for name in gpu)
    cpu_names = {it["name"] for it in _catalog()["instanceTypes"] if GPU not in it["capacity"]}
    assert cpu_names <= {t["name"] for t in types}


def test_both_sides_buy_from_the_same_list_at_the_same_prices() -> None:
    source = _catalog()
    types = karpenter_types(source)
    back = joiner_catalog(types)
    names = {t["name"] for t in types}
    want = {
        (it["name"], o["zone"], o["capacityType"]): float(o["price"])
        for it in source["instanceTypes"]
        for o in it["offerings"]
        if it["name"] in names and o.get("available", True) and o["capacityType"] in ("spot", "on-demand")
    }
    assert prices(back) == want
    by_name = {it["name"]: it for it in source["instanceTypes"]}
    for it in back["instanceTypes"]:
        assert it["capacity"] == by_name[it["name"]]["capacity"]  # GPUs, pods and memory as joiner sells them
        assert it["labels"]["kubernetes.io/arch"] == by_name[it["name"]]["labels"]["kubernetes.io/arch"]


def test_an_offering_marked_unavailable_is_left_out_for_both_sides() -> None:
    source = _catalog()
    g6 = next(it for it in source["instanceTypes"] if it["name"] == "g6.xlarge")
    g6["offerings"][0]["available"] = False
    gone = (g6["offerings"][0]["zone"], g6["offerings"][0]["capacityType"])
    converted = next(t for t in karpenter_types(source) if t["name"] == "g6.xlarge")
    left = {(r[1]["values"][0], r[0]["values"][0]) for r in (o["Requirements"] for o in converted["offerings"])}
    assert gone not in left
    assert len(left) == len(g6["offerings"]) - 1


def test_the_gpu_workload_asks_for_every_pod_and_the_gpus_of_each_shape() -> None:
    deployments = workloads("race", 301, GPU_MIX)
    assert sum(d["spec"]["replicas"] for d in deployments) == 301
    asked = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"].get(GPU)
        for d in deployments
    }
    assert asked == {"l4-small": "1", "l4-large": "1", "l4-pair": "2", "cpu": None}
    cpu_only = workloads("race", 1000, MIX)
    assert sum(d["spec"]["replicas"] for d in cpu_only) == 1000
    assert all(GPU not in d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] for d in cpu_only)


def pods_of(deployments: list[dict[str, Any]]) -> list[Any]:
    """Every replica of the Deployments as the solver's pods, in namespace ``race``."""
    from controller.scheduling.kubeconv import pod_from_dict

    pods = []
    for d in deployments:
        template, name = d["spec"]["template"], d["metadata"]["name"]
        for i in range(d["spec"]["replicas"]):
            meta = {"name": f"{name}-{i}", "namespace": "race", "labels": dict(template["metadata"]["labels"])}
            pods.append(pod_from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}))
    return pods


def test_the_diverse_workload_is_karpenters_benchmark_mix_as_deployments_and_its_plan_keeps_every_spread() -> None:
    from controller.scheduling import NodePoolTemplate, solve
    from hack.bench.checker import check_plan, summarize

    deployments = workloads("race", 350, MIXES["diverse"], CONSTRAINTS["diverse"], LABELS["diverse"])
    assert len(deployments) == 35
    assert sum(d["spec"]["replicas"] for d in deployments) == 350
    by_name = {d["metadata"]["name"]: d["spec"]["template"] for d in deployments}
    spread = by_name["zone-spread-a"]
    assert spread["metadata"]["labels"] == {"app": "zone-spread-a", "my-label": "a"}
    [term] = spread["spec"]["topologySpreadConstraints"]
    assert term["topologyKey"] == "topology.kubernetes.io/zone"
    assert term["whenUnsatisfiable"] == "DoNotSchedule"
    # one a Node across all seven anti-affinity Deployments
    assert all(by_name[f"hostname-anti-affinity-{v}"]["metadata"]["labels"]["anti"] == "nginx" for v in "abcdefg")
    pods = pods_of(deployments)
    types = karpenter_types(json.loads(builtin_catalog_text()))
    catalog = parse_catalog_text(json.dumps(joiner_catalog(types)), source="race")
    pool = NodePoolTemplate(name="race", instance_types=catalog)
    plan = solve(pods=pods, node_pools=[pool])
    assert not plan.unschedulable
    assert summarize(check_plan(pods=pods, plan=plan, node_pools=[pool])) == "0"


def test_nodeclaims_are_timed_when_the_apiserver_stored_them(tmp_path: Any) -> None:
    from pathlib import Path

    from hack.bench.race_logs import audit_creates

    def event(
        verb: str, resource: str, at: str, *, stage: str = "ResponseComplete", code: int = 201, **ref: str
    ) -> str:
        return json.dumps(
            {
                "stage": stage,
                "verb": verb,
                "objectRef": {"resource": resource, **ref},
                "responseStatus": {"code": code},
                "stageTimestamp": f"2026-11-27T21:00:{at}Z",
            }
        )

    log = Path(tmp_path) / "audit.log"
    log.write_text(
        "\n".join(
            [
                event("create", "nodeclaims", "05.500000"),
                event("create", "nodeclaims", "02.250000"),
                event("create", "nodeclaims", "03.000000", stage="ResponseStarted"),
                event("create", "nodeclaims", "04.000000", code=409),  # a name taken: not made
                event("patch", "nodeclaims", "06.000000", subresource="status"),
                event("create", "nodes", "07.000000"),
                event("create", "nodeclaims", "59.000000"),  # after the run
                "not json",
            ]
        )
    )
    start = audit_creates(log, 0, 2e9, "nodeclaims")[0] - 2.25
    got = [round(t - start, 2) for t in audit_creates(log, start, start + 30, "nodeclaims")]
    assert got == [2.25, 5.5]


def test_the_nodes_way_is_read_from_the_audit_log_created_taint_off_and_pods_bound(tmp_path: Any) -> None:
    from pathlib import Path

    from hack.bench.race_logs import audit_node_way

    def event(verb: str, resource: str, at: float, *, agent: str = "joiner", code: int = 201, **ref: str) -> str:
        return json.dumps(
            {
                "stage": "ResponseComplete",
                "verb": verb,
                "userAgent": agent,
                "user": {"username": "admin"},
                "objectRef": {"resource": resource, **ref},
                "responseStatus": {"code": code},
                "stageTimestamp": f"2026-11-28T13:00:{at:09.6f}Z",
            }
        )

    kcm = "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/$Format/node-controller"
    log = Path(tmp_path) / "audit.log"
    log.write_text(
        "\n".join(
            [
                event("create", "nodes", 1.0, name="a"),
                event("create", "nodes", 2.0, name="b"),
                event("create", "nodes", 2.5, name="c", code=409),  # refused: not made
                event("patch", "nodes", 1.5, name="a", agent="joiner"),  # joiner opening it: not the taint
                event("patch", "nodes", 3.0, name="a", agent=kcm, code=200),
                event("patch", "nodes", 3.5, name="a", agent=kcm, code=200),  # a later patch: the first counts
                event("patch", "nodes", 5.0, name="b", agent=kcm, code=200),
                event("create", "pods", 4.0, name="p", subresource="binding"),
                event("create", "pods", 6.0, name="q", subresource="binding"),
                event("create", "pods", 40.0, name="r", subresource="binding"),  # after the run
                event("patch", "nodes", 0.5, name="system", agent=kcm, code=200),  # before it
            ]
        )
    )
    start = audit_node_way(log, 0, 2e9).created[0] - 1.0
    way = audit_node_way(log, start + 0.9, start + 30)
    assert [round(t - start, 1) for t in way.created] == [1.0, 2.0]
    assert [round(t - start, 1) for t in way.taint_off] == [3.0, 5.0]
    assert [round(t - start, 1) for t in way.bound] == [4.0, 6.0]
    assert way.taint_pace() == 0.5
    assert way.line(start) == (
        "Nodes created 1.0-2.0 s (2), not-ready taint off 3.0-5.0 s (0.5 Nodes/s, kube-controller-manager), "
        "pods bound 4.0-6.0 s"
    )
    assert audit_node_way(Path(tmp_path) / "none.log", 0, 1).line(0) == (
        "Nodes created - (0), not-ready taint off - (0.0 Nodes/s, kube-controller-manager), pods bound -"
    )


def test_a_burst_in_waves_scales_every_deployment_up_to_all_its_replicas_by_the_last() -> None:
    from hack.bench.race import in_wave

    burst = workloads("race", 1000)
    replicas = [d["spec"]["replicas"] for d in burst]
    steps = [[d["spec"]["replicas"] for d in in_wave(burst, wave, 3)] for wave in (1, 2, 3)]
    assert steps[-1] == replicas
    for before, after in itertools.pairwise(steps):
        assert all(a >= b for a, b in zip(after, before, strict=True))
    assert steps[0] == [r // 3 for r in replicas]
    assert [d["spec"]["replicas"] for d in burst] == replicas  # the burst itself is left as it was
    assert in_wave(burst, 1, 1) == burst


def test_every_plan_that_bought_is_counted_on_both_sides() -> None:
    from hack.bench.race_logs import _first_plan_karpenter, _joiner_log

    joiner = "\n".join(
        [
            json.dumps({"event": "provisioner.solved", "new_nodeclaims": 6, "pods": 332}),
            json.dumps({"event": "provisioner.solved", "new_nodeclaims": 0, "pods": 4}),
            json.dumps({"event": "provisioner.nomination_released", "pods": 2}),
            json.dumps({"event": "provisioner.solved", "new_nodeclaims": 7, "pods": 334}),
            "not json",
        ]
    )
    assert _joiner_log(joiner) == (6, 332, 1, 2, 13)
    karpenter = "\n".join(
        json.dumps({"message": "computed new nodeclaim(s) to fit pod(s)", "nodeclaims": n, "pods": p})
        for n, p in ((2, 332), (3, 333))
    )
    assert _first_plan_karpenter(karpenter) == (2, 332, 1, 5)


def test_a_pod_is_timed_from_its_own_nodes_initialization_to_running() -> None:
    from hack.bench.race import after_initialized

    running = {"a": 10.0, "b": 12.5, "c": 9.0, "d": 11.0}
    node_of = {"a": "n1", "b": "n1", "c": "n2", "d": "n3"}
    initialized = {"n1": 9.5, "n2": 9.5}  # n3 never seen Initialized: d is not timed
    assert after_initialized(running, node_of, initialized) == [-0.5, 0.5, 3.0]
    assert after_initialized({}, {}, initialized) == []


def test_the_system_node_is_played_by_kwok_and_takes_no_pod_of_any_workload() -> None:
    from controller.scheduling.taints import Taint, Toleration

    node = system_node("test-zone-a")
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake", "kwok makes it Ready"
    assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "test-zone-a"
    assert node["metadata"]["labels"][SYSTEM_NODE_LABEL] == "true", "left out of either side's Nodes"
    assert float(node["status"]["allocatable"]["cpu"]) > 0
    taints = [Taint(key=t["key"], effect=t["effect"], value=t.get("value", "")) for t in node["spec"]["taints"]]
    assert taints
    for name, mix in MIXES.items():
        for deployment in workloads("race", 100, mix, CONSTRAINTS.get(name), LABELS.get(name)):
            tolerations = [
                Toleration.from_dict(t) for t in deployment["spec"]["template"]["spec"].get("tolerations", [])
            ]
            assert not any(tol.tolerates(taint) for tol in tolerations for taint in taints), (name, deployment)


def test_a_zone_spread_is_kept_with_the_system_node_in_a_zone_of_the_catalog_and_not_outside_it() -> None:
    """kube-scheduler counts the tainted system Node's zone among a zone spread's domains: in a zone the
    catalog has no machine in, the diverse workload's zone spreads could not all be placed (a race at
    1,000 pods, with the system Node in us-east-1a and the catalog's machines in test-zone-a to d,
    stopped with 189 of them Pending)."""
    from controller.scheduling import NodePoolTemplate, solve
    from controller.scheduling.kubeconv_nodes import node_from_dict

    deployments = workloads("race", 350, MIXES["diverse"], CONSTRAINTS["diverse"], LABELS["diverse"])
    pods = pods_of([d for d in deployments if d["metadata"]["name"].startswith("zone-spread")])
    assert pods
    catalog_json = joiner_catalog(karpenter_types(json.loads(builtin_catalog_text())))
    zones = sorted({zone for _, zone, _ in prices(catalog_json)})
    pool = NodePoolTemplate(name="race", instance_types=parse_catalog_text(json.dumps(catalog_json), source="race"))
    inside = solve(pods=pods, node_pools=[pool], existing_nodes=[node_from_dict(system_node(zones[0]))])
    assert not inside.unschedulable
    outside = solve(pods=pods, node_pools=[pool], existing_nodes=[node_from_dict(system_node("nowhere-1"))])
    assert any("nowhere-1" in why for why in outside.unschedulable.values())
