"""Fixtures for the end-to-end suite: the real local KWOK cluster (hack/cluster.sh).

The cluster is started once per session (or reused when it already runs); every test gets a
clean slate: the joiner objects, Nodes and test namespaces it made are removed after it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import CLUSTER_DIR, JOINER_KINDS, ROOT, Cluster, clean_cluster, eventually
from tests.e2e.joiner import start_joiner

__all__ = ["Cluster", "eventually", "start_joiner"]


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    """Start (or reuse) the local KWOK cluster and install the CRDs once per session."""
    subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "up"], check=True, cwd=ROOT)
    handle = Cluster(
        kubeconfig=CLUSTER_DIR / "kubeconfig",
        bin_dir=Path((CLUSTER_DIR / "bindir").read_text().strip()),
    )
    handle.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "deploy" / "crds"))
    for crd in JOINER_KINDS:
        handle.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    clean_cluster(handle)  # whatever an earlier run or a demo left behind
    return handle


@pytest.fixture(autouse=True)
def _clean_slate(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each e2e test: remove what it created, finalizers included."""
    yield
    if "cluster" not in request.fixturenames:
        return
    handle: Cluster = request.getfixturevalue("cluster")
    clean_cluster(handle)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e" in str(item.path):
            item.add_marker(pytest.mark.e2e)
