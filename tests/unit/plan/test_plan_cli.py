"""`joiner plan` on the example scenarios in hack/scenarios."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.cli import main

SCENARIOS = Path(__file__).resolve().parents[3] / "hack" / "scenarios"


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", *args, "-o", "json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_gpu_scenario_buys_gpu_aware_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    out = plan_json(capsys, "-f", str(SCENARIOS / "gpu-mixed.yaml"))
    assert set(out) >= {"nodeClaims", "existingNodes", "unschedulable", "totalPrice"}
    claims = out["nodeClaims"]
    for claim in claims:
        assert set(claim) >= {"name", "nodePool", "instanceType", "instanceTypes", "zone", "capacityType", "price"}
        assert claim["instanceTypes"][0] == claim["instanceType"]
    assert out["totalPrice"] == pytest.approx(sum(c["price"] for c in claims), abs=1e-4)
    # each 1-GPU L4 inference replica gets a 1-GPU L4 machine
    inference = [c for c in claims if any(p.startswith("ml/llm-inference") for p in c["pods"])]
    assert sum(len(c["pods"]) for c in inference) == 6
    assert all(c["instanceType"].startswith("g6.") and c["nodePool"] == "gpu" for c in inference)
    # the training job is a gang: two 8-GPU H100 machines carrying the gang id
    gang = [c for c in claims if c["gang"] == "ml/pretrain"]
    assert sorted(p for c in gang for p in c["pods"]) == ["ml/pretrain-0", "ml/pretrain-1"]
    assert all(c["instanceType"] == "p5.48xlarge" for c in gang)
    # web is spread over the three zones, on the CPU pool
    web_zones = [c["zone"] for c in claims for p in c["pods"] if p.startswith("default/web-")]
    assert sorted(web_zones.count(z) for z in set(web_zones)) == [3, 3, 3]
    assert {c["nodePool"] for c in claims if any(p.startswith("default/web-") for p in c["pods"])} == {"cpu"}
    assert out["unschedulable"] == [
        {
            "pod": "ml/too-big",
            "reason": 'nodepool "gpu": no instance type has 16 nvidia.com/gpu (largest: 8); '
            'nodepool "cpu": no instance type has nvidia.com/gpu',
        }
    ]


def test_existing_and_in_flight_capacity_is_used_first(capsys: pytest.CaptureFixture[str]) -> None:
    out = plan_json(capsys, "-f", str(SCENARIOS / "existing-capacity.yaml"))
    assert out["nodeClaims"] == []
    placed = {e["node"]: len(e["pods"]) for e in out["existingNodes"]}
    assert placed == {"node-a": 1, "default-x7k2p": 6}  # node-b is cordoned
    assert out["totalPrice"] == 0


def test_yaml_and_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = str(SCENARIOS / "gpu-mixed.yaml")
    assert main(["plan", "-f", scenario, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["unschedulable"][0]["pod"] == "ml/too-big"
    assert main(["plan", "-f", scenario]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == [
        "NODECLAIM", "NODEPOOL", "INSTANCE-TYPE", "ZONE", "CAPACITY", "$/H", "PODS", "GANG", "FALLBACKS",
    ]  # fmt: skip
    assert "ml/too-big" in table
    assert "Total:" in table.splitlines()[-1]


def test_pods_from_stdin_default_to_the_default_namespace(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = (SCENARIOS / "existing-capacity.yaml").read_text().split("---")[0]
    pod = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: lone}\nspec: {containers: [{name: c}]}\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(pool + pod))
    out = plan_json(capsys, "-f", "-")
    assert out["nodeClaims"][0]["pods"] == ["default/lone"]


VOLUMES = """
apiVersion: v1
kind: PersistentVolume
metadata: {name: dataset}
spec:
  capacity: {storage: 1Ti}
  accessModes: [ReadWriteOnce]
  csi: {driver: ebs.csi.aws.com, volumeHandle: vol-1}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: topology.ebs.csi.aws.com/zone, operator: In, values: [us-east-1c]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: dataset, namespace: ml, annotations: {pv.kubernetes.io/bind-completed: "yes"}}
