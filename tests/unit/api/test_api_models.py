"""The joiner.sh/v1 models: what they accept, what they reject (and how they say it), defaults,
Karpenter compatibility, round trips, and the small pure helpers that come with them."""

from __future__ import annotations

import ast
import copy
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from api.v1 import (
    Budget,
    Condition,
    InvalidObjectError,
    KWOKNodeClass,
    NodeClaim,
    NodePool,
    NodePoolStatus,
    conditions,
    format_duration,
    format_validation_error,
    is_condition_true,
    labels,
    parse_duration,
    parse_object,
    parse_quantity,
    remove_condition,
    restricted_key_messages,
    set_condition,
    to_manifest,
    validate,
)
from api.v1.common import NODECLAIM_KEY_RULES, NODEPOOL_KEY_RULES
from tests.e2e.data.validation_cases import (
    InvalidCase,
    convert_karpenter_nodepool,
    load_bases,
    load_invalid_cases,
    load_karpenter_nodepool,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
CASES = load_invalid_cases()
T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def minimal_nodepool(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "minimal"},
        "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}}},
            **spec,
        },
    }


def expect_rejected(manifest: dict[str, Any], *texts: str) -> InvalidObjectError:
    with pytest.raises(InvalidObjectError) as caught:
        parse_object(manifest)
    message = str(caught.value)
    for text in texts:
        assert text in message, f"{text!r} not in error:\n{message}"
    return caught.value


# --- examples and the test data -----------------------------------------------------------------


