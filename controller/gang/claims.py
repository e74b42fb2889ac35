"""Reading a gang's NodeClaims and Nodes (views from the cache). Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Mapping

from api.v1.conditions import GANG_ADMITTED, INITIALIZED, LAUNCHED, REGISTERED
from api.v1.labels import LABEL_CAPACITY_TYPE, LABEL_ZONE
from controller.gang.markers import ANNOTATION_GANG_ATTEMPT, ANNOTATION_GANG_OFFERING, TAINT_GANG
from controller.state.deletion import termination_reason
from controller.state.views import NodeClaimView, NodeView

__all__ = [
    "admitted",
    "attempt_of",
    "attracts",
    "describe",
    "ever_admitted",
    "node_names",
    "offering_of",
    "pinned_zone",
    "progress",
    "termination_reason",
    "zone_of",
]


def admitted(claim: NodeClaimView) -> bool:
    """Marked GangAdmitted=True: it hosts a running gang and must not be consolidated."""
    return claim.is_true(GANG_ADMITTED)


def ever_admitted(claim: NodeClaimView) -> bool:
    """It once served an admitted gang (GangAdmitted present, True or False)."""
    return claim.condition(GANG_ADMITTED) is not None


def attempt_of(claim: NodeClaimView) -> str:
    return str(claim.annotations.get(ANNOTATION_GANG_ATTEMPT, ""))


def _single_requirement(claim: NodeClaimView, key: str) -> str | None:
    for req in claim.requirements:
        values = req.get("values") or []
        if req.get("key") == key and req.get("operator") == "In" and len(values) == 1:
            return str(values[0])
    return None


def pinned_zone(claim: NodeClaimView) -> str | None:
    """The one zone the claim's requirements allow (a same-zone gang's claims pin it), if any."""
    return _single_requirement(claim, LABEL_ZONE)


def _instance_type(claim: NodeClaimView) -> str | None:
    return claim.instance_type or claim.planned_instance_type


def offering_of(claim: NodeClaimView) -> str | None:
    """``type/zone/capacity-type`` the claim launched (or was planned) on, when all three are known."""
    it = _instance_type(claim)
    zone = zone_of(claim)
    ct = claim.labels.get(LABEL_CAPACITY_TYPE) or _single_requirement(claim, LABEL_CAPACITY_TYPE)
    if it and zone and ct:
        return f"{it}/{zone}/{ct}"
    planned = claim.annotations.get(ANNOTATION_GANG_OFFERING)
    return str(planned) if planned else None


def zone_of(claim: NodeClaimView) -> str | None:
    return claim.labels.get(LABEL_ZONE) or _single_requirement(claim, LABEL_ZONE)


def describe(claim: NodeClaimView) -> str:
    """``nodeclaim/x (p5.48xlarge, us-east-1a)``: how Events and logs name a member."""
    where = ", ".join(str(x) for x in (_instance_type(claim), zone_of(claim)) if x)
    return f"nodeclaim/{claim.name or '?'}" + (f" ({where})" if where else "")


def progress(claim: NodeClaimView) -> str:
    """How far the claim got: the first lifecycle condition that is not True, with its message."""
    for ctype in (LAUNCHED, REGISTERED, INITIALIZED):
        cond = claim.condition(ctype)
        if cond is None:
            return f"not {ctype.lower()} yet"
        if not cond.is_true:
            detail = cond.message or cond.reason
            return f"{ctype}={cond.status}" + (f": {detail}" if detail else "")
    return "Initialized"


def node_names(claims: Mapping[str, NodeClaimView]) -> set[str]:
    """Every name or providerID under which the claims' Nodes may appear."""
    out: set[str] = set()
    for name, claim in claims.items():
        out.add(name)
        out.update(v for v in (claim.node_name, claim.provider_id) if v)
    return out


def attracts(node: NodeView, gid: str) -> bool:
    """Whether the gang's pods could be scheduled on the Node (its only blocking taint is the gang's)."""
    if node.unschedulable:
        return False
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if taint.key == TAINT_GANG and taint.value == gid:
            continue
        return False
    return True
