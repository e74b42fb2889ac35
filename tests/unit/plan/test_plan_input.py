"""`joiner plan` on bad and edge-case input: one line naming the document, object and field, and
exit 1 -- or the right plan -- never a traceback or a silently wrong plan (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controller.cli import main
from controller.provisioning.nodepool_status import desired_status

POOL = """apiVersion: joiner.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: joiner.sh, kind: KWOKNodeClass, name: default}
"""


def pod(
    name: str = "p", spec: str = "{containers: [{name: c, resources: {requests: {cpu: 1}}}]}", meta: str = ""
) -> str:
    return f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}{meta}}}\nspec: {spec}\n"


def run_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "scenario.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    code = main(["plan", "-f", str(path), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def expect_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes, *fragments: str) -> str:
    code, out, err = run_plan(tmp_path, capsys, text)
    assert code == 1, out
    assert out == ""
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err
    return err


def plan_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *args: str) -> dict[str, Any]:
    code, out, err = run_plan(tmp_path, capsys, text, "-o", "json", *args)
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


# --- tracebacks that became one line ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (pod(spec="[]"), ("document 2 (Pod 'p')", "spec: must be an object")),
        (pod(spec="{containers: [hello]}"), ("document 2 (Pod 'p')", "spec.containers[0]: must be an object")),
        (pod(spec="{containers: [{name: c, resources: []}]}"), ("spec.containers[0].resources: must be an object",)),
        (pod(meta=", labels: [a]"), ("Pod 'p'", "metadata.labels: must be an object")),
        (pod(spec="{affinity: [a], containers: [{name: c}]}"), ("spec.affinity: must be an object",)),
        (
            pod(spec="{topologySpreadConstraints: [{maxSkew: lots, topologyKey: z}], containers: [{name: c}]}"),
            ("spec.topologySpreadConstraints[0].maxSkew: must be an integer",),
        ),
        (
            pod(
                spec="{affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: "
                "[{weight: heavy, preference: {matchExpressions: [{key: a, operator: In, values: [b]}]}}]}}, "
                "containers: [{name: c}]}"
            ),
            ("preferredDuringSchedulingIgnoredDuringExecution[0].weight: must be an integer",),
        ),
        (
            "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"
            "spec: {replicas: 100000000, template: {spec: {containers: [{name: c}]}}}\n",
            ("Deployment 'd'", "spec.replicas", "1,000,000 pods"),
        ),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", ("scenario.yaml: line 8: nested more than 100 levels",)),
        (pod(spec="{containers: [{name: c, resources: " + "[" * 5000 + "]" * 5000 + "}]}"), ("nested more than",)),
        ("a: &x [*x]\n", ("refers to itself",)),
        (pod(spec="{containers: [{name: c}], tolerations: [oops]}"), ("spec.tolerations[0]: must be an object",)),
        (pod(meta=", namespace: [a]"), ("metadata.namespace: must be a string",)),
        (  # a finished pod is not planned, but its gang markers are read
            pod(meta=", labels: {a: [1]}") + "status: {phase: Succeeded}\n",
            ("document 2 (Pod 'p')", "metadata.labels.a: must be a string, got a list"),
        ),
        ("---\napiVersion: v1\nkind: [Pod]\n", ("kind: unknown kind",)),
        (
            "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {template: {spec: x}}\n",
            ("Deployment 'd'", "spec.template.spec: must be an object"),
        ),
        (
            pod(spec="{containers: [{name: c, resources: {requests: {cpu: '1e30'}}}]}"),
            ("spec.containers[0].resources.requests.cpu: must be at most 2^63-1",),
        ),
    ],
)
def test_malformed_objects_end_in_one_line_naming_document_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, fragments: tuple[str, ...]
) -> None:
    expect_error(tmp_path, capsys, POOL + text, *fragments)


def test_a_file_that_is_not_utf8_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expect_error(tmp_path, capsys, b"\xff\xfeapiVersion: v1\n", "not UTF-8 text", "offset 0")


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 60_000 + "]" * 60_000 + "\n",
        "a:\n" + "- " * 60_000 + "x\n",
        "a: " + "{b: " * 60_000 + "1" + "}" * 60_000 + "\n",
    ],
)
def test_nesting_deep_enough_to_crash_the_yaml_parser_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """libyaml's composer recurses in C: past ~20,000 levels the process died with SIGSEGV."""
    expect_error(tmp_path, capsys, text, "scenario.yaml: line ", ": nested more than 100 levels deep")


