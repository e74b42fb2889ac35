"""The fault suite's judge waits for a consolidation command under way, and only for one."""

from __future__ import annotations

from typing import Any

from hack.chaos import NODEPOOL_LABEL, REPLACEMENT_FOR, _disruption_under_way, setup_objects, unneeded_nodes
from tests.unit import builders


def claim(
    name: str, *, replaces: str | None = None, initialized: bool = True, marked: bool = False, deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if replaces:
        meta["annotations"] = {REPLACEMENT_FOR: replaces}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T03:12:40Z"
    conditions = [{"type": "Initialized", "status": "True" if initialized else "False"}]
    if marked:
        conditions.append({"type": "DisruptionReason", "status": "True", "reason": "Underutilized"})
    return {"metadata": meta, "status": {"conditions": conditions}}


def test_a_replace_under_way_is_waited_for_whatever_the_deletions() -> None:
    coming = [claim("l4-a", marked=True), claim("l4-b", replaces="l4-a", initialized=False)]
    assert _disruption_under_way(coming, deletions=False) == "l4-a marked for disruption (Underutilized)"
    draining = [claim("l4-a", marked=True, deleting=True), claim("l4-b", replaces="l4-a")]
    assert _disruption_under_way(draining, deletions=False) is not None
    assert _disruption_under_way([claim("l4-b", replaces="l4-a")], deletions=False) is None  # done


def test_a_plain_deletion_is_a_command_only_when_asked() -> None:
    rolled_back = [claim("h100-g1-0", deleting=True), claim("cpu-x")]
    assert _disruption_under_way(rolled_back, deletions=False) is None
    assert _disruption_under_way(rolled_back) == "h100-g1-0 being deleted"


# --- "nothing bought twice": a NodeClaim beyond one plan counts only if it is not needed ---------

ZONE = "topology.kubernetes.io/zone"


def node(name: str, instance_type: str, zone: str, *, cpu: str, memory: str) -> dict[str, Any]:
    """A Node as joiner's kwok provider registers it (allocatable after the system reservations)."""
    labels = {
        NODEPOOL_LABEL: "cpu",
        "node.kubernetes.io/instance-type": instance_type,
        ZONE: zone,
        "joiner.sh/capacity-type": "spot",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
    }
    return builders.node(name, labels=labels, allocatable={"cpu": cpu, "memory": memory, "pods": "58"})


def web(i: int, on: str, *, spread: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": on,
        "containers": [{"name": "main", "image": "app", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
    }
    if spread:
        selector = {"matchLabels": {"app": "web"}}
        spec["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}
        ]
    meta = {"name": f"web-{i}", "namespace": "chaos", "labels": {"app": "web"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Running"}}


def on_nodes(counts: dict[str, int], *, spread: bool = False) -> list[dict[str, Any]]:
    pods, i = [], 0
    for name, count in counts.items():
        for _ in range(count):
            pods.append(web(i, name, spread=spread))
            i += 1
    return pods


def test_a_failed_launch_replanned_as_two_smaller_machines_is_not_a_double_buy() -> None:
    # CI, seed 7: the plan bought two c7g.2xlarge for 24 web pods (13 + 11); one never became Ready,
    # was deleted after the initialization timeout, and its 11 pods were re-planned on two c6i.xlarge
    # (c7g.2xlarge spot was refused minutes before): 3 NodeClaims where the plan has 2, none spare
    nodes = [
        node("cpu-a", "c7g.2xlarge", "us-east-1a", cpu="7910m", memory="14162Mi"),
        node("cpu-b", "c6i.xlarge", "us-east-1a", cpu="3920m", memory="6584Mi"),
        node("cpu-c", "c6i.xlarge", "us-east-1a", cpu="3920m", memory="6584Mi"),
    ]
    pods = on_nodes({"cpu-a": 13, "cpu-b": 6, "cpu-c": 5})
    assert unneeded_nodes(setup_objects(), pods, nodes) == []


def test_capacity_bought_twice_is_found_however_kube_scheduler_spread_the_pods() -> None:
    # 24 pods on three c7g.2xlarge (8 each): any one node's pods fit in the others' spare room
    nodes = [node(f"cpu-{z}", "c7g.2xlarge", "us-east-1a", cpu="7910m", memory="14162Mi") for z in "abc"]
    pods = on_nodes({"cpu-a": 8, "cpu-b": 8, "cpu-c": 8})
    assert unneeded_nodes(setup_objects(), pods, nodes) == ["cpu-a", "cpu-b", "cpu-c"]


def test_a_node_that_keeps_a_zone_spread_is_needed_even_with_room_elsewhere() -> None:
    nodes = [
        node("cpu-a", "c7g.2xlarge", "us-east-1a", cpu="7910m", memory="14162Mi"),
        node("cpu-b", "c7g.2xlarge", "us-east-1b", cpu="7910m", memory="14162Mi"),
        node("cpu-c", "c6i.xlarge", "us-east-1c", cpu="3920m", memory="6584Mi"),
    ]
    counts = {"cpu-a": 2, "cpu-b": 2, "cpu-c": 2}
    # without a spread, any node's two pods fit on another
    assert unneeded_nodes(setup_objects(), on_nodes(counts), nodes) == ["cpu-a", "cpu-b", "cpu-c"]
    # spread over the zones the NodePool offers (maxSkew 1), each zone's node holds its share
    assert unneeded_nodes(setup_objects(), on_nodes(counts, spread=True), nodes) == []
