"""The NodeClaim a planned machine becomes."""

from __future__ import annotations

from api.v1 import labels as wk
from api.v1.labels import ANNOTATION_PLANNED_INSTANCE_TYPE as PLANNED_INSTANCE_TYPE
from controller.cloudprovider.catalog import load_catalog
from controller.scheduling import NodePoolTemplate, Pod, Resources, solve
from controller.state.manifest import nodeclaim_manifest

POOL = {
    "apiVersion": wk.API_VERSION,
    "kind": "NodePool",
    "metadata": {"name": "general", "uid": "u-general"},
    "spec": {"template": {"metadata": {"labels": {"team": "ml"}}, "spec": {"nodeClassRef": {"name": "default"}}}},
}


def test_a_planned_machine_becomes_a_nodeclaim_with_its_finalizer_and_owner() -> None:
    pod = Pod(name="p", requests=Resources.parse({"cpu": "1", "memory": "1Gi"}))
    plan = solve(pods=[pod], node_pools=[NodePoolTemplate(name="general", instance_types=load_catalog())])
    (node,) = plan.new_nodes
    manifest = nodeclaim_manifest(node, POOL)
    meta = manifest["metadata"]
    # the finalizer is written with the object: no NodeClaim can launch without it
    assert meta["finalizers"] == [wk.FINALIZER_TERMINATION]
    assert meta["generateName"] == "general-"
    assert meta["labels"][wk.LABEL_NODEPOOL] == "general"
    assert meta["labels"]["team"] == "ml"
    assert meta["annotations"][PLANNED_INSTANCE_TYPE] == node.choice.instance_type
    assert meta["ownerReferences"][0]["uid"] == "u-general"
    assert manifest["spec"]["nodeClassRef"] == {"name": "default"}
    types = next(r for r in manifest["spec"]["requirements"] if r["key"] == wk.LABEL_INSTANCE_TYPE)
    assert node.choice.instance_type in types["values"]
