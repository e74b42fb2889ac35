"""What the cache says a new machine from a NodePool is made of: the hash of the NodePool's
template (what drift detection compares a NodeClaim against) and the pods every DaemonSet would
run on it (its overhead, as solver pods). Shared by provisioning, gangs and disruption."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import structlog

from controller.scheduling import kubeconv
from controller.scheduling.model import Pod
from controller.state.cluster import ClusterState

log = structlog.get_logger()


def nodepool_hash(pool: Mapping[str, Any]) -> str:
    """A hash of what a NodePool's NodeClaims are made from (spec.template): a change means drift."""
    template = (pool.get("spec") or {}).get("template") or {}
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def daemon_templates(cluster: ClusterState, *, component: str = "provisioner") -> list[Pod]:
    """The pod every DaemonSet would run on a new node (its overhead)."""
    daemons = []
    for ds in cluster.daemonsets():
        try:
            daemons.append(kubeconv.daemonset_from_dict(ds))
        except ValueError as err:
            log.warning(f"{component}.daemonset_unreadable", daemonset=ds["metadata"]["name"], error=str(err))
    return daemons
