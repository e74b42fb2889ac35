"""The handle on the real local KWOK cluster that e2e tests drive the way an operator uses kubectl."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

ROOT = Path(__file__).resolve().parents[2]
# A pytest-xdist worker (``pytest -n 3``) runs its share of the suite on a cluster of its own, in a
# directory beside the usual one (.kwok-gw0, .kwok-gw1, ...): the tests count every NodeClaim and
# Node, and a joiner started by one test would provision for another's pods. The variable is set
# for the processes the tests start (hack/cluster.sh, the chaos restarts) as well.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_BASE_DIR = Path(os.environ.get("JOINER_CLUSTER_DIR", ROOT / ".kwok"))
CLUSTER_DIR = _BASE_DIR.with_name(f"{_BASE_DIR.name}-{XDIST_WORKER}") if XDIST_WORKER else _BASE_DIR
if XDIST_WORKER:
    os.environ["JOINER_CLUSTER_DIR"] = str(CLUSTER_DIR)
JOINER_KINDS = (
    "nodeclaims.joiner.sh",
    "nodepools.joiner.sh",
    "kwoknodeclasses.joiner.sh",
    "ec2nodeclasses.joiner.sh",
    "gcenodeclasses.joiner.sh",
    "aksnodeclasses.joiner.sh",
)
T = TypeVar("T")


@dataclass
class Cluster:
    """A handle on the running KWOK cluster, used the way an operator uses kubectl."""

    kubeconfig: Path
    bin_dir: Path
    namespaces: set[str] = field(default_factory=set)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against the test cluster."""
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def apply(self, manifest: str | dict[str, Any] | list[dict[str, Any]]) -> None:
        """kubectl apply -f - with a YAML text, an object, or a list of objects."""
        text = manifest if isinstance(manifest, str) else json.dumps(_as_list(manifest))
        self.kubectl("apply", "-f", "-", input=text)

    def get(self, kind: str, name: str = "", *, namespace: str | None = None) -> dict[str, Any]:
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        result: dict[str, Any] = json.loads(self.kubectl(*args).stdout)
        return result

    def items(self, kind: str, *, namespace: str | None = None, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json"]
        args += ["-n", namespace] if namespace else (["-A"] if _namespaced(kind) else [])
        if selector:
            args += ["-l", selector]
        items: list[dict[str, Any]] = json.loads(self.kubectl(*args).stdout)["items"]
        return items

    def table(self, path: str) -> list[dict[str, str]]:
        """The rows ``kubectl get`` prints for an API path (``/apis/joiner.sh/v1/nodeclaims``): the
        apiserver's own Table rendering (``Accept: ...;as=Table``), the printer columns of the CRD
        applied by the server, as column name -> cell text."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        context.load_cert_chain(user["client-certificate"], user["client-key"])
        request = urllib.request.Request(
            cluster["server"] + path, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
        )
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            table = json.loads(response.read())
        assert table["kind"] == "Table", table.get("kind")
        names = [c["name"] for c in table["columnDefinitions"]]
        return [
            {n: "" if v is None else str(v) for n, v in zip(names, row["cells"], strict=True)} for row in table["rows"]
        ]

    def create_namespace(self, name: str) -> str:
        self.kubectl("create", "namespace", name)
        self.namespaces.add(name)
        return name


def _namespaced(kind: str) -> bool:
    return kind.split(".")[0] in {
        "pods",
        "pod",
        "po",
        "events",
        "event",
        "deployments",
        "poddisruptionbudgets",
        "pdb",
        "daemonsets",
        "ds",
        "configmaps",
        "cm",
        "replicasets",
        "rs",
    }


def _as_list(obj: dict[str, Any] | list[dict[str, Any]]) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    return {"apiVersion": "v1", "kind": "List", "items": obj}


def eventually(
    probe: Callable[[], T | None], *, timeout: float = 60, interval: float = 0.5, what: str = "condition"
) -> T:
    """Poll `probe` until it returns something truthy; the real cluster cannot be faked in time."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def clean_cluster(handle: Cluster) -> None:
    """Remove the test namespaces, every joiner object and every Node, finalizers included.

    Runs after the controller has stopped, so nobody else releases the finalizers; the per-object
    patches run a few at a time, and each kind goes in one `kubectl delete --all`.
    """
    for ns in sorted(handle.namespaces):
        # the namespace turns Terminating at once (no new pods), but its controller takes a while to
        # get to the pods: remove them now, or the next test's controller would provision for them
        handle.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        handle.kubectl("delete", "pods", "--all", "-n", ns, "--force", "--grace-period=0", "--wait=false", check=False)
    handle.namespaces.clear()
    release = '{"metadata":{"finalizers":null}}'
    with ThreadPoolExecutor(max_workers=8) as pool:
        for kind in (*JOINER_KINDS, "nodes"):
            held = [o["metadata"]["name"] for o in handle.items(kind) if o["metadata"].get("finalizers")]
            list(
                pool.map(
                    lambda name, kind=kind: handle.kubectl(
                        "patch", kind, name, "--type=merge", "-p", release, check=False
                    ),
                    held,
                )
            )
            handle.kubectl("delete", kind, "--all", "--wait=false", "--ignore-not-found", check=False)