def test_there_are_examples_for_every_pool_the_docs_promise() -> None:
    assert {path.name for path in EXAMPLES} >= {
        "h100-training.yaml",
        "l4-inference.yaml",
        "cpu.yaml",
        "kwok-nodeclass.yaml",
        "h100-warm.yaml",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_validates(path: Path) -> None:
    documents = load_documents(path)
    assert documents
    for document in documents:
        obj = parse_object(document)
        assert obj.metadata.name


def test_example_pools_reference_the_example_node_class() -> None:
    classes = {
        obj.name
        for path in EXAMPLES
        for obj in map(parse_object, load_documents(path))
        if isinstance(obj, KWOKNodeClass)
    }
    pools = [obj for path in EXAMPLES for obj in map(parse_object, load_documents(path)) if isinstance(obj, NodePool)]
    assert len(pools) == 4
    for pool in pools:
        ref = pool.spec.template.spec.node_class_ref
        assert (ref.group, ref.kind) == ("joiner.sh", "KWOKNodeClass")
        assert ref.name in classes


def test_h100_warm_example_is_what_it_says() -> None:
    pool = parse_object(load_documents(ROOT / "deploy/examples/h100-warm.yaml")[0])
    assert isinstance(pool, NodePool)
    capacity = pool.spec.capacity
    assert capacity is not None
    assert capacity.buffer is not None
    assert capacity.buffer.gpus == 8
    assert [(s.schedule, s.duration, s.buffer.gpus) for s in capacity.schedules] == [("30 8 * * 1-5", "10h", 16)]
    assert capacity.budget is not None
    assert capacity.budget.max_price_per_hour == "250.00"
    assert pool.spec.limits["nodes"] == 10


def test_h100_example_is_what_it_says() -> None:
    pool = parse_object(load_documents(ROOT / "deploy/examples/h100-training.yaml")[0])
    assert isinstance(pool, NodePool)
    requirements = {req.key: req for req in pool.spec.template.spec.requirements}
    assert requirements[labels.LABEL_GPU_NAME].values == ["H100"]
    assert set(requirements[labels.LABEL_CAPACITY_TYPE].values) == {"on-demand", "reserved"}
    assert [(t.key, t.effect) for t in pool.spec.template.spec.taints] == [("nvidia.com/gpu", "NoSchedule")]
    assert pool.spec.disruption.consolidation_policy == "WhenEmpty"
    assert labels.RESOURCE_NVIDIA_GPU in pool.spec.limits


@pytest.mark.parametrize("name", sorted(load_bases()))
def test_base_objects_of_the_invalid_cases_are_valid(name: str) -> None:
    parse_object(load_bases()[name])


# --- rejections ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_malformed_object_is_rejected_naming_the_field(case: InvalidCase) -> None:
    error = expect_rejected(case.manifest, *case.expect)
    assert error.kind == case.kind
    assert error.name == f"invalid-{case.name}"
    # the first expected text is the field path; some error must point at or inside it
    assert any(item.path.startswith(case.expect[0]) or case.expect[0].startswith(item.path) for item in error.errors), (
        error.errors
    )


def test_there_are_enough_invalid_cases() -> None:
    assert len(CASES) >= 15
    assert len({case.name for case in CASES}) == len(CASES)
    assert {case.kind for case in CASES} == {"NodePool", "NodeClaim", "KWOKNodeClass"}


def test_every_problem_is_reported_at_once() -> None:
    manifest = minimal_nodepool(weight=0, limits={"cpu": "lots"})
    error = expect_rejected(manifest, "spec.weight", "spec.limits.cpu")
    assert len(error.errors) == 2


def test_unknown_kind_and_api_version_are_rejected() -> None:
    expect_rejected({"apiVersion": "joiner.sh/v1", "kind": "Provisioner", "metadata": {"name": "x"}}, "kind")
    manifest = minimal_nodepool()
    manifest["apiVersion"] = "karpenter.sh/v1"
    expect_rejected(manifest, "apiVersion", "joiner.sh/v1")


def test_pydantic_errors_format_with_json_paths() -> None:
    manifest = minimal_nodepool(disruption={"budgets": [{"nodes": "10%"}, {"nodes": "200%"}]})
    with pytest.raises(ValidationError) as caught:
        NodePool.model_validate(manifest)
    text = format_validation_error(caught.value)
    assert text.startswith("spec.disruption.budgets[1].nodes: must be a node count")
    assert "'200%'" in text


def test_validate_with_a_known_model() -> None:
    pool = validate(NodePool, minimal_nodepool(weight=5))
    assert pool.spec.weight == 5
    with pytest.raises(InvalidObjectError, match=r"spec\.weight"):
        validate(NodePool, minimal_nodepool(weight=500))


@pytest.mark.parametrize(
    "key",
    [
        "joiner.sh/capacity-type",
        "joiner.sh/gpu-name",
        "joiner.sh/gpu-count",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "node.kubernetes.io/custom",
        "nvidia.com/gpu.product",
        "karpenter.sh/capacity-type",
        "karpenter.k8s.aws/instance-family",
        "kops.k8s.io/instancegroup",
        "example.com/team",
        "team",
    ],
)
def test_requirement_keys_a_nodepool_may_use(key: str) -> None:
    manifest = minimal_nodepool()
    manifest["spec"]["template"]["spec"]["requirements"] = [{"key": key, "operator": "Exists"}]
    parse_object(manifest)
    assert restricted_key_messages(key, NODEPOOL_KEY_RULES) == []


@pytest.mark.parametrize(
    "key",
    [
        "joiner.sh/nodepool",
        "joiner.sh/gang",
        "joiner.sh/anything",
        "sub.joiner.sh/anything",
        "kubernetes.io/hostname",
        "node-role.kubernetes.io/worker",
        "k8s.io/anything",
        "scheduling.k8s.io/group-name",
    ],
)
def test_requirement_keys_a_nodepool_may_not_use(key: str) -> None:
    manifest = minimal_nodepool()
    manifest["spec"]["template"]["spec"]["requirements"] = [{"key": key, "operator": "Exists"}]
    expect_rejected(manifest, "spec.template.spec.requirements[0].key", "restricted")


def test_nodeclaims_may_carry_the_nodepool_and_gang_requirements() -> None:
    assert restricted_key_messages(labels.LABEL_NODEPOOL, NODECLAIM_KEY_RULES) == []
    assert restricted_key_messages(labels.LABEL_GANG, NODECLAIM_KEY_RULES) == []
    assert restricted_key_messages(labels.LABEL_HOSTNAME, NODECLAIM_KEY_RULES) != []


def test_requirement_key_must_be_a_qualified_name() -> None:
    manifest = minimal_nodepool()
    manifest["spec"]["template"]["spec"]["requirements"] = [{"key": "Bad Key/", "operator": "Exists"}]
    expect_rejected(manifest, "spec.template.spec.requirements[0].key", "qualified name")


def test_template_label_values_are_label_values() -> None:
    manifest = minimal_nodepool()
    manifest["spec"]["template"]["metadata"] = {"labels": {"team": "not a label value!"}}
    expect_rejected(manifest, "spec.template.metadata.labels", "invalid value")


def test_budget_reasons_may_not_repeat() -> None:
    manifest = minimal_nodepool(disruption={"budgets": [{"nodes": "1", "reasons": ["Empty", "Empty"]}]})
    expect_rejected(manifest, "spec.disruption.budgets[0].reasons")


def test_spec_rejects_unknown_fields_metadata_keeps_them_status_ignores_them() -> None:
    manifest = minimal_nodepool()
    manifest["metadata"].update({"uid": "1234", "someFutureField": {"a": 1}})
    manifest["status"] = {"nodes": 3, "someFutureStatus": True}
    pool = parse_object(manifest)
    assert isinstance(pool, NodePool)
    dumped = to_manifest(pool)
    assert dumped["metadata"]["someFutureField"] == {"a": 1}
    assert dumped["metadata"]["uid"] == "1234"
    assert dumped["status"]["nodes"] == 3
    assert "someFutureStatus" not in dumped["status"]
    manifest["spec"]["wieght"] = 3
    expect_rejected(manifest, "spec.wieght", "unknown field")


# --- defaults -------------------------------------------------------------------------------------


def test_defaults_of_a_minimal_nodepool() -> None:
    pool = parse_object(minimal_nodepool())
    assert isinstance(pool, NodePool)
    assert pool.spec.template.spec.expire_after == "720h"
    assert pool.spec.template.spec.termination_grace_period is None
    assert pool.spec.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert pool.spec.disruption.consolidate_after == "0s"
    assert pool.spec.disruption.budgets == [Budget(nodes="10%")]
    assert pool.spec.weight is None
    assert pool.spec.limits == {}
    assert pool.spec.template.spec.requirements == []


def test_gang_defaults_are_optional_and_default_to_one_zone() -> None:
    pool = parse_object(minimal_nodepool())
    assert isinstance(pool, NodePool)
    assert pool.spec.gang is None
    pool = parse_object(minimal_nodepool(gang={}))
    assert isinstance(pool, NodePool)
    assert pool.spec.gang is not None
    assert pool.spec.gang.same_zone is True
    assert pool.spec.gang.timeout is None
    pool = parse_object(minimal_nodepool(gang={"timeout": "20m", "sameZone": False}))
    assert isinstance(pool, NodePool)
    assert pool.spec.gang is not None
    assert (pool.spec.gang.timeout, pool.spec.gang.same_zone) == ("20m", False)


def test_gang_defaults_are_validated() -> None:
    expect_rejected(minimal_nodepool(gang={"timeout": "soon"}), "spec.gang.timeout")
    expect_rejected(minimal_nodepool(gang={"timeout": "Never"}), "spec.gang.timeout")
    expect_rejected(minimal_nodepool(gang={"zone": "a"}), "spec.gang.zone", "unknown field")


def test_default_budget_is_not_shared_between_pools() -> None:
    first = NodePool.model_validate(minimal_nodepool())
    second = NodePool.model_validate(minimal_nodepool())
    first.spec.disruption.budgets[0].nodes = "0"
    assert second.spec.disruption.budgets[0].nodes == "10%"


def test_budget_nodes_default_to_ten_percent() -> None:
    pool = NodePool.model_validate(minimal_nodepool(disruption={"budgets": [{"reasons": ["Drifted"]}]}))
    assert pool.spec.disruption.budgets[0].nodes == "10%"


def test_defaults_of_nodeclaim_and_kwoknodeclass() -> None:
    claim = parse_object(load_bases()["nodeclaim"])
    assert isinstance(claim, NodeClaim)
    assert claim.spec.expire_after == "720h"
    node_class = parse_object({"apiVersion": "joiner.sh/v1", "kind": "KWOKNodeClass", "metadata": {"name": "x"}})
    assert isinstance(node_class, KWOKNodeClass)
    assert node_class.spec.registration_delay == "0s"
    assert node_class.spec.catalog is None
    assert node_class.spec.failures.insufficient_capacity == []


def test_kwoknodeclass_failure_injection_uses_api_names() -> None:
    node_class = parse_object(
        {
            "apiVersion": "joiner.sh/v1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": "flaky"},
            "spec": {
                "catalog": "joiner-system/catalog",
                "failures": {
                    "insufficientCapacity": [{"instanceType": "p5.48xlarge", "capacityType": "spot"}, {}],
                    "neverRegister": ["g6.xlarge"],
                    "neverReady": ["g5.xlarge"],
                    "hideGPUs": ["p4d.24xlarge"],
                },
            },
        }
    )
    assert isinstance(node_class, KWOKNodeClass)
    failures = node_class.spec.failures
    assert failures.insufficient_capacity[0].instance_type == "p5.48xlarge"
    assert failures.insufficient_capacity[1].zone is None
    assert failures.hide_gpus == ["p4d.24xlarge"]
    assert to_manifest(node_class)["spec"]["failures"]["hideGPUs"] == ["p4d.24xlarge"]


