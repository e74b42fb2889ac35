"""What joiner writes for a gang: NodeClaim manifests, and the patches on member pods and claims.
Pure: no I/O; ``now`` is passed in.

Every patch is safe to send twice: maps are merged key by key, the tolerations list is sent whole
(the apiserver only lets a gated pod's tolerations grow, so a stale list is rejected, never lost),
and the gate is removed by a JSON patch that first tests it is still where it was seen.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from api.v1.conditions import GANG_ADMITTED
from api.v1.labels import LABEL_GANG, LABEL_ZONE, SCHEDULING_GATE_GANG
from controller.clock import format_time
from controller.gang.markers import (
    ANNOTATION_GANG_ATTEMPT,
    ANNOTATION_GANG_NAME,
    ANNOTATION_GANG_OFFERING,
    ANNOTATION_GANG_STATE,
    POD_CONDITION_GANG,
    gate_index,
)
from controller.gang.planner import gang_taint, gang_toleration
from controller.gang.record import Record
from controller.scheduling.model import NewNodeClaim
from controller.state.manifest import nodeclaim_manifest
from controller.state.patches import ConditionUpdate, claim_status, escape
from controller.state.views import NodeClaimView, Obj, PodView

MAX_NAME_PREFIX: Final = 40


def attempt_id(gid: str, attempt: int, uids: Sequence[str]) -> str:
    """A short id for one attempt of one set of member pods (new pods: a new id)."""
    text = f"{gid}/{attempt}/{','.join(sorted(uids))}"
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def claim_name(pool: str, attempt: str, index: int) -> str:
    """Deterministic, so creating it twice is harmless (409) and short enough for a hostname."""
    prefix = pool[:MAX_NAME_PREFIX].rstrip("-.")
    return f"{prefix}-g{attempt}-{index}"


def gang_claim_manifest(
    node: NewNodeClaim,
    pool: Mapping[str, Any],
    *,
    name: str,
    gid: str,
    key: str,
    attempt: str,
    same_zone: bool,
) -> Obj:
    """The provisioner's NodeClaim manifest, named, labelled and tainted for the gang.

    With ``same_zone``, the chosen zone becomes a requirement so the provider cannot fall back to
    another zone on its own (a gang split over zones is a rollback, not a success).
    """
    manifest = nodeclaim_manifest(node, dict(pool))
    meta = manifest["metadata"]
    meta.pop("generateName", None)
    meta["name"] = name
    meta["labels"][LABEL_GANG] = gid
    meta["annotations"][ANNOTATION_GANG_ATTEMPT] = attempt
    meta["annotations"][ANNOTATION_GANG_NAME] = key
    choice = node.choice
    meta["annotations"][ANNOTATION_GANG_OFFERING] = f"{choice.instance_type}/{choice.zone}/{choice.capacity_type}"
    spec = manifest["spec"]
    taint = gang_taint(gid).to_dict()
    taints = list(spec.get("taints") or [])
    if not any(t.get("key") == taint["key"] and t.get("value") == taint["value"] for t in taints):
        taints.append(taint)
    spec["taints"] = taints
    if same_zone:
        reqs = [r for r in spec.get("requirements") or [] if r.get("key") != LABEL_ZONE]
        reqs.append({"key": LABEL_ZONE, "operator": "In", "values": [node.choice.zone]})
        spec["requirements"] = reqs
    return manifest


def pin_patch(pod: PodView, gid: str, record: Record) -> Obj:
    """Merge patch: the record, plus the node selector and toleration that keep the pod on the gang's
    nodes (allowed while the pod is gated: scheduling constraints may only be tightened)."""
    patch: Obj = {"metadata": {"annotations": {ANNOTATION_GANG_STATE: record.to_json()}}}
    spec_patch: Obj = {}
    if pod.node_selector.get(LABEL_GANG) != gid:
        spec_patch["nodeSelector"] = {LABEL_GANG: gid}
    tolerations = list(pod.raw_tolerations)
    wanted = gang_toleration(gid)
    if not any(_same_toleration(t, wanted) for t in tolerations):
        spec_patch["tolerations"] = [*tolerations, wanted]
    if spec_patch:
        patch["spec"] = spec_patch
    return patch


def _same_toleration(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (
        a.get("key") == b.get("key")
        and (a.get("operator") or "Equal") == b.get("operator")
        and (a.get("value") or "") == b.get("value")
        and (a.get("effect") or "") == b.get("effect")
    )


def record_patch(record: Record) -> Obj:
    """Merge patch writing only the record."""
    return {"metadata": {"annotations": {ANNOTATION_GANG_STATE: record.to_json()}}}


def ungate_patch(pod: PodView, record: Record) -> list[Obj] | None:
    """JSON patch removing joiner's gate (tested in place first) and recording the admission.

    None when the pod carries no gate any more.
    """
    index = gate_index(pod)
    if index is None:
        return None
    ops: list[Obj] = [
        {"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": SCHEDULING_GATE_GANG},
        {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
    ]
    if (pod.raw.get("metadata") or {}).get("annotations") is None:  # no map to add a key to
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION_GANG_STATE: record.to_json()}})
    else:
        ops.append(
            {"op": "add", "path": f"/metadata/annotations/{escape(ANNOTATION_GANG_STATE)}", "value": record.to_json()}
        )
    return ops


def pod_condition_patch(*, status: bool, reason: str, message: str, now: datetime) -> Obj:
    """Strategic merge patch (status subresource): the GangAdmitted pod condition, merged by type."""
    return {
        "status": {
            "conditions": [
                {
                    "type": POD_CONDITION_GANG,
                    "status": "True" if status else "False",
                    "reason": reason,
                    "message": message[:32768],
                    "lastTransitionTime": format_time(now),
                }
            ]
        }
    }


def claim_admitted_patch(claim: NodeClaimView, *, status: bool, reason: str, message: str, now: datetime) -> Obj:
    """Merge patch (status subresource) setting GangAdmitted, guarded by the resourceVersion read."""
    update = ConditionUpdate(GANG_ADMITTED, "True" if status else "False", reason, message)
    return {
        "metadata": {"resourceVersion": claim.resource_version or None},
        "status": claim_status(claim.raw, [update], now=now),
    }
