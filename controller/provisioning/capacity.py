"""What the solver is given about the cluster, shared by the provisioner and the gang controller:
the NodePools that may launch now (with their instance types), and which nominated pods still fit
the machine planned for them. The capacity that exists or is in flight comes from
`controller.state.existing.cluster_capacity`, daemonset overhead from `controller.state.nodepools`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog

from api.v1.nodepool import NodePool
from api.v1.validation import InvalidObjectError, validate
from controller.cloudprovider.types import CloudProviderError
from controller.context import Context
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.model import ExistingNode, Pod
from controller.scheduling.resources import ONE_POD

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