# --- Karpenter compatibility ----------------------------------------------------------------------


def test_karpenter_nodepool_is_not_valid_unchanged() -> None:
    expect_rejected(load_karpenter_nodepool(), "apiVersion")
    only_api_version = load_karpenter_nodepool()
    only_api_version["apiVersion"] = "joiner.sh/v1"
    expect_rejected(only_api_version, "spec.template.spec.nodeClassRef.group")


def test_karpenter_nodepool_converts_by_changing_api_version_and_node_class_ref() -> None:
    original = load_karpenter_nodepool()
    converted = convert_karpenter_nodepool(original)
    pool = parse_object(converted)
    assert isinstance(pool, NodePool)
    dumped = to_manifest(pool)
    # nothing the user wrote was lost or changed
    assert dumped["metadata"] == original["metadata"]
    for field in ("requirements", "taints", "startupTaints", "expireAfter", "terminationGracePeriod"):
        assert dumped["spec"]["template"]["spec"][field] == original["spec"]["template"]["spec"][field]
    assert dumped["spec"]["template"]["metadata"] == original["spec"]["template"]["metadata"]
    assert dumped["spec"]["disruption"] == original["spec"]["disruption"]
    assert dumped["spec"]["limits"] == original["spec"]["limits"]
    assert dumped["spec"]["weight"] == original["spec"]["weight"]


