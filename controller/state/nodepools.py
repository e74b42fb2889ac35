"""What the cache says a new machine from a NodePool is made of: the hash of the NodePool's
template (what drift detection compares a NodeClaim against), the pods every DaemonSet would
run on it (its overhead, as solver pods), and which NodePools may launch now with the instance
types their provider offers. Shared by provisioning, gangs and disruption."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from api.v1.nodepool import NodePool
from api.v1.validation import InvalidObjectError, validate
from controller.cloudprovider.types import CloudProviderError
from controller.scheduling import kubeconv
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.model import Pod
from controller.scheduling.tiermix import TierMix, TierMixError
from controller.state.cluster import ClusterState
from controller.state.views import Obj

if TYPE_CHECKING:
    from controller.context import Context

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


def daemon_templates(cluster: ClusterState, *, component: str = "provisioner") -> list[Pod]:
    """The pod every DaemonSet would run on a new node (its overhead)."""
    daemons = []
    for ds in cluster.daemonsets():
        try:
            daemons.append(kubeconv.daemonset_from_dict(ds))
        except ValueError as err:
            log.warning(f"{component}.daemonset_unreadable", daemonset=ds["metadata"]["name"], error=str(err))
    return daemons


async def valid_pools(
    ctx: Context, *, component: str = "provisioner"
) -> dict[str, tuple[Obj, tuple[InstanceType, ...]]]:
    """NodePools that may launch now, with the instance types their provider offers them."""
    pools: dict[str, tuple[Obj, tuple[InstanceType, ...]]] = {}
    for name, pool in sorted(ctx.cluster.nodepools().items()):
        if pool["metadata"].get("deletionTimestamp"):
            continue
        try:
            validate(NodePool, pool)
            instance_types = tuple(await ctx.cloud.instance_types(pool))
        except InvalidObjectError as err:
            log.warning(f"{component}.nodepool_invalid", nodepool=name, error=str(err))
            continue
        except CloudProviderError as err:
            log.warning(f"{component}.instance_types_unavailable", nodepool=name, error=str(err))
            continue
        pools[name] = (pool, instance_types)
    return pools
