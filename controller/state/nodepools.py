"""What a NodePool's manifest says beyond the solver's template: the hash of its template (what
drift detection compares a NodeClaim against) and its capacity-type mix. The NodePools that may
launch now, and the solver's inputs made from them, are ``state/inputs.py``'s."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import structlog

from controller.scheduling.tiermix import TierMix, TierMixError

log = structlog.get_logger()


def nodepool_hash(pool: Mapping[str, Any]) -> str:
    """A hash of what a NodePool's NodeClaims are made from (spec.template): a change means drift."""
    template = (pool.get("spec") or {}).get("template") or {}
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def tier_mix(pool: Mapping[str, Any]) -> TierMix | None:
    """The NodePool's ``spec.capacity.tierMix`` (percent of spot / on-demand / reserved), or None.

    The NodePool was validated (the model checks the shares add up to 100); one that is not read
    here anyway is treated as having no mix, with a log line."""
    raw = ((pool.get("spec") or {}).get("capacity") or {}).get("tierMix")
    if not raw:
        return None
    try:
        return TierMix.from_percent(
            spot=float(raw.get("spot", 0)),
            on_demand=float(raw.get("onDemand", 0)),
            reserved=float(raw.get("reserved", 0)),
        )
    except (TierMixError, TypeError, ValueError, AttributeError) as err:
        log.warning("nodepool.tier_mix_unreadable", nodepool=(pool.get("metadata") or {}).get("name"), error=str(err))
        return None
