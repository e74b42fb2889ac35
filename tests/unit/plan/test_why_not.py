"""Why-not text: every way a NodePool can refuse a pod is named, in ``joiner plan``'s output (the
same sentences the provisioner puts in the pod's Event), with Karpenter's wording for limits."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from controller.plan import execute
from controller.scheduling import solve
from controller.scheduling.solver_explain import reasons_by_pool
from controller.state.refusals import Refusal, RefusalBook
from tests.unit import builders
from tests.unit.scheduling.builders import itype, pod, pool, res

NODECLASS = """
apiVersion: joiner.sh/v1
kind: KWOKNodeClass
metadata: {name: default}
spec: {}
"""


def nodepool(name: str = "gpu", **kw: Any) -> str:
    """A scenario's NodePool document: ``builders.nodepool``'s, written as JSON (which YAML reads)."""
    return f"\n{json.dumps(builders.nodepool(name, **kw))}\n"


def a_pod(name: str, requests: str, *, extra: str = "", labels: str = "") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ml{labels}}}
spec:
{extra}
  containers:
    - name: c
      resources: {{requests: {requests}}}
"""


GPU_POD = a_pod("trainer", "{cpu: '1', nvidia.com/gpu: '1'}")
CPU_POD = a_pod("web", "{cpu: '1'}")
GANG = ", labels: {joiner.sh/gang: train}, annotations: {joiner.sh/gang-size: '4'}"