def test_karpenter_label_keys_map_to_joiner_labels() -> None:
    assert labels.normalize_label_key("karpenter.sh/capacity-type") == labels.LABEL_CAPACITY_TYPE
    assert labels.normalize_label_key("karpenter.sh/nodepool") == labels.LABEL_NODEPOOL
    assert labels.normalize_label_key("kubernetes.io/arch") == "kubernetes.io/arch"


# --- round trips ----------------------------------------------------------------------------------


def apiserver_shaped_nodepool() -> dict[str, Any]:
    """A NodePool as `kubectl get -o json` returns it: defaults filled, server metadata, status."""
    manifest = minimal_nodepool(weight=10, limits={"cpu": 100, "memory": "400Gi", "nvidia.com/gpu": 8})
    manifest["metadata"] = {
        "name": "minimal",
        "uid": "0b7a3c58-1c1c-4c5e-9a59-2f8f8a8c2d11",
        "resourceVersion": "4711",
        "generation": 2,
        "creationTimestamp": "2025-01-06T09:00:00Z",
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        "managedFields": [
            {
                "apiVersion": "joiner.sh/v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:weight": {}}},
                "manager": "kubectl-client-side-apply",
                "operation": "Update",
                "time": "2025-01-06T09:00:00Z",
            }
        ],
    }
    manifest["spec"]["template"]["spec"]["expireAfter"] = "720h"
    manifest["spec"]["disruption"] = {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "10%"}],
    }
    manifest["status"] = {
        "nodes": 2,
        "resources": {"cpu": "96", "memory": "393216Mi", "nvidia.com/gpu": "8"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "message": "",
                "lastTransitionTime": "2025-01-06T09:00:05Z",
                "observedGeneration": 2,
            }
        ],
    }
    return manifest


