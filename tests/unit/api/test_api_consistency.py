"""NodePools that pass every pattern but could never work are refused by the models, so the
controller reports them (ValidationSucceeded=False) and `joiner plan` errors (issue 14). The CEL
half of each rule, where the CRD can afford one, is in tests/e2e/data/invalid_objects.yaml."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from api.v1 import InvalidObjectError, NodePool, validate
from api.v1.common import NodePoolRequirement, Taint, duplicate_taint_messages, requirement_conflicts
from controller.cli import main
from controller.provisioning.nodepool_status import desired_status

BASE: dict[str, Any] = {
    "apiVersion": "joiner.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "p"},
    "spec": {"template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "d"}}}},
}


def pool(**edits: Any) -> dict[str, Any]:
    out = copy.deepcopy(BASE)
    for dotted, value in edits.items():
        node = out
        parts = dotted.split("__")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def req(key: str, operator: str, *values: str) -> NodePoolRequirement:
    return NodePoolRequirement(key=key, operator=operator, values=list(values))


CASES = [
    (
        pool(spec__disruption={"budgets": [{"nodes": "0", "schedule": "99 99 * * *", "duration": "1h"}]}),
        "spec.disruption.budgets[0].schedule",
        "each field in range",
    ),
    (
        pool(spec__limits={"nvidia.com/gpu": "1e400"}),
        "spec.limits.nvidia.com/gpu",
        "must be at most 2^63-1",
    ),
    (
        pool(
            spec__template__spec__requirements=[
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
                {"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["arm64", "amd64"]},
            ]
        ),
        "spec.template.spec.requirements",
        "requirements on 'kubernetes.io/arch' contradict each other: no value is allowed",
    ),
    (
        pool(
            spec__template__metadata={"labels": {"team": "ml"}},
            spec__template__spec__requirements=[{"key": "team", "operator": "NotIn", "values": ["ml"]}],
        ),
        "spec.template",
        "labels act as In requirements",
    ),
    (pool(spec__gang={"timeout": "0s"}), "spec.gang.timeout", "must be longer than zero"),
    (
        pool(spec__template__spec__taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}]),
        "spec.template.spec.taints",
        "taint 'a:NoSchedule' is listed twice",
    ),
    (
        pool(spec__template__spec__taints=[{"key": "a", "effect": "Sometimes"}]),
        "spec.template.spec.taints[0].effect",
        "NoSchedule",
    ),
]


@pytest.mark.parametrize(("manifest", "path", "message"), CASES)
def test_the_model_refuses_it_naming_the_field(manifest: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(InvalidObjectError) as info:
        validate(NodePool, manifest)
    assert any(e.path == path and message in e.message for e in info.value.errors), info.value.errors


@pytest.mark.parametrize(("manifest", "path", "message"), CASES)
def test_the_controller_reports_it_as_validation_failed(manifest: dict[str, Any], path: str, message: str) -> None:
    status, error = desired_status(pool=manifest, claims=[], registered=set(), nodeclass_exists=True)
    assert error is not None
    assert message in error
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["ValidationSucceeded"]["status"] == "False"
    assert message in conditions["ValidationSucceeded"]["message"]
    assert conditions["Ready"]["status"] == "False"


@pytest.mark.parametrize(("manifest", "path", "message"), CASES)
def test_joiner_plan_refuses_it_in_one_line(
    manifest: dict[str, Any], path: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(manifest))
    assert main(["plan", "-f", str(scenario)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert "(NodePool 'p')" in err
    assert path in err
    assert message in err


def test_a_missing_nodeclass_makes_nodeclassready_false_with_its_name() -> None:
    status, error = desired_status(pool=pool(), claims=[], registered=set(), nodeclass_exists=False)
    assert error is None
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["NodeClassReady"]["status"] == "False"
    assert conditions["NodeClassReady"]["message"] == "KWOKNodeClass 'd' does not exist"
    assert conditions["Ready"]["status"] == "False"


@pytest.mark.parametrize(
    "reqs",
    [
        [req("k", "In", "a", "b"), req("k", "NotIn", "a")],
        [req("k", "Gt", "2"), req("k", "Lt", "4")],
        [req("k", "In", "3", "x"), req("k", "Gt", "2")],
        [req("k", "NotIn", "a"), req("k", "Exists")],
        [req("k", "DoesNotExist"), req("k", "NotIn", "a")],
        [req("k", "In", "a"), req("j", "NotIn", "a")],
    ],
)
def test_requirements_that_can_be_met_together_are_fine(reqs: list[NodePoolRequirement]) -> None:
    assert requirement_conflicts(reqs) == []


@pytest.mark.parametrize(
    "reqs",
    [
        [req("k", "In", "a"), req("k", "NotIn", "a")],
        [req("k", "In", "a"), req("k", "In", "b")],
        [req("k", "Gt", "8"), req("k", "Lt", "2")],
        [req("k", "Gt", "2"), req("k", "Lt", "3")],
        [req("k", "In", "x"), req("k", "Gt", "2")],
        [req("k", "In", "2"), req("k", "Gt", "2")],
        [req("k", "Exists"), req("k", "DoesNotExist")],
    ],
)
def test_requirements_no_node_could_meet_are_refused(reqs: list[NodePoolRequirement]) -> None:
    assert len(requirement_conflicts(reqs)) == 1


def test_taints_may_repeat_a_key_with_another_effect() -> None:
    taints = [Taint(key="a", effect="NoSchedule"), Taint(key="a", effect="NoExecute")]
    assert duplicate_taint_messages(taints) == []
