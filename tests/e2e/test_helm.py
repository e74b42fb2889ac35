"""Installing joiner with Helm into the real apiserver: every object of the chart is accepted, and the
ServiceAccount can do what the controller does and no more."""

from __future__ import annotations

import subprocess
import uuid

from tests.e2e.harness import ROOT, Cluster
from tests.e2e.prometheus import tool

CHART = ROOT / "deploy" / "chart" / "joiner"


def test_helm_install_is_accepted_and_the_service_account_has_least_privilege(cluster: Cluster) -> None:
    ns = cluster.create_namespace(f"helm-{uuid.uuid4().hex[:6]}")
    release = f"joiner-{ns}"
    helm = [str(tool("helm")), "--kubeconfig", str(cluster.kubeconfig)]
    install = subprocess.run(
        [
            *helm,
            "install",
            release,
            str(CHART),
            "-n",
            ns,
            "-f",
            str(CHART / "examples" / "values-kwok.yaml"),
            "--wait=false",
        ],
        capture_output=True,
        text=True,
        env=cluster.env,
    )
    try:
        assert install.returncode == 0, install.stderr
        status = subprocess.run([*helm, "status", release, "-n", ns], capture_output=True, text=True, check=True)
        assert "STATUS: deployed" in status.stdout
        deploy = cluster.get("deployment", release, namespace=ns)
        assert deploy["spec"]["replicas"] == 2
        assert deploy["spec"]["template"]["spec"]["containers"][0]["args"][0] == "--provider=kwok"
        for kind, name, namespace in [
            ("serviceaccount", release, ns),
            ("service", f"{release}-metrics", ns),
            ("poddisruptionbudget", release, ns),
            ("role", f"{release}-leader-election", ns),
            ("rolebinding", f"{release}-leader-election", ns),
            ("clusterrole", release, None),
            ("clusterrolebinding", release, None),
        ]:
            assert cluster.get(kind, name, namespace=namespace)["metadata"]["name"] == name
        sa = f"system:serviceaccount:{ns}:{release}"

        def can(verb: str, resource: str, *extra: str) -> bool:
            out = cluster.kubectl("auth", "can-i", verb, resource, f"--as={sa}", *extra, check=False)
            return out.stdout.strip() == "yes"

        assert can("create", "nodeclaims.joiner.sh")
        assert can("watch", "pods", "-A")
        assert can("create", "pods", "--subresource=eviction", "-A")
        assert can("patch", "nodepools.joiner.sh", "--subresource=status")
        assert can("update", "leases.coordination.k8s.io", "-n", ns)
        assert can("patch", "configmaps", "-n", ns)  # the forecast's history
        assert not can("patch", "configmaps", "-n", "kube-system")
        assert not can("create", "nodepools.joiner.sh")
        assert not can("delete", "kwoknodeclasses.joiner.sh")
        assert not can("update", "pods", "-A")
        assert not can("list", "secrets", "-A")
        assert not can("update", "leases.coordination.k8s.io", "-n", "kube-system")
    finally:
        subprocess.run([*helm, "uninstall", release, "-n", ns], capture_output=True, text=True)
    assert cluster.kubectl("get", "clusterrole", release, check=False).returncode != 0  # uninstall removed it
