"""joiner runs one full provisioning cycle as the chart's ServiceAccount, with nothing but the chart's
RBAC: a pending GPU pod gets a NodeClaim, a Node, and runs; the Lease and Events are written; and
nothing the controller did was forbidden."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.harness import ROOT, Cluster
from tests.e2e.manifests import expect_nodeclaims_initialized, expect_pods_running, nodeclass, nodepool, pod
from tests.e2e.prometheus import tool

CHART = ROOT / "deploy" / "chart" / "joiner"


def service_account_kubeconfig(cluster: Cluster, *, namespace: str, name: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (a TokenRequest token), nothing else."""
    token = cluster.kubectl("create", "token", name, "-n", namespace, "--duration", "1h").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": admin["clusters"][0]["name"], "user": "sa"}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_provisioning_cycle_runs_as_the_charts_service_account(
    cluster: Cluster, start_joiner: Any, tmp_path: Path
) -> None:
    ns = cluster.create_namespace(f"rbac-{uuid.uuid4().hex[:6]}")
    release = f"joiner-{ns}"
    helm = [str(tool("helm")), "--kubeconfig", str(cluster.kubeconfig)]
    subprocess.run(
        [
            *helm,
            "install",
            release,
            str(CHART),
            "-n",
            ns,
            "-f",
            str(CHART / "examples" / "values-kwok.yaml"),
            "--set",
            "replicas=0",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    try:
        kubeconfig = service_account_kubeconfig(cluster, namespace=ns, name=release, path=tmp_path / "sa.kubeconfig")
        whoami = cluster.kubectl(
            "--kubeconfig", str(kubeconfig), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"
        )
        assert whoami.stdout == f"system:serviceaccount:{ns}:{release}"  # joiner runs as the chart's account
        cluster.apply([nodeclass(), nodepool("gpu")])
        joiner = start_joiner(kubeconfig=str(kubeconfig), leader_elect_namespace=ns)
        cluster.apply(pod("infer", ns, gpus=1))
        expect_pods_running(cluster, ns, 1, timeout=120)
        [claim] = expect_nodeclaims_initialized(cluster, 1)
        assert claim["metadata"]["labels"]["joiner.sh/nodepool"] == "gpu"
        lease = cluster.get("lease", "joiner-leader", namespace=ns)
        assert lease["spec"]["holderIdentity"]
        reasons = {e["reason"] for e in cluster.items("events", namespace=ns)}
        assert "Nominated" in reasons  # joiner's Event on the pod
        logs = joiner.logs()
        assert "forbidden" not in logs.lower(), [line for line in logs.splitlines() if "orbidden" in line][:5]
    finally:
        subprocess.run([*helm, "uninstall", release, "-n", ns], capture_output=True, text=True)