spec: {volumeName: dataset, storageClassName: ""}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: gp2}
provisioner: ebs.csi.aws.com
volumeBindingMode: Immediate
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: scratch, namespace: ml}
spec: {storageClassName: gp2}
"""


def _reader(name: str, claim: str) -> str:
    return (
        f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n"
        "  containers: [{name: c, resources: {requests: {cpu: '1'}}}]\n"
        f"  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]\n"
    )


def test_pods_are_planned_where_their_volumes_let_them_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = (SCENARIOS / "existing-capacity.yaml").read_text().split("---")[0]
    pods = _reader("trainer", "dataset") + _reader("writer", "scratch")
    monkeypatch.setattr("sys.stdin", io.StringIO(pool + "---\n" + VOLUMES + pods))
    out = plan_json(capsys, "-f", "-")
    assert [(c["pods"], c["zone"]) for c in out["nodeClaims"]] == [(["ml/trainer"], "us-east-1c")]
    [waiting] = out["unschedulable"]
    assert waiting["pod"] == "ml/writer"
    assert waiting["reason"].startswith(
        'joiner cannot provision this pod: PersistentVolumeClaim "scratch" is not bound'
    )
    # without the claims and volumes the pods are planned anyway, and the user is told so
    monkeypatch.setattr("sys.stdin", io.StringIO(pool + pods))
    assert main(["plan", "-f", "-", "-o", "json"]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)["nodeClaims"]) == 1
    assert "warning: pods use PersistentVolumeClaims, but the scenario has no PersistentVolumeClaim" in captured.err


def test_a_pod_that_claims_devices_through_dra_is_reported_not_planned(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = (SCENARIOS / "existing-capacity.yaml").read_text().split("---")[0]
    pod = (
        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: dra}\nspec:\n  containers: [{name: c}]\n"
        "  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]\n"
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(pool + pod))
    out = plan_json(capsys, "-f", "-")
    assert out["nodeClaims"] == []
    [refused] = out["unschedulable"]
    assert refused["pod"] == "default/dra"
    assert "Dynamic Resource Allocation" in refused["reason"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: [unclosed", "not valid YAML"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
         "document 2 (Secret 's'): kind: unknown kind 'Secret'"),
        ("apiVersion: joiner.sh/v1\nkind: NodePool\nmetadata: {name: bad}\nspec:\n  template:\n    spec:\n"
         "      nodeClassRef: {group: joiner.sh, kind: KWOKNodeClass, name: default}\n"
         "      requirements: [{key: joiner.sh/gpu-count, operator: Gt, values: [many]}]\n",
         "document 1 (NodePool 'bad'): invalid: spec.template.spec.requirements[0]"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
         "    - {name: c, resources: {requests: {cpu: lots}}}\n",
         "Pod default/p: spec.containers[0].resources.requests"),
    ],
)  # fmt: skip
def test_bad_input_exits_non_zero_and_names_the_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    assert main(["plan", "-f", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
    assert captured.err.startswith("error: ")


def test_a_gang_is_planned_in_one_zone_unless_it_opts_out(capsys: pytest.CaptureFixture[str]) -> None:
    text = (SCENARIOS / "gangs.yaml").read_text()
    out = plan_json(capsys, "-f", str(SCENARIOS / "gangs.yaml"))
    by_gang: dict[str, set[str]] = {}
    for claim in out["nodeClaims"]:
        if claim["gang"]:
            by_gang.setdefault(claim["gang"], set()).add(claim["zone"])
    assert by_gang, "the scenario has a gang"
    assert all(len(zones) == 1 for zones in by_gang.values()), by_gang
    assert "joiner.sh/gang-same-zone" not in text  # the one-zone placement is the default


def test_plan_imports_no_cache_logging_or_event_loop() -> None:
    """``joiner plan`` is a short command: it plans with the NodePool views and the solver alone.
    The cluster cache, structlog (with rich, when installed, about 0.1 s of imports) and asyncio
    belong to ``joiner run``; a fresh interpreter shows what the command really imports."""
    import subprocess
    import sys

    heavy = ("asyncio", "structlog", "controller.state.cluster", "controller.state.inputs", "kubernetes_asyncio")
    probe = (
        "import contextlib, io, sys\n"
        "from controller.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main(['plan', '-f', {str(SCENARIOS / 'gpu-mixed.yaml')!r}, '-o', 'json'])\n"
        f"print(code, sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.split("\n")[0] == "0 []", done.stdout + done.stderr


def test_plan_of_pods_and_a_nodepool_imports_only_the_nodepool_view_and_model(tmp_path: Path) -> None:
    """A scenario of a NodePool and pods (no gangs, no NodeClaims, no budget): the command builds
    the NodePool's view and model alone. The other views, the other kinds' models, the gang
    markers and the spend of NodeClaims are for scenarios that hold them."""
    import subprocess
    import sys

    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        "apiVersion: joiner.sh/v1\nkind: NodePool\nmetadata: {name: default}\n"
        "spec: {template: {spec: {nodeClassRef: {group: joiner.sh, kind: KWOKNodeClass, name: default}}}}\n"
        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\n"
        "spec: {containers: [{name: c, resources: {requests: {cpu: 500m, memory: 1Gi}}}]}\n"
    )
    skipped = (
        "controller.state.views",
        "controller.state.spend",
        "controller.gang.markers",
        "api.v1.nodeclaim",
        "api.v1.kwoknodeclass",
    )
    probe = (
        "import contextlib, io, json, sys\n"
        "from controller.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    code = main(['plan', '-f', {str(scenario)!r}, '-o', 'json'])\n"
        "claims = len(json.loads(out.getvalue())['nodeClaims'])\n"
        f"print(code, claims, sorted(m for m in {skipped!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.split("\n")[0] == "0 1 []", done.stdout + done.stderr


def test_plan_as_the_program_freezes_what_it_keeps_but_not_when_called_in_process(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`joiner plan` as the program (``main()`` reading ``sys.argv``) moves what its imports made,
    and at the end what is left, out of the cyclic collector's way: the process ends next. Called
    with arguments, in a process that goes on, it leaves the collector as it was."""
    import gc
    import subprocess
    import sys

    frozen = gc.get_freeze_count()
    plan_json(capsys, "-f", str(SCENARIOS / "existing-capacity.yaml"))
    assert gc.get_freeze_count() == frozen
    probe = (
        "import contextlib, gc, io, json, sys\n"
        f"sys.argv = ['joiner', 'plan', '-f', {str(SCENARIOS / 'existing-capacity.yaml')!r}, '-o', 'json']\n"
        "from controller.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    code = main()\n"
        "print(code, json.loads(out.getvalue())['totalPrice'], gc.get_freeze_count() > 10000, gc.isenabled())\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.split("\n")[0] == "0 0 True True", done.stdout + done.stderr
