"""The generated CustomResourceDefinitions: committed files match the models, every schema is
structural, and `kubectl get` shows the columns an operator needs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from api import crdgen
from api.v1 import KWOKNodeClass, NodeClaim, NodePool

ROOT = Path(__file__).resolve().parents[3]
CRD_DIR = ROOT / "deploy" / "crds"
FILES = {
    "NodePool": "joiner.sh_nodepools.yaml",
    "NodeClaim": "joiner.sh_nodeclaims.yaml",
    "KWOKNodeClass": "joiner.sh_kwoknodeclasses.yaml",
    "EC2NodeClass": "joiner.sh_ec2nodeclasses.yaml",
    "GCENodeClass": "joiner.sh_gcenodeclasses.yaml",
    "AKSNodeClass": "joiner.sh_aksnodeclasses.yaml",
}


def committed(kind: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((CRD_DIR / FILES[kind]).read_text(encoding="utf-8"))
    return document


def schema_of(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = committed(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def get_path(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = schema
    for part in dotted.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


# --- drift -------------------------------------------------------------------------------------


def test_committed_crds_are_what_the_models_generate() -> None:
    problems = crdgen.check(CRD_DIR)
    assert problems == [], "run `python -m api.crdgen`:\n" + "\n".join(problems)


def test_check_command_passes_on_the_committed_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert crdgen.main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_check_command_fails_with_a_diff_when_a_file_drifted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert crdgen.main(["--output-dir", str(tmp_path)]) == 0
    path = tmp_path / FILES["NodePool"]
    path.write_text(path.read_text(encoding="utf-8").replace("maximum: 100\n", "maximum: 1000\n", 1), encoding="utf-8")
    (tmp_path / "joiner.sh_provisioners.yaml").write_text("---\n", encoding="utf-8")
    assert crdgen.main(["--check", "--output-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    removed = [line for line in err.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in err.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert [line.strip("- ") for line in removed] == ["maximum: 1000"]
    assert [line.strip("+ ") for line in added] == ["maximum: 100"]
    assert "joiner.sh_provisioners.yaml is not generated" in err
    assert "run `python -m api.crdgen`" in err


def test_check_command_reports_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crdgen.main(["--check", "--output-dir", str(tmp_path)]) == 1
    assert f"{FILES['NodeClaim']} is missing" in capsys.readouterr().err


def test_generation_is_deterministic() -> None:
    assert crdgen.generate() == crdgen.generate()
    assert sorted(crdgen.generate()) == sorted(FILES.values())


# --- structure ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(FILES))
def test_crd_identity(kind: str) -> None:
    crd = committed(kind)
    plural = FILES[kind].removeprefix("joiner.sh_").removesuffix(".yaml")
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.joiner.sh"
    spec = crd["spec"]
    assert spec["group"] == "joiner.sh"
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == plural
    assert spec["names"]["categories"] == ["joiner"]
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}


def test_short_names() -> None:
    assert committed("NodePool")["spec"]["names"]["shortNames"] == ["np"]
    assert committed("NodeClaim")["spec"]["names"]["shortNames"] == ["nc"]
    assert committed("KWOKNodeClass")["spec"]["names"]["shortNames"] == ["kwoknc"]


@pytest.mark.parametrize("kind", sorted(FILES))
def test_every_schema_node_is_structural(kind: str) -> None:
    for path, node in walk(schema_of(kind)):
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        assert "type" in node or int_or_string, f"{path} has no type"
        for banned in ("$ref", "$defs", "definitions", "title", "nullable", "const", "patternProperties"):
            assert banned not in node, f"{path} has {banned}"
        if int_or_string:
            assert "type" not in node
            assert node.get("anyOf") == [{"type": "integer"}, {"type": "string"}], path
        else:
            for junctor in ("anyOf", "oneOf", "allOf"):
                assert junctor not in node, path
        assert not isinstance(node.get("additionalProperties"), bool), path
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("type") in (None, "object", "array", "string", "integer", "number", "boolean"), path
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), f"{path} has no items schema"
        for name in node.get("required", []):
            assert name in node.get("properties", {}), f"{path} requires unknown {name}"


@pytest.mark.parametrize("kind", sorted(FILES))
def test_top_level_shape(kind: str) -> None:
    schema = schema_of(kind)
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert schema["properties"]["metadata"] == {"type": "object"}
    if kind == "KWOKNodeClass":
        assert "required" not in schema  # spec defaults to {}: every field has a default
    else:
        assert schema["required"] == ["spec"]


@pytest.mark.parametrize("kind", sorted(FILES))
def test_every_cel_rule_has_a_message_and_a_bounded_cost(kind: str) -> None:
    rules = 0
    for path, node in walk(schema_of(kind)):
        for rule in node.get("x-kubernetes-validations", []):
            rules += 1
            assert rule["message"], f"{path}: {rule['rule']} has no message"
            assert set(rule) <= {"rule", "message", "fieldPath", "reason", "messageExpression"}
            if ".all(" in rule["rule"]:
                # iterating rules need a bound, or the apiserver rejects them for estimated cost
                assert "maxItems" in node or "maxProperties" in node, f"{path}: unbounded {rule['rule']}"
            if "matches(" in rule["rule"] and node.get("type") == "string":
                assert "maxLength" in node, f"{path}: unbounded string matched by {rule['rule']}"
    assert rules > 0 or kind == "KWOKNodeClass"


def test_nodeclaim_spec_is_immutable() -> None:
    rules = schema_of("NodeClaim")["properties"]["spec"]["x-kubernetes-validations"]
    assert {"rule": "self == oldSelf", "message": rules[0]["message"]} == rules[0]
    assert "immutable" in rules[0]["message"]


def test_defaults_match_the_models() -> None:
    nodepool = schema_of("NodePool")
    assert get_path(nodepool, "spec.template.spec.expireAfter")["default"] == "720h"
    assert get_path(nodepool, "spec.disruption")["default"] == {}
    disruption = get_path(nodepool, "spec.disruption")["properties"]
    assert disruption["consolidationPolicy"]["default"] == "WhenEmptyOrUnderutilized"
    assert disruption["consolidateAfter"]["default"] == "0s"
    assert disruption["budgets"]["default"] == [{"nodes": "10%"}]
    assert disruption["budgets"]["items"]["properties"]["nodes"]["default"] == "10%"
    defaults = NodePool.model_validate(
        {"spec": {"template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "K", "name": "n"}}}}}
    ).spec
    assert defaults.template.spec.expire_after == "720h"
    assert defaults.disruption.model_dump(by_alias=True, exclude_none=True) == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "10%"}],
    }
    assert get_path(schema_of("NodeClaim"), "spec.expireAfter")["default"] == "720h"
    assert get_path(schema_of("KWOKNodeClass"), "spec.registrationDelay")["default"] == "0s"
    assert get_path(schema_of("KWOKNodeClass"), "spec")["default"] == {}


def test_validation_keywords_are_in_the_schema() -> None:
    nodepool = schema_of("NodePool")
    weight = get_path(nodepool, "spec.weight")
    assert (weight["type"], weight["minimum"], weight["maximum"]) == ("integer", 1, 100)
    requirements = get_path(nodepool, "spec.template.spec.requirements")
    assert requirements["maxItems"] == 100
    requirement = requirements["items"]
    assert requirement["properties"]["operator"]["enum"] == [
        "In",
        "NotIn",
        "Exists",
        "DoesNotExist",
        "Gt",
        "Lt",
    ]
    assert (
        requirement["properties"]["minValues"]["minimum"],
        requirement["properties"]["minValues"]["maximum"],
    ) == (
        1,
        50,
    )
    assert requirement["required"] == ["key", "operator"]
    effect = get_path(nodepool, "spec.template.spec.taints.[].effect")
    assert effect["enum"] == ["NoSchedule", "PreferNoSchedule", "NoExecute"]
    policy = get_path(nodepool, "spec.disruption.consolidationPolicy")
    assert policy["enum"] == ["WhenEmpty", "WhenEmptyOrUnderutilized"]
    reasons = get_path(nodepool, "spec.disruption.budgets.[].reasons")
    assert reasons["items"]["enum"] == ["Empty", "Underutilized", "Drifted", "Expired"]
    ref = get_path(nodepool, "spec.template.spec.nodeClassRef")
    assert ref["required"] == ["group", "kind", "name"]
    limits = get_path(nodepool, "spec.limits")["additionalProperties"]
    assert limits["x-kubernetes-int-or-string"] is True
    assert "pattern" in limits
    assert get_path(nodepool, "status.conditions")["x-kubernetes-list-map-keys"] == ["type"]


# --- printer columns ----------------------------------------------------------------------------


def columns(kind: str) -> list[tuple[str, str, str, int]]:
    return [
        (c["name"], c["jsonPath"], c["type"], c.get("priority", 0))
        for c in committed(kind)["spec"]["versions"][0]["additionalPrinterColumns"]
    ]


READY = '.status.conditions[?(@.type=="Ready")].status'


def test_nodepool_printer_columns() -> None:
    assert columns("NodePool") == [
        ("NodeClass", ".spec.template.spec.nodeClassRef.name", "string", 0),
        ("Nodes", ".status.nodes", "integer", 0),
        ("GPU", ".status.resources.nvidia\\.com/gpu", "string", 0),
        ("$/H", ".status.pricePerHour", "string", 0),
        ("Limit", ".status.mostUsedLimit", "string", 0),
        ("Ready", READY, "string", 0),
        ("Status", ".status.reason", "string", 0),
        ("Age", ".metadata.creationTimestamp", "date", 0),
        ("Weight", ".spec.weight", "integer", 1),
        ("CPU", ".status.resources.cpu", "string", 1),
        ("Memory", ".status.resources.memory", "string", 1),
        ("Buffer", ".status.buffer.wanted", "integer", 1),
        ("Buffer-Ready", ".status.buffer.ready", "integer", 1),
        ("Forecast", ".status.buffer.forecast", "integer", 1),
    ]


def test_nodeclaim_printer_columns() -> None:
    assert columns("NodeClaim") == [
        ("Type", ".metadata.labels.node\\.kubernetes\\.io/instance-type", "string", 0),
        ("Capacity", ".metadata.labels.joiner\\.sh/capacity-type", "string", 0),
        ("Zone", ".metadata.labels.topology\\.kubernetes\\.io/zone", "string", 0),
        ("Node", ".status.nodeName", "string", 0),
        ("Ready", READY, "string", 0),
        ("Status", ".status.reason", "string", 0),
        ("Age", ".metadata.creationTimestamp", "date", 0),
        ("ID", ".status.providerID", "string", 1),
        ("NodePool", ".metadata.labels.joiner\\.sh/nodepool", "string", 1),
        ("Gang", ".metadata.labels.joiner\\.sh/gang", "string", 1),
    ]


def test_kwoknodeclass_printer_columns() -> None:
    assert columns("KWOKNodeClass") == [
        ("Ready", READY, "string", 0),
        ("Age", ".metadata.creationTimestamp", "date", 0),
    ]


def test_printer_columns_point_at_fields_the_schema_has() -> None:
    for kind in FILES:
        schema = schema_of(kind)
        for name, json_path, _, _ in columns(kind):
            if json_path.startswith(".metadata."):
                continue
            head = json_path.split("[")[0].split(".")[1:]
            node = schema
            for part in head:
                if "properties" in node and part in node["properties"]:
                    node = node["properties"][part]
                else:
                    assert "additionalProperties" in node, f"{kind} column {name}: {json_path}"
                    break


@pytest.mark.parametrize("model", [NodePool, NodeClaim, KWOKNodeClass])
def test_descriptions_come_from_the_models(model: type[NodePool | NodeClaim | KWOKNodeClass]) -> None:
    schema = schema_of(model.__name__)
    assert schema["description"]
    assert "``" not in yaml.safe_dump(schema)
    described = [path for path, node in walk(schema) if node.get("description")]
    assert len(described) > 10


def test_docs_describe_every_field() -> None:
    docs = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    for kind in FILES:
        for path, _ in walk(schema_of(kind)):
            path = path.lstrip(".")
            if not path.startswith(("spec.", "status.")) or ".conditions[]." in path:
                continue  # conditions share one table; metadata is standard
            if ".startupTaints[]." in path or path.endswith(("[]", "{}")):
                continue  # documented "as taints"; list items and map values by their container
            if kind == "NodeClaim" and path.startswith(("spec.nodeClassRef.", "spec.taints[].")):
                continue  # documented "as in NodePool"
            assert f"`{path}`" in docs, f"docs/api.md does not describe {kind} {path}"
    for column in ("NODECLASS", "WEIGHT", "GPU", "CAPACITY", "NODEPOOL", "GANG"):
        assert f"| {column} |" in docs