def round_trip_inputs() -> list[tuple[str, dict[str, Any]]]:
    out = [(path.name, doc) for path in EXAMPLES for doc in load_documents(path)]
    out.append(("karpenter", convert_karpenter_nodepool(load_karpenter_nodepool())))
    out.append(("apiserver-shaped", apiserver_shaped_nodepool()))
    out.extend((name, base) for name, base in load_bases().items())
    return out


@pytest.mark.parametrize(("name", "manifest"), round_trip_inputs(), ids=[n for n, _ in round_trip_inputs()])
def test_round_trip_is_stable(name: str, manifest: dict[str, Any]) -> None:
    model = type(parse_object(manifest))
    first = model.model_validate(manifest)
    dumped = first.model_dump(by_alias=True, exclude_none=True)
    second = model.model_validate(dumped)
    assert second == first
    assert second.model_dump(by_alias=True, exclude_none=True) == dumped
    as_json = json.loads(json.dumps(to_manifest(first)))
    assert to_manifest(model.model_validate(as_json)) == as_json


def test_apiserver_shaped_object_dumps_back_to_itself() -> None:
    manifest = apiserver_shaped_nodepool()
    assert to_manifest(parse_object(manifest)) == manifest


def test_snake_case_names_are_accepted_too() -> None:
    pool = NodePool.model_validate(
        {
            "spec": {
                "template": {
                    "spec": {
                        "node_class_ref": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"},
                        "expire_after": "Never",
                    }
                }
            }
        }
    )
    assert pool.spec.template.spec.expire_after == "Never"
    assert to_manifest(pool)["spec"]["template"]["spec"]["expireAfter"] == "Never"
    assert to_manifest(pool)["apiVersion"] == "joiner.sh/v1"


# --- durations, percentages, quantities (properties) ---------------------------------------------

hours = st.integers(min_value=0, max_value=100_000)
minutes = st.integers(min_value=0, max_value=59)
seconds = st.integers(min_value=0, max_value=59)


@st.composite
def duration_strings(draw: st.DrawFn) -> tuple[str, timedelta]:
    h, m, s = draw(hours), draw(minutes), draw(seconds)
    parts = [(h, "h"), (m, "m"), (s, "s")]
    # any non-empty subset of the units, in order; zeros may be written out
    chosen = draw(st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=3, unique=True).map(sorted))
    text = "".join(f"{parts[i][0]}{parts[i][1]}" for i in chosen)
    value = timedelta(hours=h if 0 in chosen else 0, minutes=m if 1 in chosen else 0, seconds=s if 2 in chosen else 0)
    return text, value


@given(duration_strings())
def test_any_valid_duration_parses_and_is_accepted_everywhere(case: tuple[str, timedelta]) -> None:
    text, value = case
    assert parse_duration(text) == value
    pool = NodePool.model_validate(minimal_nodepool(disruption={"consolidateAfter": text, "budgets": [{"nodes": "1"}]}))
    assert pool.spec.disruption.consolidate_after == text
    pool.spec.template.spec.expire_after = text
    if value > timedelta(0):
        revalidated = NodePool.model_validate(pool.model_dump(by_alias=True, exclude_none=True))
        assert revalidated.spec.template.spec.expire_after == text
    else:  # a node that expires at once would be replaced for ever (issue 14)
        with pytest.raises(ValidationError, match="must be longer than zero"):
            NodePool.model_validate(pool.model_dump(by_alias=True, exclude_none=True))


@given(st.integers(min_value=0, max_value=10**9))
def test_format_and_parse_duration_round_trip(total_seconds: int) -> None:
    value = timedelta(seconds=total_seconds)
    text = format_duration(value)
    assert parse_duration(text) == value
    assert format_duration(parse_duration(text)) == text


def test_never_is_a_duration_of_none() -> None:
    assert parse_duration("Never") is None
    assert format_duration(None) == "Never"


@pytest.mark.parametrize("text", ["", "1d", "1.5h", "30m1h", "1h1h", "-5m", "5", "never", " 1h", "1h\n"])
def test_malformed_durations_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)
    expect_rejected(
        minimal_nodepool(disruption={"consolidateAfter": text}),
        "spec.disruption.consolidateAfter",
        "duration",
    )


