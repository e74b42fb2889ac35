"""What keeps a node from being disrupted: do-not-disrupt, PodDisruptionBudgets, gangs, bare pods."""

from __future__ import annotations

from typing import Any

import pytest

from controller.disruption import safety
from controller.disruption.safety import movable
from controller.state.views import NodeClaimView, NodeView, PodView
from tests.unit import builders

Obj = dict[str, Any]


# the cache hands these views: make them from the test's dicts
def do_not_disrupt(obj: Obj) -> bool:
    return safety.do_not_disrupt(PodView.of(obj))


def safety_blockers(*, claim: Obj, node: Obj | None, pods: list[Obj], pdbs: list[Obj]) -> list[str]:
    return safety.safety_blockers(
        claim=NodeClaimView.of(claim),
        node=NodeView.of(node) if node is not None else None,
        pods=[PodView.of(p) for p in pods],
        pdbs=pdbs,
    )


def blocking_pdbs(pods: list[Obj], pdbs: list[Obj]) -> list[str]:
    return safety.blocking_pdbs([PodView.of(p) for p in pods], pdbs)


def gang_blocker(*, claim: Obj, node: Obj | None, pods: list[Obj]) -> str | None:
    return safety.gang_blocker(
        claim=NodeClaimView.of(claim),
        node=NodeView.of(node) if node is not None else None,
        pods=[PodView.of(p) for p in pods],
    )


def unowned_pods(pods: list[Obj]) -> list[str]:
    return safety.unowned_pods([PodView.of(p) for p in pods])


OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u1", "controller": True}]


def pod(
    name: str, *, ns: str = "default", labels: dict[str, str] | None = None, status: Obj | None = None, **meta: Any
) -> Obj:
    """A running pod of the web ReplicaSet on n1; ``meta`` is merged into its metadata."""
    return builders.pod(
        name,
        namespace=ns,
        node="n1",
        labels=labels or {"app": "web"},
        metadata={"ownerReferences": OWNER, **meta},
        spec={"containers": [{"name": "c"}]},
        status=status,
    )


def pdb(name: str, *, allowed: int | None, ns: str = "default", selector: Obj | None = None, **meta: Any) -> Obj:
    status = {} if allowed is None else {"disruptionsAllowed": allowed, "observedGeneration": 1}
    return {
        "metadata": {"name": name, "namespace": ns, "generation": 1, **meta},
        "spec": {"selector": selector if selector is not None else {"matchLabels": {"app": "web"}}},
        "status": status,
    }


CLAIM: Obj = {"metadata": {"name": "c1", "labels": {}}, "status": {"conditions": []}}
NODE: Obj = {"metadata": {"name": "n1", "labels": {}}}


@pytest.mark.parametrize("key", ["joiner.sh/do-not-disrupt", "karpenter.sh/do-not-disrupt"])
def test_do_not_disrupt_pods_nodes_and_nodeclaims_block(key: str) -> None:
    assert do_not_disrupt({"metadata": {"annotations": {key: "true"}}})
    blockers = safety_blockers(claim=CLAIM, node=NODE, pods=[pod("a", annotations={key: "true"})], pdbs=[])
    assert len(blockers) == 1
    assert "default/a" in blockers[0]
    assert "do-not-disrupt" in blockers[0]
    node = {"metadata": {"name": "n1", "annotations": {key: "true"}}}
    assert "Node is annotated" in safety_blockers(claim=CLAIM, node=node, pods=[], pdbs=[])[0]
    claim = {"metadata": {"name": "c1", "annotations": {key: "true"}}}
    assert "NodeClaim is annotated" in safety_blockers(claim=claim, node=NODE, pods=[], pdbs=[])[0]


def test_do_not_disrupt_false_and_finished_pods_do_not_block() -> None:
    pods = [
        pod("a", annotations={"joiner.sh/do-not-disrupt": "false"}),
        pod("b", annotations={"joiner.sh/do-not-disrupt": "true"}, status={"phase": "Succeeded"}),
    ]
    assert safety_blockers(claim=CLAIM, node=NODE, pods=pods, pdbs=[]) == []


def test_a_pdb_that_allows_no_disruption_blocks_only_the_pods_it_selects() -> None:
    pods = [pod("web-1"), pod("db-1", labels={"app": "db"})]
    assert blocking_pdbs(pods, [pdb("web", allowed=0)]) == ["default/web-1 (PodDisruptionBudget default/web)"]
    assert blocking_pdbs(pods, [pdb("web", allowed=1)]) == []
    assert blocking_pdbs(pods, [pdb("web", allowed=0, ns="other")]) == []
    # an empty selector selects every pod of its namespace; a PDB not computed yet blocks
    assert len(blocking_pdbs(pods, [pdb("all", allowed=0, selector={})])) == 2
    assert len(blocking_pdbs(pods, [pdb("new", allowed=None)])) == 1
    stale = pdb("web", allowed=1, generation=2)
    assert len(blocking_pdbs(pods, [stale])) == 1
    exprs = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]}
    blocked = blocking_pdbs(pods, [pdb("db", allowed=0, selector=exprs)])
    assert blocked == ["default/db-1 (PodDisruptionBudget default/db)"]


def test_pods_drain_skips_are_not_counted() -> None:
    daemon = pod("ds-1", ownerReferences=[{"kind": "DaemonSet", "name": "ds", "uid": "d"}])
    mirror = pod("static-1", annotations={"kubernetes.io/config.mirror": "x"})
    leaving = pod("old-1", deletionTimestamp="2026-01-01T00:00:00Z")
    done = pod("job-1", status={"phase": "Failed"})
    web = pod("web-1")
    views = [PodView.of(p) for p in (daemon, mirror, leaving, done, web)]
    assert [p.name for p in movable(views)] == ["web-1"]
    assert blocking_pdbs([daemon, leaving], [pdb("all", allowed=0, selector={})]) == []


def test_running_gangs_are_never_taken_apart() -> None:
    member = pod("train-0", labels={"joiner.sh/gang": "train"})
    assert "gang default/train" in (gang_blocker(claim=CLAIM, node=NODE, pods=[member]) or "")
    volcano = pod("train-1", annotations={"volcano.sh/group-name": "pg"})
    assert "gang default/pg" in (gang_blocker(claim=CLAIM, node=NODE, pods=[volcano]) or "")
    finished = pod("train-2", labels={"joiner.sh/gang": "train"}, status={"phase": "Succeeded"})
    assert gang_blocker(claim=CLAIM, node=NODE, pods=[finished]) is None


def test_a_gang_nodeclaim_is_held_while_admitted_or_running_and_free_once_finished() -> None:
    claim = {"metadata": {"name": "c1", "labels": {"joiner.sh/gang": "ns.train"}}, "status": {"conditions": []}}
    assert "still being admitted" in (gang_blocker(claim=claim, node=NODE, pods=[]) or "")
    running = {"metadata": claim["metadata"], "status": {"conditions": [{"type": "GangAdmitted", "status": "True"}]}}
    assert "is running" in (gang_blocker(claim=running, node=NODE, pods=[]) or "")
    finished = {"metadata": claim["metadata"], "status": {"conditions": [{"type": "GangAdmitted", "status": "False"}]}}
    assert gang_blocker(claim=finished, node=NODE, pods=[]) is None


def test_bare_pods_are_named_as_unowned() -> None:
    bare = pod("bare")
    bare["metadata"].pop("ownerReferences")
    assert unowned_pods([bare, pod("web-1")]) == ["default/bare"]
