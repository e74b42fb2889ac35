"""Nominations kept or released: which pods nominated to a planned machine still fit next to what
kube-scheduler bound there (:func:`split_nominated`). The provisioner keeps the ones that fit on
their machine and plans the others again. (What the solver is given about the cluster is
``controller/state/inputs.py``'s.)"""

from __future__ import annotations

from collections.abc import Sequence

from controller.scheduling.model import ExistingNode, Pod
from controller.scheduling.resources import ONE_POD


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