@given(st.integers(min_value=0, max_value=100))
def test_any_percentage_up_to_100_is_a_budget(percent: int) -> None:
    budget = Budget(nodes=f"{percent}%")
    assert budget.nodes == f"{percent}%"


@given(st.integers(min_value=101, max_value=10**6))
def test_percentages_above_100_are_not_budgets(percent: int) -> None:
    expect_rejected(
        minimal_nodepool(disruption={"budgets": [{"nodes": f"{percent}%"}]}),
        "spec.disruption.budgets[0].nodes",
    )


@given(st.integers(min_value=0, max_value=10**6))
def test_any_node_count_is_a_budget(count: int) -> None:
    assert Budget(nodes=str(count)).nodes == str(count)


@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "m"]),
)
def test_quantities_parse_to_their_value(number: int, suffix: str) -> None:
    factor = {
        "": Decimal(1),
        "k": Decimal(10**3),
        "M": Decimal(10**6),
        "G": Decimal(10**9),
        "Ki": Decimal(2**10),
        "Mi": Decimal(2**20),
        "Gi": Decimal(2**30),
        "Ti": Decimal(2**40),
        "m": Decimal("0.001"),
    }[suffix]
    assert parse_quantity(f"{number}{suffix}") == number * factor
    pool = NodePool.model_validate(minimal_nodepool(limits={"memory": f"{number}{suffix}"}))
    assert pool.spec.limits["memory"] == f"{number}{suffix}"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        ("1e3", Decimal(1000)),
        ("2E-2", Decimal("0.02")),
        (8, 8),
    ],
)
def test_quantity_forms(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "lots", "-1", "1.2.3", "1Gb", "Gi", "1 Gi", True, 0.5])
def test_malformed_quantities_are_rejected(text: Any) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)
    expect_rejected(minimal_nodepool(limits={"cpu": text}), "spec.limits.cpu")


@pytest.mark.parametrize(
    "schedule", ["0 9 * * 1-5", "*/15 * * * *", "0 9 * * mon-fri", "30 8 1,15 * *", "@daily", "@hourly"]
)
def test_cron_schedules_are_accepted(schedule: str) -> None:
    budget = Budget(nodes="0", schedule=schedule, duration="1h")
    assert budget.schedule == schedule


# --- conditions -----------------------------------------------------------------------------------


def test_set_condition_adds_then_keeps_transition_time_until_status_changes() -> None:
    status = NodePoolStatus()
    assert set_condition(status, type=conditions.READY, value=False, reason="NodeClassNotReady", now=T0)
    assert status.conditions == [
        Condition(type="Ready", status="False", reason="NodeClassNotReady", last_transition_time=T0)
    ]
    later = T0 + timedelta(minutes=1)
    assert not set_condition(status, type=conditions.READY, value="False", reason="NodeClassNotReady", now=later)
    assert set_condition(
        status, type=conditions.READY, value=False, reason="NodeClassNotFound", message="create it", now=later
    )
    assert status.conditions[0].last_transition_time == T0
    assert status.conditions[0].message == "create it"
    assert set_condition(status, type=conditions.READY, value=True, reason="Ready", now=later, observed_generation=3)
    assert status.conditions[0].last_transition_time == later
    assert status.conditions[0].observed_generation == 3
    assert is_condition_true(status, conditions.READY)


def test_conditions_keep_their_order_and_can_be_removed() -> None:
    status = NodePoolStatus()
    for type_ in conditions.NODEPOOL_CONDITION_TYPES:
        set_condition(status, type=type_, value=True, reason="Fine", now=T0)
    set_condition(status, type=conditions.VALIDATION_SUCCEEDED, value=False, reason="Invalid", now=T0)
    assert [c.type for c in status.conditions] == list(conditions.NODEPOOL_CONDITION_TYPES)
    assert remove_condition(status, conditions.NODE_CLASS_READY)
    assert not remove_condition(status, conditions.NODE_CLASS_READY)
    assert conditions.get_condition(status, conditions.NODE_CLASS_READY) is None
    assert not is_condition_true(None, conditions.READY)


