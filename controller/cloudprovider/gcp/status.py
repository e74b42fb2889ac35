"""What a GCENodeClass's status says: what the provider's resolver resolved it to (so the status
shows what launches use) and ``Ready``, keeping its transition time. The loop that writes it is
``controller/nodeclass/gce.py``.
"""

from __future__ import annotations

from typing import Any

import structlog

from controller.cloudprovider.gcp.nodeclass import NodeClassResolver, ResolvedNodeClass
from controller.state.patches import condition

log = structlog.get_logger()
Obj = dict[str, Any]


def resolved_status(view: ResolvedNodeClass, resolver: NodeClassResolver) -> Obj:
    return {
        "zones": list(view.zones),
        "subnetwork": view.subnetwork,
        "images": [
            {
                "image": c.image,
                **({"gpu": c.gpu} if c.gpu is not None else {}),
                **({"instanceTemplate": c.template_path} if c.template_path else {}),
            }
            for c in view.images
        ],
        "reservations": [
            {
                "name": r.name,
                "project": r.project,
                "zone": r.zone,
                "instanceType": r.instance_type,
                "available": max(0, resolver.room(r).available),
            }
            for r in view.reservations
        ],
    }


def desired_status(obj: Obj, resolved: Obj, *, ready: bool, reason: str, message: str, now: str) -> Obj:
    current = obj.get("status") or {}
    ready_condition = condition(obj, "Ready", ok=ready, reason=reason, message=message, now=now)
    others = [c for c in current.get("conditions") or [] if c.get("type") != "Ready"]
    return {**resolved, "conditions": [*others, ready_condition]}


def same_status(current: Obj, desired: Obj) -> bool:
    """The same status but for the conditions' transition times (nothing to write)."""

    def strip(status: Obj) -> Obj:
        out = {k: v for k, v in status.items() if k != "conditions"}
        out["conditions"] = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
        ]
        for key in ("zones", "images", "reservations"):
            out.setdefault(key, [])
        return out

    return strip(current) == strip(desired)
