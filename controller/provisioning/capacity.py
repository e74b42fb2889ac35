"""What the solver is given about the cluster, shared by the provisioner and the gang controller:
the NodePools that may launch now (with their instance types), and which nominated pods still fit
the machine planned for them. The capacity that exists or is in flight comes from
`controller.state.existing.cluster_capacity`, daemonset overhead from `controller.state.nodepools`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog

from controller.scheduling.model import ExistingNode, Pod
from controller.scheduling.resources import ONE_POD

log = structlog.get_logger()
Obj = dict[str, Any]


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