CASES = {
    "limit of 0 on the GPUs": (
        [nodepool(limits={"nvidia.com/gpu": "0"}), GPU_POD],
        'nodepool "gpu": all available instance types exceed limits for nodepool (nvidia.com/gpu limit is 0)',
    ),
    "limit of 0 on the CPUs": (
        [nodepool(limits={"cpu": "0"}), CPU_POD],
        'nodepool "gpu": all available instance types exceed limits for nodepool (cpu limit is 0)',
    ),
    "limit of 0 on GPUs where every type has one": (
        [
            nodepool(
                limits={"nvidia.com/gpu": "0"},
                template={"requirements": [{"key": "joiner.sh/gpu-count", "operator": "Exists"}]},
            ),
            CPU_POD,
        ],
        'nodepool "gpu": all available instance types exceed limits for nodepool (nvidia.com/gpu limit is 0)',
    ),
    "limit used up": (
        [nodepool(limits={"nvidia.com/gpu": "1"}), GPU_POD, a_pod("big", "{nvidia.com/gpu: '2'}")],
        'nodepool "gpu": all available instance types exceed limits for nodepool '
        "(nvidia.com/gpu: 1 of 1 in use, the cheapest instance type that fits has 4)",
    ),
    "memory limit": (
        [nodepool(limits={"memory": "1Gi"}), CPU_POD],
        'nodepool "gpu": all available instance types exceed limits for nodepool (memory: 0 of 1Gi in use, ',
    ),
    "limits.nodes": (
        [nodepool(limits={"nodes": "0"}), CPU_POD],
        'nodepool "gpu": all available instance types exceed limits for nodepool (limits.nodes is 0 and it has 0)',
    ),
    "budget": (
        [nodepool(capacity={"budget": {"maxPricePerHour": "0.01"}}), CPU_POD],
        'nodepool "gpu": its budget is $0.01/h and its nodes cost $0.00/h: a ',
    ),
    "taint": (
        [nodepool(template={"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}), CPU_POD],
        'nodepool "gpu": pod does not tolerate taint nvidia.com/gpu=:NoSchedule',
    ),
    "pool requirements against the pod's": (
        [
            nodepool(template={"requirements": [{"key": "team", "operator": "In", "values": ["ml"]}]}),
            a_pod("web", "{cpu: '1'}", extra="  nodeSelector: {team: web}"),
        ],
        'nodepool "gpu": pod requires team In [web] but the nodepool requires team In [ml]',
    ),
    "no instance type matches the pool": (
        [
            nodepool(template={"requirements": [{"key": "joiner.sh/gpu-name", "operator": "In", "values": ["B300"]}]}),
            CPU_POD,
        ],
        'nodepool "gpu": no instance type matches the nodepool\'s requirements (joiner.sh/gpu-name In [B300])',
    ),
    "too big for every type": (
        [nodepool(), a_pod("huge", "{nvidia.com/gpu: '16'}")],
        'nodepool "gpu": no instance type has 16 nvidia.com/gpu (largest: 8)',
    ),
    "no offering where the pod must be": (
        [
            nodepool(template={"requirements": [{"key": "joiner.sh/gpu-count", "operator": "Exists"}]}),
            a_pod("zoned", "{cpu: '1'}", extra="  nodeSelector: {topology.kubernetes.io/zone: mars-1a}"),
        ],
        'nodepool "gpu": no instance type has an available offering for topology.kubernetes.io/zone In [mars-1a] '
        "(its offerings have topology.kubernetes.io/zone: us-east-1a, us-east-1b, us-east-1c)",
    ),
    "gang short of its size": (
        [nodepool(), a_pod("w-0", "{cpu: '1'}", labels=GANG), a_pod("w-1", "{cpu: '1'}", labels=GANG)],
        "gang ml/train has 2 of 4 members: joiner waits for every member before it buys nodes for any",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_joiner_plan_names_the_cause(case: str) -> None:
    documents, expected = CASES[case]
    outcome = execute([("scenario.yaml", "---".join([NODECLASS, *documents]))])
    assert outcome.code == 0, outcome.err
    assert outcome.plan is not None
    reasons = set(outcome.plan.unschedulable.values())
    assert reasons, f"nothing refused: {outcome.out}"
    assert all(r.startswith(expected) for r in reasons), reasons
    assert expected.split(" (")[0] in outcome.out


def test_offerings_refused_for_capacity_are_named() -> None:
    gpu = itype("g.1gpu", cpu=8, mem_gi=32, gpu=1, price=1.0)
    refused = {("g.1gpu", zone, ct) for zone in ("zone-a", "zone-b", "zone-c") for ct in ("spot", "on-demand")}
    plan = solve(pods=[pod("a")], node_pools=[pool("gpu", [gpu])], unavailable=refused)
    assert plan.unschedulable == {
        "default/a": 'nodepool "gpu": every instance type that could host it is unavailable: the cloud refused '
        "its offerings for insufficient capacity (g.1gpu); they are tried again when the refusal expires"
    }


def test_a_pool_whose_nodeclass_offers_nothing_says_so() -> None:
    plan = solve(pods=[pod("a")], node_pools=[pool("empty", [])])
    assert plan.unschedulable == {"default/a": 'nodepool "empty": its NodeClass offers no instance types'}


def test_each_pools_reason_is_read_back_from_a_refused_pods_sentence() -> None:
    cpu = itype("c.large", cpu=2, mem_gi=4, price=0.1)
    gpu = itype("g.1gpu", cpu=8, mem_gi=32, gpu=1, price=1.0)
    # as kubeconv makes a pool with `limits: {nvidia.com/gpu: "0"}`: the GPU types taken out
    pools = [pool("cpu", [cpu]), replace(pool("gpu", []), zero_limits=("nvidia.com/gpu",), over_limit=(gpu,))]
    plan = solve(pods=[pod("big", requests=res(cpu="6"))], node_pools=pools)
    [text] = plan.unschedulable.values()
    assert reasons_by_pool(text) == {
        "cpu": "no instance type has 6 cpu (largest: 2)",
        "gpu": "all available instance types exceed limits for nodepool (nvidia.com/gpu limit is 0)",
    }
    gang = "gang 'ml/train': 1 of 4 pods cannot be placed, so none is: " + text
    assert reasons_by_pool(gang) == reasons_by_pool(text)
    assert reasons_by_pool("joiner cannot provision this pod: spec.x: bad") == {}


def test_the_refusal_book_keeps_the_last_batchs_refusals_per_pool() -> None:
    book = RefusalBook()
    told: list[str] = []
    book.subscribe(told.append)
    book.record(
        pools=["cpu", "gpu"],
        unschedulable={"ml/a": 'nodepool "gpu": limit; nodepool "cpu": taint', "ml/b": 'nodepool "gpu": other'},
    )
    assert book.of("gpu") == Refusal(pods=2, reason="limit")
    assert book.of("cpu") == Refusal(pods=1, reason="taint")
    assert sorted(told) == ["cpu", "gpu"]
    told.clear()
    book.record(pools=["cpu", "gpu"], unschedulable={"ml/b": 'nodepool "gpu": other'})
    assert (book.of("cpu"), book.of("gpu"), sorted(told)) == (None, Refusal(pods=1, reason="other"), ["cpu", "gpu"])
    told.clear()
    book.record(pools=["cpu", "gpu"], unschedulable={"ml/b": 'nodepool "gpu": other'})
    assert told == []  # nothing changed: no status write


def test_a_catalog_with_no_available_offering_says_so() -> None:
    gone = itype("c.large", cpu=2, mem_gi=4, price=0.1, zones=("zone-a",), unavailable=[("zone-a", "on-demand")])
    plan = solve(pods=[pod("a")], node_pools=[pool("cpu", [gone])])
    assert plan.unschedulable == {
        "default/a": 'nodepool "cpu": no instance type with an available offering matches the nodepool\'s requirements '
        "(1 match, none has an available offering in the zones and capacity types it allows)"
    }
