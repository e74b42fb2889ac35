"""A real `410 Gone` on joiner's live watch path, from the real kube-apiserver.

joiner's informers relist after a watch that breaks (an error, a reset connection, an apiserver
that is down), so killing or restarting the apiserver never makes them resume from an old
resourceVersion. They resume after a watch that *ends cleanly*: the apiserver ends every watch
after the ``timeoutSeconds`` the client asked for (``--watch-timeout``). On an apiserver that serves
watches from etcd (``--watch-cache=false``), a watch resumed from a revision etcd has compacted is
answered with `410 Gone`; the informer relists and joiner goes on provisioning.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack.chaos import apiserver_ready, compact_etcd, restart_apiserver
from tests.e2e.harness import CLUSTER_DIR, Cluster, eventually
from tests.e2e.manifests import deployment, expect_pods_running, nodeclaims, nodeclass, nodepool

WATCHED = {"Pod", "Node", "NodeClaim"}


@pytest.fixture
def apiserver_without_watch_cache(cluster: Cluster) -> Iterator[str]:
    """The apiserver serves watches straight from etcd; the cluster's own command line afterwards.
    Yields etcd's client URL."""
    restart_apiserver(compact=False, flags={"--watch-cache": "false"})
    eventually(lambda: apiserver_ready(cluster), timeout=60, what="kube-apiserver ready (no watch cache)")
    pid = int((CLUSTER_DIR / "pids" / "kube-apiserver").read_text().strip())
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    etcd = next(a.split("=", 1)[1] for a in argv if a.startswith("--etcd-servers="))
    yield etcd.split(",")[0]
    restart_apiserver(compact=False, flags={"--watch-cache": None})
    eventually(lambda: apiserver_ready(cluster), timeout=60, what="kube-apiserver ready again")


def _expired(log: str) -> set[str]:
    """The kinds whose watch came back 410 Gone (the informer's log line)."""
    kinds: set[str] = set()
    for line in log.splitlines():
        if '"informer.watch_expired"' in line:
            kinds.add(json.loads(line)["kind"])
    return kinds


def test_a_410_on_a_live_watch_is_relisted_and_provisioning_goes_on(
    cluster: Cluster, start_joiner: Any, apiserver_without_watch_cache: str
) -> None:
    ns = cluster.create_namespace(f"gone-{uuid.uuid4().hex[:6]}")
    cluster.apply([nodeclass(), nodepool("general")])
    joiner = start_joiner(watch_timeout="5")
    cluster.apply(deployment("before", ns, replicas=2, cpu="1"))
    expect_pods_running(cluster, ns, 2)
    assert not _expired(joiner.logs()), "nothing compacted yet: every watch resumed"

    # compact etcd at its current revision while everything runs: the pods, Nodes and NodeClaims
    # last changed before it, so their informers' next resume (within 5 s) asks for a compacted revision
    time.sleep(1.0)
    assert compact_etcd(apiserver_without_watch_cache) is not None
    compacted = time.monotonic()

    def gone() -> set[str] | None:
        nonlocal compacted
        kinds = _expired(joiner.logs())
        if kinds >= WATCHED:
            return kinds
        if time.monotonic() - compacted > 6.0:
            # a kind whose objects changed after the compaction (a status write) resumed past it
            # and saw no 410: compact again, past its newer revision, before its next resume
            assert compact_etcd(apiserver_without_watch_cache) is not None
            compacted = time.monotonic()
        return None

    expired = eventually(gone, timeout=30, what="410 Gone on the resumed watches of pods, Nodes and NodeClaims")
    assert expired >= WATCHED

    # the informers relisted: joiner goes on provisioning (GPU pods: new machines are needed)
    before = {c["metadata"]["name"] for c in nodeclaims(cluster)}
    cluster.apply(deployment("after", ns, replicas=2, gpus=1))
    expect_pods_running(cluster, ns, 4)
    bought = {c["metadata"]["name"] for c in nodeclaims(cluster)} - before
    assert bought, "no NodeClaim was bought for the GPU pods after the 410"
