"""The e2e suite on several clusters at once: each pytest-xdist worker gets a cluster directory of
its own beside the usual one, and the processes the tests start (hack/cluster.sh) see it too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PROBE = (
    "import os; from tests.e2e.harness import CLUSTER_DIR; print(CLUSTER_DIR); print(os.environ['JOINER_CLUSTER_DIR'])"
)


def cluster_dirs(**extra: str) -> list[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER", "JOINER_CLUSTER_DIR")}
    environment.update(extra)
    environment.setdefault("JOINER_CLUSTER_DIR", str(REPO / ".kwok"))
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_worker_runs_on_a_cluster_beside_the_usual_one() -> None:
    assert cluster_dirs(PYTEST_XDIST_WORKER="gw1", JOINER_CLUSTER_DIR="/tmp/lab/kwok") == ["/tmp/lab/kwok-gw1"] * 2


def test_without_workers_the_usual_cluster_is_used() -> None:
    assert cluster_dirs(JOINER_CLUSTER_DIR="/tmp/lab/kwok") == ["/tmp/lab/kwok"] * 2