def test_with_condition_does_not_touch_its_input() -> None:
    before = [Condition(type="Launched", status="True", reason="Launched", last_transition_time=T0)]
    snapshot = copy.deepcopy(before)
    after = conditions.with_condition(before, type=conditions.REGISTERED, status=True, reason="Registered", now=T0)
    assert before == snapshot
    assert [c.type for c in after] == ["Launched", "Registered"]


def test_condition_reason_must_be_camel_case() -> None:
    status = NodePoolStatus()
    with pytest.raises(ValueError, match="reason"):
        set_condition(status, type=conditions.READY, value=True, reason="not ok!", now=T0)


def test_nodeclaim_condition_types_are_the_documented_ones() -> None:
    assert conditions.NODECLAIM_CONDITION_TYPES == (
        "Launched",
        "Registered",
        "Initialized",
        "Ready",
        "Consolidatable",
        "Drifted",
        "Drained",
        "GangAdmitted",
        "GPUIdle",
    )


# --- well-known names and layering --------------------------------------------------------------


def test_well_known_names() -> None:
    assert labels.LABEL_NODEPOOL == "joiner.sh/nodepool"
    assert labels.CAPACITY_TYPES == ("spot", "on-demand", "reserved")
    assert (labels.TAINT_UNREGISTERED, labels.TAINT_UNREGISTERED_EFFECT) == (
        "joiner.sh/unregistered",
        "NoSchedule",
    )
    assert (labels.TAINT_DISRUPTED, labels.TAINT_DISRUPTED_EFFECT) == ("joiner.sh/disrupted", "NoSchedule")
    assert labels.FINALIZER_TERMINATION == "joiner.sh/termination"
    assert labels.ANNOTATION_DO_NOT_DISRUPT == "joiner.sh/do-not-disrupt"
    assert labels.ANNOTATION_GANG_SIZE == "joiner.sh/gang-size"
    assert labels.ANNOTATION_KWOK_NODE == "kwok.x-k8s.io/node"
    assert labels.RESOURCE_NVIDIA_GPU == "nvidia.com/gpu"


FORBIDDEN_IN_API = {
    "asyncio",
    "socket",
    "subprocess",
    "kubernetes_asyncio",
    "aiohttp",
    "aioboto3",
    "controller",
}


@pytest.mark.parametrize("path", sorted((ROOT / "api").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_api_imports_nothing_that_does_io(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN_IN_API


def test_at_most_100_template_labels() -> None:
    manifest = minimal_nodepool()
    manifest["spec"]["template"]["metadata"] = {"labels": {f"example.com/l{i}": "x" for i in range(101)}}
    expect_rejected(manifest, "spec.template.metadata.labels", "at most 100 labels")
    manifest["spec"]["template"]["metadata"]["labels"].pop("example.com/l0")
    parse_object(manifest)


def test_kinds_map_each_kind_to_its_model_and_import_a_model_when_its_kind_is_looked_up() -> None:
    """`KINDS` reads like the mapping it was (kind -> model class, in the same order), but a process
    that validates one kind imports only that kind's model module."""
    import subprocess
    import sys

    from api.v1.kwoknodeclass import KWOKNodeClass
    from api.v1.nodeclaim import NodeClaim
    from api.v1.nodepool import NodePool
    from api.v1.validation import KINDS

    assert dict(KINDS) == {"NodePool": NodePool, "NodeClaim": NodeClaim, "KWOKNodeClass": KWOKNodeClass}
    assert list(KINDS) == ["NodePool", "NodeClaim", "KWOKNodeClass"]
    assert len(KINDS) == 3
    assert "Node" not in KINDS
    probe = (
        "import sys\n"
        "from api.v1.validation import parse_object\n"
        "pool = {'apiVersion': 'joiner.sh/v1', 'kind': 'NodePool', 'metadata': {'name': 'p'}, 'spec': {'template':"
        " {'spec': {'nodeClassRef': {'group': 'joiner.sh', 'kind': 'KWOKNodeClass', 'name': 'default'}}}}}\n"
        "print(type(parse_object(pool)).__name__, sorted(m for m in ('api.v1.nodeclaim', 'api.v1.kwoknodeclass')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "NodePool []", done.stdout + done.stderr