def test_an_alias_bomb_is_refused_quickly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    expect_error(tmp_path, capsys, "\n".join(lines) + "\n", "YAML aliases")


# --- silent wrong answers that became errors ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            pod(spec="{containers: [{name: c, resources: {requests: {cpu: '-1'}}}]}"),
            ("Pod 'p'", "spec.containers[0].resources.requests.cpu: must not be negative"),
        ),
        (
            pod(spec="{containers: [{name: c}], overhead: {memory: -1Gi}}"),
            ("spec.overhead.memory: must not be negative",),
        ),
        (
            pod(
                spec="{affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
                "[{matchExpressions: [{key: kubernetes.io/arch, operator: In, values: arm64}]}]}}}, "
                "containers: [{name: c}]}"
            ),
            ("matchExpressions[0].values: must be a list of strings",),
        ),
        (pod() + pod(spec="{containers: [{name: c}]}"), ("document 3 (Pod 'p')", "also in", "document 2 (Pod 'p')")),
        (
            pod(spec="{topologySpreadConstraints: [{maxSkew: 0, topologyKey: z}], containers: [{name: c}]}"),
            ("maxSkew: must be at least 1",),
        ),
        (
            pod(spec="{topologySpreadConstraints: [{maxSkew: 1, minDomains: 0, topologyKey: z}], containers: []}"),
            ("minDomains: must be at least 1",),
        ),
        ("---\n" + POOL, ("document 2 (NodePool 'default')", "NodePool 'default' is also in")),
        (
            "---\napiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {taints: [{key: a, effect: Sometimes}]}\n"
            "status: {allocatable: {cpu: 4}}\n",
            ("Node 'n'", "spec.taints[0].effect: must be one of NoSchedule, PreferNoSchedule, NoExecute",),
        ),
    ],
)  # fmt: skip
def test_input_that_used_to_be_planned_silently_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, fragments: tuple[str, ...]
) -> None:
    expect_error(tmp_path, capsys, POOL + text, *fragments)


def test_a_zero_limit_leaves_no_room_for_that_resource(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool = POOL.replace("spec:\n  template:", 'spec:\n  limits: {nvidia.com/gpu: "0"}\n  template:')
    gpu = pod("g", spec="{containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]}")
    out = plan_json(tmp_path, capsys, pool + gpu + pod("c"))
    assert [u["pod"] for u in out["unschedulable"]] == ["default/g"]
    assert [claim["pods"] for claim in out["nodeClaims"]] == [["default/c"]]
    assert all("nvidia.com/gpu" not in claim["requests"] for claim in out["nodeClaims"])
    # cpu: 0 -- the pool may buy nothing at all
    pool = POOL.replace("spec:\n  template:", 'spec:\n  limits: {cpu: "0"}\n  template:')
    out = plan_json(tmp_path, capsys, pool + pod("c"))
    assert out["nodeClaims"] == []
    assert [u["pod"] for u in out["unschedulable"]] == ["default/c"]


def test_a_gang_short_of_its_size_waits_like_the_controller(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = ", labels: {joiner.sh/gang: g}, annotations: {joiner.sh/gang-size: '4'}"
    out = plan_json(tmp_path, capsys, POOL + pod("a", meta=meta) + pod("b", meta=meta))
    assert out["nodeClaims"] == []
    assert {u["pod"]: u["reason"] for u in out["unschedulable"]} == {
        "default/a": "gang default/g has 2 of 4 members: joiner waits for every member before it buys nodes for any",
        "default/b": "gang default/g has 2 of 4 members: joiner waits for every member before it buys nodes for any",
    }
    # complete: planned
    out = plan_json(tmp_path, capsys, POOL + "".join(pod(n, meta=meta) for n in "abcd"))
    assert out["unschedulable"] == []
    assert {c["gang"] for c in out["nodeClaims"]} == {"default/g"}


def test_a_missing_nodeclass_is_a_warning_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodeclass = "---\napiVersion: joiner.sh/v1\nkind: KWOKNodeClass\nmetadata: {name: other}\n"
    code, out, err = run_plan(tmp_path, capsys, POOL + nodeclass + pod())
    assert code == 0
    assert "default-1" in out
    assert err.startswith("warning: ")
    assert err.count("\n") == 1
    assert "nodeClassRef: KWOKNodeClass 'default' is not in the scenario" in err
    # no NodeClass at all: the built-in catalog, as before, without a word
    code, _, err = run_plan(tmp_path, capsys, POOL + pod())
    assert code == 0
    assert err == ""


# --- catalogs --------------------------------------------------------------------------------------


def _catalog(tmp_path: Path, entry: str) -> str:
    path = tmp_path / "catalog.json"
    path.write_text('{"instanceTypes": [' + entry + "]}")
    return str(path)


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ('{"name": "a", "capacity": {"cpu": "4"}, "offerings": [{"zone": "z", "capacityType": "spot", '
         '"price": NaN}]}',
         "NaN is not a number JSON allows"),
        ('{"name": "a", "capacity": {"cpu": "4"}, "offerings": [{"zone": "z", "capacityType": "spot", '
         '"price": Infinity}]}',
         "Infinity is not a number JSON allows"),
        ('{"name": "a", "capacity": {"cpu": "4"}, "offerings": [{"zone": "z", "capacityType": "spot", '
         '"price": 1e999}]}',
         "offerings[0].price: must be a non-negative number"),
        ('{"name": "a", "capacity": {"cpu": "-4"}}', "instanceTypes[0] (a).capacity.cpu: must not be negative"),
        ('{"name": "a", "capacity": {"cpu": "4"}, "overhead": {"memory": "-1Gi"}}',
         "overhead.memory: must not be negative"),
        ('{"name": "a", "capacity": {"cpu": "4", "pods": "0"}}', "capacity.pods: must be at least 1"),
        ("[" * 5000 + "]" * 5000, "nested too deep"),
        ('{"name": "a", "capacity": {"cpu": "1e30"}}', "capacity.cpu: must be at most 2^63-1"),
    ],
)  # fmt: skip
def test_bad_catalogs_are_refused_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str, fragment: str
) -> None:
    catalog = _catalog(tmp_path, entry)
    code, out, err = run_plan(tmp_path, capsys, POOL + pod(), "--catalog", catalog)
    assert code == 1
    assert out == ""
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    assert fragment in err, err


