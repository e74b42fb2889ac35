"""How a planned machine is written down: the NodeClaim manifest that provisioning, gangs and
disruption's replacements hand to the NodeClaim writer (it records the NodePool template hash that
drift detection compares against, `controller.state.nodepools.nodepool_hash`)."""

from __future__ import annotations

from api.v1 import labels as wk
from controller.scheduling.model import NewNodeClaim
from controller.state.nodepools import nodepool_hash
from controller.state.views import Obj


def nodeclaim_manifest(node: NewNodeClaim, pool: Obj) -> Obj:
    """The NodeClaim a plan's new machine becomes: requirements (with every candidate instance type),
    requests, taints and the NodePool's template, owned by the NodePool, with the termination finalizer."""
    template = (pool.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    tspec = template.get("spec") or {}
    node_labels = {**(tmeta.get("labels") or {}), **dict(node.labels), wk.LABEL_NODEPOOL: node.node_pool}
    if node.gang:
        node_labels[wk.LABEL_GANG] = node.gang
    spec: Obj = {
        "nodeClassRef": tspec.get("nodeClassRef"),
        "requirements": node.requirements.to_expressions(),
        "resources": {"requests": node.requests.to_quantities()},
    }
    taints = [t.to_dict() for t in node.taints]
    startup = [t.to_dict() for t in node.startup_taints]
    if taints:
        spec["taints"] = taints
    if startup:
        spec["startupTaints"] = startup
    for field in ("expireAfter", "terminationGracePeriod"):
        if tspec.get(field):
            spec[field] = tspec[field]
    return {
        "apiVersion": wk.API_VERSION,
        "kind": "NodeClaim",
        "metadata": {
            "generateName": f"{node.node_pool}-",
            # created with its finalizer: one write less per launch than adding it afterwards
            "finalizers": [wk.FINALIZER_TERMINATION],
            "labels": node_labels,
            "annotations": {
                **(tmeta.get("annotations") or {}),
                wk.ANNOTATION_NODEPOOL_HASH: nodepool_hash(pool),
                wk.ANNOTATION_PLANNED_INSTANCE_TYPE: node.choice.instance_type,
                wk.ANNOTATION_PLANNED_ZONE: node.choice.zone,
                wk.ANNOTATION_PLANNED_PRICE: f"{node.choice.price:.4f}",
            },
            "ownerReferences": [
                {
                    "apiVersion": wk.API_VERSION,
                    "kind": "NodePool",
                    "name": pool["metadata"]["name"],
                    "uid": pool["metadata"]["uid"],
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }
