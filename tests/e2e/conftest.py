"""Fixtures for the end-to-end suite: the real local KWOK cluster (hack/cluster.sh).

The cluster is started once per session (or reused when it already runs); every test gets a
clean slate: the joiner objects, Nodes and test namespaces it made are removed after it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import CLUSTER_DIR, JOINER_KINDS, ROOT, XDIST_WORKER, Cluster, clean_cluster, eventually
from tests.e2e.joiner import start_joiner

__all__ = ["Cluster", "eventually", "start_joiner"]


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """Start (or reuse) the local KWOK cluster and install the CRDs once per session.

    Under pytest-xdist each worker has a cluster of its own (see ``harness.CLUSTER_DIR``), which it
    stops at the end of its session; the usual cluster is left running for the next run.
    """
    subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "up"], check=True, cwd=ROOT)
    handle = Cluster(
        kubeconfig=CLUSTER_DIR / "kubeconfig",
        bin_dir=Path((CLUSTER_DIR / "bindir").read_text().strip()),
    )
    handle.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "deploy" / "crds"))
    for crd in JOINER_KINDS:
        handle.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    clean_cluster(handle)  # whatever an earlier run or a demo left behind
    yield handle
    if XDIST_WORKER:
        subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "down"], check=False, cwd=ROOT)


@pytest.fixture(autouse=True)
def _clean_slate(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each e2e test: remove what it created, finalizers included."""
    yield
    if "cluster" not in request.fixturenames:
        return
    handle: Cluster = request.getfixturevalue("cluster")
    clean_cluster(handle)


# The files that take longest, longest first (seconds one after another, 2026-11-27: 236 -- about
# 175 since its schedule window lasts a minute, not two -- 172, 136, 107, 97, 81, 52, 47). Under
# pytest-xdist, as `make test` runs the suite (`-n 3 --dist loadfile --no-loadscope-reorder`), a
# free worker takes the next file in collection order, so these start first and no worker is left
# alone with a long file at the end. A file not named here keeps its place after them; a stale
# list only costs time.
LONGEST_FIRST = (
    "test_capacity.py",
    "test_disruption.py",
    "test_provisioning.py",
    "test_validation.py",
    "test_gang.py",
    "test_kueue.py",
    "test_azure.py",
    "test_leader.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e" in str(item.path):
            item.add_marker(pytest.mark.e2e)

    def rank(item: pytest.Item) -> int:
        if "tests/e2e" in str(item.path) and item.path.name in LONGEST_FIRST:
            return LONGEST_FIRST.index(item.path.name)
        return len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order within a file, and of the other files, is kept
