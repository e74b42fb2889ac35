"""How a planned machine is written down: the NodeClaim manifest, and the NodePool template hash
that drift detection compares against."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from api.v1 import labels as wk
from controller.scheduling.model import NewNodeClaim

Obj = dict[str, Any]
PLANNED_INSTANCE_TYPE = "joiner.sh/planned-instance-type"
PLANNED_PRICE = "joiner.sh/planned-price"
NODEPOOL_HASH = "joiner.sh/nodepool-hash"


def nodepool_hash(pool: Obj) -> str:
    """A hash of what a NodePool's NodeClaims are made from (spec.template): a change means drift."""
    template = (pool.get("spec") or {}).get("template") or {}
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


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
                NODEPOOL_HASH: nodepool_hash(pool),
                PLANNED_INSTANCE_TYPE: node.choice.instance_type,
                PLANNED_PRICE: f"{node.choice.price:.4f}",
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
