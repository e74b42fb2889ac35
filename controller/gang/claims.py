"""Reading a gang's NodeClaims (plain dicts from the cache). Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.v1.conditions import GANG_ADMITTED, INITIALIZED, LAUNCHED, REGISTERED
from api.v1.labels import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE
from controller.gang.markers import ANNOTATION_GANG_ATTEMPT, ANNOTATION_GANG_OFFERING, TAINT_GANG
from controller.nodeclaim import conditions as c
from controller.nodeclaim.deletion import ANNOTATION_TERMINATION_REASON
from controller.provisioning.nodeclaims import PLANNED_INSTANCE_TYPE

Obj = Mapping[str, Any]


def deleting(claim: Obj) -> bool:
    return bool((claim.get("metadata") or {}).get("deletionTimestamp"))


def initialized(claim: Obj) -> bool:
    return c.is_true(claim, INITIALIZED)


def admitted(claim: Obj) -> bool:
    """Marked GangAdmitted=True: it hosts a running gang and must not be consolidated."""
    return c.is_true(claim, GANG_ADMITTED)


def ever_admitted(claim: Obj) -> bool:
    """It once served an admitted gang (GangAdmitted present, True or False)."""
    return c.find(claim, GANG_ADMITTED) is not None


def attempt_of(claim: Obj) -> str:
    return str(((claim.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_GANG_ATTEMPT, ""))


def termination_reason(claim: Obj) -> str:
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_TERMINATION_REASON) or "Deleted")


def _single_requirement(claim: Obj, key: str) -> str | None:
    for req in (claim.get("spec") or {}).get("requirements") or []:
        values = req.get("values") or []
        if req.get("key") == key and req.get("operator") == "In" and len(values) == 1:
            return str(values[0])
    return None


def offering_of(claim: Obj) -> str | None:
    """``type/zone/capacity-type`` the claim launched (or was planned) on, when all three are known."""
    meta = claim.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    it = labels.get(LABEL_INSTANCE_TYPE) or annotations.get(PLANNED_INSTANCE_TYPE)
    zone = labels.get(LABEL_ZONE) or _single_requirement(claim, LABEL_ZONE)
    ct = labels.get(LABEL_CAPACITY_TYPE) or _single_requirement(claim, LABEL_CAPACITY_TYPE)
    if it and zone and ct:
        return f"{it}/{zone}/{ct}"
    planned = annotations.get(ANNOTATION_GANG_OFFERING)
    return str(planned) if planned else None


def zone_of(claim: Obj) -> str | None:
    labels = (claim.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_ZONE) or _single_requirement(claim, LABEL_ZONE)


def describe(claim: Obj) -> str:
    """``nodeclaim/x (p5.48xlarge, us-east-1a)``: how Events and logs name a member."""
    name = (claim.get("metadata") or {}).get("name", "?")
    meta = claim.get("metadata") or {}
    labels = meta.get("labels") or {}
    it = labels.get(LABEL_INSTANCE_TYPE) or (meta.get("annotations") or {}).get(PLANNED_INSTANCE_TYPE)
    zone = zone_of(claim)
    where = ", ".join(str(x) for x in (it, zone) if x)
    return f"nodeclaim/{name}" + (f" ({where})" if where else "")


def progress(claim: Obj) -> str:
    """How far the claim got: the first lifecycle condition that is not True, with its message."""
    for ctype in (LAUNCHED, REGISTERED, INITIALIZED):
        cond = c.find(claim, ctype)
        if cond is None or cond.get("status") != "True":
            if cond is None:
                return f"not {ctype.lower()} yet"
            detail = cond.get("message") or cond.get("reason") or ""
            return f"{ctype}={cond.get('status')}" + (f": {detail}" if detail else "")
    return "Initialized"


def node_names(claims: Mapping[str, Obj]) -> set[str]:
    """Every name or providerID under which the claims' Nodes may appear."""
    out: set[str] = set()
    for name, claim in claims.items():
        status = claim.get("status") or {}
        out.add(name)
        for key in ("nodeName", "providerID"):
            if status.get(key):
                out.add(str(status[key]))
    return out


def attracts(node: Obj, gid: str) -> bool:
    """Whether the gang's pods could be scheduled on the Node (its only blocking taint is the gang's)."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    for taint in spec.get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if taint.get("key") == TAINT_GANG and taint.get("value") == gid:
            continue
        return False
    return True
