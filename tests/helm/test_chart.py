"""The Helm chart as an operator installs it: lint, render for the kwok and aws values, refuse
settings that cannot work, and grant only what the controller calls."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.conftest import CHART, ROOT

Obj = dict[str, Any]
KUBE_VERSION = "1.36.3"


def helm(tools: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tools / "helm"), *args], check=check, capture_output=True, text=True)


def render(tools: Path, *args: str) -> list[Obj]:
    out = helm(tools, "template", "joiner", str(CHART), "-n", "joiner", "--kube-version", KUBE_VERSION, *args)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[Obj], kind: str) -> Obj:
    [found] = [d for d in docs if d["kind"] == kind]
    return found


@pytest.mark.parametrize("values", ["values-kwok.yaml", "values-aws.yaml", "values-gcp.yaml"])
def test_the_chart_lints_clean(tools: Path, values: str) -> None:
    result = helm(tools, "lint", str(CHART), "--strict", "-f", str(CHART / "examples" / values))
    assert "0 chart(s) failed" in result.stdout, result.stdout + result.stderr


def test_kwok_values_render_a_locked_down_two_replica_controller(tools: Path) -> None:
    docs = render(tools, "-f", str(CHART / "examples" / "values-kwok.yaml"))
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    deploy = one(docs, "Deployment")
    spec = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 2
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = spec["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["args"][0] == "--provider=kwok"
    assert "--leader-elect-namespace=joiner" in container["args"]
    assert "--no-leader-elect" not in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]  # the only writable path
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    node_terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "joiner.sh/nodepool", "operator": "DoesNotExist"} in node_terms["nodeSelectorTerms"][0][
        "matchExpressions"
    ]  # never on the capacity it manages
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_aws_values_render_the_provider_settings_irsa_and_monitoring(tools: Path) -> None:
    docs = render(tools, "-f", str(CHART / "examples" / "values-aws.yaml"))
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:4] == [
        "--provider=aws",
        "--cluster-name=gpu-prod",
        "--region=us-east-1",
        "--interruption-queue=https://sqs.us-east-1.amazonaws.com/111122223333/joiner-interruptions",
    ]
    assert "--prometheus-url=http://prometheus-operated.monitoring:9090" in args
    sa = one(docs, "ServiceAccount")
    assert sa["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/joiner-controller"
    }
    assert one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["port"] == "metrics"
    rules = one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
    assert {r["alert"] for r in rules} >= {"JoinerDown", "JoinerNoLeader", "JoinerGangRollbacksRepeating"}
    assert "{{ $value | humanizeDuration }}" in rules[0]["annotations"]["summary"]  # Prometheus templates pass helm


def test_settings_flags_and_switches(tools: Path) -> None:
    docs = render(
        tools,
        "--set",
        "settings.features.nominate=false,settings.features.reserve=false,settings.features.planUntried=false,"
        "settings.batchMaxDuration=20",
        "--set",
        "settings.extraArgs={--gpu-idle-window,900}",
    )
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-nominate" in args
    assert "--no-reserve" in args
    assert "--no-plan-untried" in args
    assert "--batch-max-duration=20" in args
    assert args[-2:] == ["--gpu-idle-window", "900"]
    digest = "sha256:" + "a" * 64
    pinned = render(tools, "--set", f"image.digest={digest}")
    assert one(pinned, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"].endswith(f"@{digest}")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ("settings.provider=aws", "settings.clusterName is required with settings.provider=aws"),
        ("settings.provider=gcp", "settings.clusterName is required with settings.provider=gcp"),
        ("settings.provider=gce", 'settings.provider must be kwok, aws, gcp or azure, got "gce"'),
    ],
)
def test_settings_that_cannot_work_are_refused_with_a_reason(tools: Path, settings: str, message: str) -> None:
    result = helm(
        tools, "template", "joiner", str(CHART), "--kube-version", KUBE_VERSION, "--set", settings, check=False
    )
    assert result.returncode != 0
    assert message in result.stderr


def test_rbac_grants_what_the_controller_calls_and_no_more(tools: Path) -> None:
    docs = render(tools)
    rules = one(docs, "ClusterRole")["rules"]
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    # the user's objects: read, and status written; never created or deleted by joiner
    for resource in ("nodepools", "kwoknodeclasses", "ec2nodeclasses", "gcenodeclasses", "aksnodeclasses"):
        assert granted[("joiner.sh", resource)] == {"list", "watch"}
    assert granted[("joiner.sh", "nodepools/status")] == {"patch"}
    assert granted[("joiner.sh", "nodeclaims")] == {"get", "list", "watch", "create", "patch", "delete"}
    assert "update" not in granted[("", "pods")]
    assert granted[("", "configmaps")] == {"get"}
    assert granted[("", "pods/eviction")] == {"create"}
    assert granted[("", "pods/status")] == {"patch"}
    leases = one(docs, "Role")
    assert leases["metadata"]["namespace"] == "joiner"
    assert leases["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
    ]
    # nothing wildcarded
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in rules)


def test_the_plain_manifests_are_generated_from_the_chart() -> None:
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "hack" / "gen-manifests.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_the_chart_crds_are_the_generated_ones() -> None:
    for path in (ROOT / "deploy" / "crds").glob("joiner.sh_*.yaml"):
        assert (CHART / "crds" / path.name).read_text() == path.read_text(), path.name


def test_the_provisioningrequest_crd_is_installed_only_when_asked(tools: Path) -> None:
    shipped = ROOT / "deploy" / "crds" / "autoscaling.x-k8s.io_provisioningrequests.yaml"
    assert (CHART / "files" / "provisioningrequests-crd.yaml").read_text() == shipped.read_text()
    assert not [d for d in render(tools) if d["kind"] == "CustomResourceDefinition"]
    docs = render(tools, "--set", "provisioningRequests.installCRD=true")
    crd = one(docs, "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "provisioningrequests.autoscaling.x-k8s.io"
    served = render(tools, "--set", "provisioningRequests.serve=false,provisioningRequests.bookingDuration=300")
    args = one(served, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-provisioning-requests" in args
    assert "--provisioning-request-booking=300" in args


def test_the_alert_rules_pass_promtool(tools: Path, tmp_path: Path) -> None:
    rules = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([str(tools / "promtool"), "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_fires_when_it_should_and_stays_quiet_otherwise(tools: Path, tmp_path: Path) -> None:
    """promtool's unit tests of the rules (tests/helm/alerts-test.yaml), one case or more per alert."""
    rules = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    (tmp_path / "alerts.rules.yaml").write_text(yaml.safe_dump(rules))
    tests = Path(__file__).with_name("alerts-test.yaml")
    (tmp_path / tests.name).write_text(tests.read_text())
    result = subprocess.run(
        [str(tools / "promtool"), "test", "rules", str(tmp_path / tests.name)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", tests.read_text()))
    assert tested == {r["alert"] for r in rules["groups"][0]["rules"]}  # no alert without a test


def test_every_alert_has_a_runbook_section() -> None:
    rules = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())["groups"][0]["rules"]
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    for rule in rules:
        anchor = rule["annotations"]["runbook"].split("#", 1)[1]
        assert anchor == rule["alert"].lower()
        assert f"## {rule['alert']}" in runbook, rule["alert"]


def test_the_dashboard_configmap_carries_the_dashboard(tools: Path) -> None:
    docs = render(tools, "--set", "dashboard.enabled=true")
    cm = one(docs, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    import json

    dashboard = json.loads(cm["data"]["joiner.json"])
    assert dashboard == json.loads((ROOT / "deploy" / "dashboards" / "joiner.json").read_text())
    assert dashboard["panels"]
    assert "ConfigMap" not in {d["kind"] for d in render(tools)}  # off by default
