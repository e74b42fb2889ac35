"""Property tests over the whole `joiner plan` input (issue 14): generated scenarios and catalogs,
valid ones and mutations of them (wrong types, negative and huge numbers, missing fields, strings
for lists). Whatever the input, `joiner plan` exits 0 with a plan or 1 with one line; a plan never
puts more on a node than it can hold, never breaks a pod's node selector, a pool's taints or
limits, and its JSON is always JSON."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.cloudprovider.catalog import load_catalog
from controller.plan import Outcome, build_inputs, execute
from controller.scenario import load_scenario, read_documents
from controller.scheduling import parse_catalog
from controller.scheduling.resources import ONE_POD, Resources, sum_resources
from tests.unit.scheduling.builders import check_plan

Obj = dict[str, Any]
ARCH = "kubernetes.io/arch"
ZONES = ("z1", "z2", "z3")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- valid scenarios --------------------------------------------------------------------------

cpus = st.sampled_from(["100m", "250m", "500m", "1", "2", "3", "7", "15"])
memories = st.sampled_from(["128Mi", "1Gi", "4Gi", "16Gi", "60Gi"])
gpus = st.sampled_from([0, 0, 0, 1, 2, 8])


@st.composite
def instance_types(draw: st.DrawFn, index: int) -> Obj:
    gpu = draw(gpus)
    capacity: Obj = {
        "cpu": str(draw(st.sampled_from([2, 4, 8, 16, 32]))),
        "memory": draw(st.sampled_from(["4Gi", "16Gi", "64Gi", "128Gi"])),
    }
    if gpu:
        capacity["nvidia.com/gpu"] = str(gpu)
    if draw(st.booleans()):
        capacity["pods"] = str(draw(st.integers(min_value=1, max_value=120)))
    zones = draw(st.lists(st.sampled_from(ZONES), min_size=1, max_size=3, unique=True))
    return {
        "name": f"type-{index}",
        "capacity": capacity,
        "overhead": {"cpu": draw(st.sampled_from(["0", "100m", "500m"])), "memory": "256Mi"},
        "labels": {ARCH: draw(st.sampled_from(["amd64", "arm64"]))},
        "offerings": [
            {
                "zone": zone,
                "capacityType": draw(st.sampled_from(["spot", "on-demand"])),
                "price": draw(st.floats(min_value=0.01, max_value=60, allow_nan=False)),
                "available": draw(st.booleans()) or i == 0,
            }
            for i, zone in enumerate(zones)
        ],
    }


@st.composite
def catalogs(draw: st.DrawFn) -> Obj:
    count = draw(st.integers(min_value=1, max_value=5))
    return {"instanceTypes": [draw(instance_types(i)) for i in range(count)]}


@st.composite
def nodepools(draw: st.DrawFn, index: int) -> Obj:
    spec: Obj = {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}}
    if draw(st.booleans()):
        spec["requirements"] = [{"key": ARCH, "operator": "In", "values": [draw(st.sampled_from(["amd64", "arm64"]))]}]
    if draw(st.booleans()):
        spec["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    pool: Obj = {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": f"pool-{index}"},
        "spec": {"template": {"spec": spec}},
    }
    limits = draw(
        st.dictionaries(
            st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), st.sampled_from(["0", "4", "16", "64", "200Gi"])
        )
    )
    if limits:
        pool["spec"]["limits"] = limits
    if draw(st.booleans()):
        pool["spec"]["weight"] = draw(st.integers(min_value=1, max_value=100))
    return pool


@st.composite
def pod_specs(draw: st.DrawFn) -> Obj:
    requests: Obj = {"cpu": draw(cpus), "memory": draw(memories)}
    limits: Obj = {}
    gpu = draw(gpus)
    if gpu:
        limits["nvidia.com/gpu"] = gpu
    spec: Obj = {"containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}]}
    if draw(st.booleans()):
        spec["nodeSelector"] = {ARCH: draw(st.sampled_from(["amd64", "arm64"]))}
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    if draw(st.booleans()):
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": draw(st.integers(min_value=1, max_value=2)),
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ]
    return spec


@st.composite
def scenarios(draw: st.DrawFn) -> list[Obj]:
    docs: list[Obj] = [draw(nodepools(i)) for i in range(draw(st.integers(min_value=1, max_value=2)))]
    for i in range(draw(st.integers(min_value=0, max_value=10))):
        labels = {"app": draw(st.sampled_from(["web", "db"]))}
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{i}", "labels": labels},
                "spec": draw(pod_specs()),
            }
        )
    if draw(st.booleans()):
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": draw(st.integers(min_value=0, max_value=6)),
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": draw(pod_specs())},
                },
            }
        )
    if draw(st.booleans()):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "node-a", "labels": {ARCH: "amd64", "topology.kubernetes.io/zone": "z1"}},
                "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "20"}},
            }
        )
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "running"},
                "spec": {
                    "nodeName": "node-a",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": draw(cpus)}}}],
                },
            }
        )
    return docs


@st.composite
def rich_scenarios(draw: st.DrawFn) -> list[Obj]:
    """A scenario with every kind: its catalog in a ConfigMap, a DaemonSet, an in-flight NodeClaim,
    a gang Job, maybe all under a ``List``."""
    docs = draw(scenarios())
    catalog = draw(catalogs())
    daemon = draw(pod_specs())
    daemon["containers"][0]["resources"]["limits"] = {}  # a GPU daemon on a CPU node never runs: see report
    job_meta = {"labels": {"joiner.sh/gang": "g"}, "annotations": {"joiner.sh/gang-size": str(draw(st.integers(1, 3)))}}
    docs += [
        {
            "apiVersion": "joiner.sh/v1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": "default"},
            "spec": {"catalog": "default/catalog"},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "catalog"},
            "data": {"catalog.json": json.dumps(catalog)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "ds"},
            "spec": {"template": {"spec": daemon}},
        },
        {
            "apiVersion": "joiner.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": "nc",
                "labels": {"joiner.sh/nodepool": "pool-0", "node.kubernetes.io/instance-type": "type-0"},
            },
            "spec": {
                "nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}],
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train"},
            "spec": {"parallelism": 2, "template": {"metadata": job_meta, "spec": draw(pod_specs())}},
        },
    ]
    return [{"apiVersion": "v1", "kind": "List", "items": docs}] if draw(st.booleans()) else docs


# --- mutations ----------------------------------------------------------------------------------

WEIRD: list[Any] = [
    None, [], {}, "", "x", "arm64", -1, -0.5, 0, 10**30, "1e400", "-5", "1e3.5", 1.5, True, [[]], {"a": []},
    ["x"], {"a": "b"}, "NaN", float("inf"), "0", "99 99 * * *", "0s", 100_000_000,
]  # fmt: skip


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, (*path, key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_paths(value, (*path, i)))
    return out


def _drop(parent: Any, key: Any) -> None:
    parent.pop(key, None)


def _setter(value: Any) -> Callable[[Any, Any], None]:
    def put(parent: Any, key: Any) -> None:
        parent[key] = value

    return put


def _apply(root: Any, path: tuple[Any, ...], change: Callable[[Any, Any], None]) -> None:
    parent = root
    for part in path[:-1]:
        parent = parent[part]
    change(parent, path[-1])


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[Any]) -> Any:
    """A valid document tree with one to three values replaced by odd ones, or keys dropped."""
    root = copy.deepcopy(draw(base))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(root) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        if draw(st.integers(min_value=0, max_value=4)) == 0 and isinstance(path[-1], str):
            _apply(root, path, _drop)
        else:
            _apply(root, path, _setter(copy.deepcopy(draw(st.sampled_from(WEIRD)))))
    return root


# --- what must hold -------------------------------------------------------------------------------


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def _texts(docs: list[Obj]) -> list[tuple[str, str]]:
    return [("scenario.yaml", yaml.safe_dump_all(docs, sort_keys=False))]


def expect_well_behaved(outcome: Outcome) -> None:
    assert outcome.code in (0, 1)
    if outcome.code == 1:
        assert outcome.out == ""
        assert outcome.err.startswith("error: ")
        assert outcome.err.count("\n") == 1, outcome.err
    else:
        _strict_json(outcome.out)
        assert all(line.startswith("warning: ") for line in outcome.err.splitlines())


def expect_sound_plan(docs: list[Obj], catalog: Obj, outcome: Outcome) -> None:
    """Every node holds what is put on it, and every placement keeps the pods' and pools' rules."""
    plan = outcome.plan
    assert plan is not None
    types = {it.name: it for it in parse_catalog(catalog)}
    inputs = build_inputs(load_scenario(read_documents(_texts(docs))), tuple(types.values()))
    # the solver tests' independent checker: every pod once, offerings, requirements, taints,
    # resources of every candidate, existing nodes' room
    check_plan(plan, pending=inputs.pods, pools=inputs.pools, existing=inputs.existing, daemons=inputs.daemons)
    pods = {f"{p.namespace}/{p.name}": p for p in inputs.pods}
    pools = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "NodePool"}
    specs = {f"default/{d['metadata']['name']}": d["spec"] for d in docs if d.get("kind") == "Pod"}
    bought: dict[str, Resources] = {}
    for node in plan.new_nodes:
        need = sum_resources(pods[k].requests + ONE_POD for k in node.pods)
        for candidate in node.candidates:
            it = types[candidate.instance_type]
            assert need.fits_in(it.allocatable), f"{node.name} on {it.name}: {need} > {it.allocatable}"
        it = types[node.choice.instance_type]
        bought[node.node_pool] = bought.get(node.node_pool, Resources()) + it.capacity
        pool_spec = pools[node.node_pool]["spec"]
        tainted = bool(pool_spec["template"]["spec"].get("taints"))
        for key in node.pods:
            spec = specs.get(key)
            if spec is None:
                continue  # a Deployment's pod: its template is checked through the same code
            wanted = (spec.get("nodeSelector") or {}).get(ARCH)
            assert wanted is None or it.labels.get(ARCH) == wanted, f"{key} wants {wanted}, got {it.name}"
            if tainted:
                assert spec.get("tolerations"), f"{key} does not tolerate pool {node.node_pool}'s taint"
    for name, total in bought.items():
        for resource, limit in (pools[name]["spec"].get("limits") or {}).items():
            cap = Resources.parse({resource: limit}).get(resource)
            assert total.get(resource) <= cap, f"pool {name} bought {total} over its limit {resource}={limit}"
    for existing in inputs.existing:
        placed = plan.existing_placements.get(existing.name, ())
        if not placed:
            continue  # what was bound before is the scenario's business
        need = sum_resources(
            [p.requests + ONE_POD for p in existing.pods] + [pods[k].requests + ONE_POD for k in placed]
        )
        assert need.fits_in(existing.allocatable), f"{existing.name}: {need} > {existing.allocatable}"


# --- the properties -------------------------------------------------------------------------------


@SETTINGS
@given(scenarios(), catalogs())
def test_a_valid_scenario_gives_a_sound_plan(docs: list[Obj], catalog: Obj) -> None:
    outcome = execute(_texts(docs), catalog_text=json.dumps(catalog), output="json")
    assert outcome.code == 0, outcome.err
    expect_well_behaved(outcome)
    expect_sound_plan(docs, catalog, outcome)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(scenarios()), catalogs())
def test_a_mutated_scenario_is_planned_soundly_or_refused_in_one_line(docs: list[Any], catalog: Obj) -> None:
    outcome = execute([("scenario.yaml", yaml.safe_dump_all(docs))], catalog_text=json.dumps(catalog), output="json")
    expect_well_behaved(outcome)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), mutated(catalogs()))
def test_a_mutated_catalog_is_used_soundly_or_refused_in_one_line(docs: list[Obj], catalog: Any) -> None:
    outcome = execute(_texts(docs), catalog_text=json.dumps(catalog), output="json")
    expect_well_behaved(outcome)


@SETTINGS
@given(rich_scenarios())
def test_a_scenario_with_every_kind_gives_a_sound_plan(docs: list[Obj]) -> None:
    texts = [("scenario.yaml", yaml.safe_dump_all(docs))]
    outcome = execute(texts, output="json")
    assert outcome.code == 0, outcome.err
    expect_well_behaved(outcome)
    assert outcome.plan is not None
    inputs = build_inputs(load_scenario(read_documents(texts)), load_catalog())
    check_plan(outcome.plan, pending=inputs.pods, pools=inputs.pools, existing=inputs.existing, daemons=inputs.daemons)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(rich_scenarios()))
def test_a_mutated_scenario_with_every_kind_is_planned_or_refused_in_one_line(docs: list[Any]) -> None:
    expect_well_behaved(execute([("scenario.yaml", yaml.safe_dump_all(docs))], output="json"))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(lambda t: t.encode("utf-8")))
def test_arbitrary_text_is_planned_or_refused_in_one_line(data: bytes) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # decoding is the file reader's job (tested in test_plan_input)
    expect_well_behaved(execute([("scenario.yaml", text)], output="json"))
    expect_well_behaved(execute([("scenario.yaml", "apiVersion: v1\n")], catalog_text=text, output="json"))
