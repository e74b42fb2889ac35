"""What joiner writes for a ProvisioningRequest's machines: the NodeClaim manifests, named and
labelled for the request. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from api.v1.labels import LABEL_GANG, LABEL_ZONE
from controller.gang.planner import gang_taint
from controller.provreq.request import ProvisioningRequest
from controller.scheduling.model import NewNodeClaim
from controller.state.manifest import nodeclaim_manifest
from controller.state.views import Obj

LABEL_REQUEST_UID: Final = "joiner.sh/provisioning-request-uid"
"""On the NodeClaims (and so the Nodes) bought for a ProvisioningRequest: the request's uid."""
ANNOTATION_REQUEST: Final = "joiner.sh/provisioning-request"
"""On those NodeClaims: ``namespace/name`` of the request."""


def claim_name(pool: str, uid: str, attempt: int, index: int) -> str:
    """Deterministic per attempt, so writing it twice is harmless (409)."""
    return f"{pool[:40].rstrip('-.')}-r{uid[:6]}{attempt}-{index}"


def request_claim_manifest(
    node: NewNodeClaim, pool: Mapping[str, Any], *, name: str, req: ProvisioningRequest, same_zone: bool
) -> Obj:
    """The NodeClaim of one planned machine, named and labelled for the request. No taint: the pods
    that consume the request are Kueue's and tolerate nothing of joiner's; the booking keeps others
    off the room in joiner's plans, and the nominations tell kube-scheduler."""
    manifest = nodeclaim_manifest(node, dict(pool))
    meta = manifest["metadata"]
    meta.pop("generateName", None)
    meta["name"] = name
    meta["labels"].pop(LABEL_GANG, None)
    meta["labels"][LABEL_REQUEST_UID] = req.uid
    meta["annotations"][ANNOTATION_REQUEST] = req.key
    spec = manifest["spec"]
    gang_key = gang_taint("").key
    taints = [t for t in spec.get("taints") or [] if t.get("key") != gang_key]
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
    # nor the gang's label as a requirement (the Node would carry it, and disruption would take the
    # machine for a gang still being admitted, never to be consolidated)
    reqs = [r for r in spec.get("requirements") or [] if r.get("key") != LABEL_GANG]
    if same_zone:
        reqs = [r for r in reqs if r.get("key") != LABEL_ZONE]
        reqs.append({"key": LABEL_ZONE, "operator": "In", "values": [node.choice.zone]})
    spec["requirements"] = reqs
    return manifest
