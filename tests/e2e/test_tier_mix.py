"""Tier mix, as the operator of a GPU fleet sees it: a burst is split across spot and on-demand as
the NodePool's shares say, and the NodePool reports how close it is."""

from __future__ import annotations

import uuid
from typing import Any

from tests.e2e.harness import Cluster, eventually
from tests.e2e.manifests import (
    condition,
    expect_nodeclaims_initialized,
    expect_pods_running,
    nodeclass,
    nodepool,
    pod,
    req,
)

Obj = dict[str, Any]
CAPACITY_TYPE = "joiner.sh/capacity-type"


def test_a_gpu_burst_is_split_as_the_tier_mix_says(cluster: Cluster, start_joiner: Any) -> None:
    ns = cluster.create_namespace(f"tier-{uuid.uuid4().hex[:6]}")
    pool = nodepool("l4", requirements=[req("joiner.sh/gpu-name", "In", "L4"), req("joiner.sh/gpu-count", "In", "1")])
    pool["spec"]["capacity"] = {"tierMix": {"spot": 50, "onDemand": 50}}
    cluster.apply([nodeclass(), pool])
    joiner = start_joiner()
    cluster.apply([pod(f"infer-{i}", ns, cpu="3", memory="12Gi", gpus=1) for i in range(4)])

    expect_pods_running(cluster, ns, 4)
    claims = expect_nodeclaims_initialized(cluster, 4)
    tiers = sorted(c["metadata"]["labels"][CAPACITY_TYPE] for c in claims)
    assert tiers == ["on-demand", "on-demand", "spot", "spot"]  # the solver alone would buy four spot
    nodes = {n["metadata"]["name"]: n for n in cluster.items("nodes")}
    for claim in claims:
        node = nodes[claim["status"]["nodeName"]]
        assert node["metadata"]["labels"][CAPACITY_TYPE] == claim["metadata"]["labels"][CAPACITY_TYPE]

    def held() -> Obj | None:
        cond = condition(cluster.get("nodepool", "l4"), "TierMix")
        return cond if cond is not None and cond["reason"] == "WithinTargets" else None

    cond = eventually(held, timeout=30, what="TierMix=True on the NodePool")
    assert cond["status"] == "True"
    assert "spot 50% (target 50%)" in cond["message"]
    assert joiner.metric("joiner_nodepool_capacity_share", nodepool="l4", capacity_type="spot") == 0.5
    assert joiner.metric("joiner_nodepool_capacity_share_target", nodepool="l4", capacity_type="on-demand") == 0.5
    assert joiner.metric("joiner_leader") == 1  # the one replica acts (JoinerNoLeader reads the sum over replicas)
