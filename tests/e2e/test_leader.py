"""Two replicas, as the Helm chart runs them: one leads through a Lease, the other waits. Killing
the leader mid-provisioning hands over within the lease duration, and nothing is bought twice."""

from __future__ import annotations

import signal
import time
import uuid
from typing import Any

from tests.e2e.harness import Cluster, eventually
from tests.e2e.manifests import deployment, expect_pods_running, nodeclaims, nodeclass, nodepool, req

LEASE = {
    "leader_elect_lease_duration": "6s",
    "leader_elect_renew_deadline": "4s",
    "leader_elect_retry_period": "1s",
}


def test_killing_the_leader_mid_provisioning_hands_over_and_buys_nothing_twice(
    cluster: Cluster, start_joiner: Any
) -> None:
    ns = cluster.create_namespace(f"leader-{uuid.uuid4().hex[:6]}")
    cluster.apply(
        [
            nodeclass(registrationDelay="3s"),
            nodepool("cpu", requirements=[req("node.kubernetes.io/instance-type", "In", "c6i.xlarge")]),
        ]
    )
    first = start_joiner(leader_elect_namespace=ns, **LEASE)
    eventually(lambda: first.metric("joiner_leader") == 1, timeout=30, what="the first replica leads")
    second = start_joiner(leader_elect_namespace=ns, **LEASE)
    time.sleep(3)
    assert second.metric("joiner_leader") == 0  # the standby waits
    lease = cluster.get("lease", "joiner-leader", namespace=ns)
    assert lease["spec"]["leaseDurationSeconds"] == 6

    # 12 pods of 3 CPUs on 4-CPU machines: 12 NodeClaims; kill the leader once it began buying
    cluster.apply(deployment("web", ns, replicas=12, cpu="3", memory="2Gi"))
    eventually(lambda: len(nodeclaims(cluster)) >= 1, timeout=60, what="the leader started buying")
    assert first.proc is not None
    killed_at = time.monotonic()
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=10)

    eventually(lambda: second.metric("joiner_leader") == 1, timeout=30, what="the standby takes over")
    took_over = time.monotonic() - killed_at
    assert took_over <= 6 + 2 + 3  # the lease, a retry period, and the scrape
    expect_pods_running(cluster, ns, 12, timeout=180)
    claims = nodeclaims(cluster)
    assert len(claims) == 12, [c["metadata"]["name"] for c in claims]  # one machine per pod, none twice
    nodes = [n for n in cluster.items("nodes") if n["metadata"].get("labels", {}).get("joiner.sh/nodepool") == "cpu"]
    assert len(nodes) == 12
    assert (
        cluster.get("lease", "joiner-leader", namespace=ns)["spec"]["holderIdentity"] != lease["spec"]["holderIdentity"]
    )