def test_a_catalog_that_is_not_utf8_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "catalog.json"
    path.write_bytes(b'{"instanceTypes": ["\xff"]}')
    code, _, err = run_plan(tmp_path, capsys, POOL + pod(), "--catalog", str(path))
    assert code == 1
    assert "not UTF-8 text (byte 0xff at offset 20)" in err


# --- the controller's side of zero limits -----------------------------------------------------------


def test_a_zero_limit_is_reported_as_reached_in_the_nodepool_status() -> None:
    pool = {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "limits": {"nvidia.com/gpu": "0", "cpu": "100"},
            "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "d"}}},
        },
    }
    status, error = desired_status(pool=pool, claims=[], registered=set(), nodeclass_exists=True)
    assert error is None
    reached = next(c for c in status["conditions"] if c["type"] == "LimitsReached")
    assert reached["status"] == "True"
    assert reached["message"] == "nvidia.com/gpu: 0 of 0 in use"


def test_the_controller_reads_a_zero_limit_as_no_room_too() -> None:
    """The provisioner and the gang controller build their pools with the same conversion."""
    from controller.cloudprovider.catalog import load_catalog
    from controller.scheduling.kubeconv_nodes import nodepool_from_dict

    pool = {
        "apiVersion": "joiner.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "cpu-only"},
        "spec": {
            "limits": {"nvidia.com/gpu": "0", "cpu": "1000"},
            "template": {"spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "d"}}},
        },
    }
    catalog = load_catalog()
    template = nodepool_from_dict(pool, catalog)
    assert template.instance_types
    assert all(it.capacity.get("nvidia.com/gpu") == 0 for it in template.instance_types)
    assert len(template.instance_types) == sum(1 for it in catalog if it.capacity.get("nvidia.com/gpu") == 0)
    assert template.limits.get("cpu") == 1_000_000


def test_the_cheap_bound_on_nesting_finds_long_lines_with_a_few_searches() -> None:
    """`_runs_at_most` says whether every run between line feeds is at most so long, as splitting
    the text would (the lines `str.splitlines` makes are parts of those runs, so the check before
    a pass over the events decides as the longest line did)."""
    import random

    from controller.scenario import _runs_at_most

    rng = random.Random(5)
    for _ in range(5000):
        text = "".join(rng.choice("ab\n\r\x85") for _ in range(rng.randint(0, 60)))
        limit = rng.randint(-2, 15)
        assert _runs_at_most(text, limit) == all(len(run) <= limit for run in text.split("\n")), (text, limit)
    assert _runs_at_most("x" * 4000 + "\n" + "y" * 4000, 4000)
    assert not _runs_at_most("x" * 4000 + "\n" + "y" * 4001, 4000)
