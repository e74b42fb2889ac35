"""What the solver is given about the cluster, shared by the provisioner and the gang controller:
the NodePools that may launch now (with their instance types), the capacity that exists or is in
flight (registered Nodes with their pods, NodeClaims not registered yet), and daemonset overhead."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import structlog

from api.v1 import labels as wk
from api.v1.nodepool import NodePool
from api.v1.validation import InvalidObjectError, validate
from controller.cloudprovider.types import CloudProviderError
from controller.context import Context
from controller.provisioning.nodeclaims import PLANNED_INSTANCE_TYPE
from controller.scheduling import kubeconv
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.model import ExistingNode, Pod
from controller.scheduling.resources import ONE_POD
from controller.state.cluster import ClusterState, is_terminal

log = structlog.get_logger()
Obj = dict[str, Any]


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


def claim_capacity(claim: Obj, instance_types: Sequence[InstanceType]) -> ExistingNode | None:
    """An in-flight NodeClaim as the capacity it will bring (the planned machine until launched)."""
    node = kubeconv.nodeclaim_from_dict(claim, instance_types=instance_types)
    planned = (claim["metadata"].get("annotations") or {}).get(PLANNED_INSTANCE_TYPE)
    if node is None and planned:
        # created but not launched yet: count the machine the plan chose, so it is not bought twice
        labels = {**(claim["metadata"].get("labels") or {}), wk.LABEL_INSTANCE_TYPE: planned}
        node = kubeconv.nodeclaim_from_dict(
            {**claim, "metadata": {**claim["metadata"], "labels": labels}},
            instance_types=instance_types,
        )
    return node


def existing_capacity(
    cluster: ClusterState, instance_types: Sequence[InstanceType], *, extra_claims: Iterable[Obj] = ()
) -> list[ExistingNode]:
    """Registered nodes with their pods, and in-flight NodeClaims as the capacity they will bring.

    ``extra_claims``: NodeClaims the caller just created that the cache may not show yet.
    """
    pods = [p for p in cluster.pods() if not is_terminal(p)]
    existing = list(kubeconv.existing_nodes_from_dicts(cluster.nodes().values(), pods))
    cached = cluster.nodeclaims()
    extra = {c["metadata"]["name"]: c for c in extra_claims if c["metadata"]["name"] not in cached}
    claims = [*cached.values(), *extra.values()]
    for claim in claims:
        if claim["metadata"].get("deletionTimestamp") or cluster.node_for_claim(claim) is not None:
            continue
        node = claim_capacity(claim, instance_types)
        if node is not None:
            existing.append(node)
    return existing


def split_nominated(node: ExistingNode, nominated: Sequence[Pod]) -> tuple[list[Pod], list[Pod]]:
    """The pods nominated to ``node`` that still fit next to what is bound to it (in order), and the rest.

    kube-scheduler does not follow the plan: it may bind other pods to a node bought for these ones.
    A nominated pod that no longer fits will not land there however long it waits, so it is solved
    again at once instead of holding capacity that is gone.
    """
    room = node.allocatable - node.requested()
    kept: list[Pod] = []
    released: list[Pod] = []
    for pod in nominated:
        need = pod.requests + ONE_POD
        if need.fits_in(room):
            room = room - need
            kept.append(pod)
        else:
            released.append(pod)
    return kept, released


def daemon_templates(cluster: ClusterState, *, component: str = "provisioner") -> list[Pod]:
    """The pod every DaemonSet would run on a new node (its overhead)."""
    daemons = []
    for ds in cluster.daemonsets():
        try:
            daemons.append(kubeconv.daemonset_from_dict(ds))
        except ValueError as err:
            log.warning(f"{component}.daemonset_unreadable", daemonset=ds["metadata"]["name"], error=str(err))
    return daemons
