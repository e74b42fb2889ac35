"""When is an interrupted node's work running again? Pure: views in, answers out.

An interruption displaces the pods of the interrupted node. Their controllers (ReplicaSet,
StatefulSet, Job, ...) recreate them and joiner buys room for them; the workload is *replaced*
once every controller that had a pod on the node has, again, as many Running pods on other nodes
as it had Running anywhere when the message came. That moment, measured from the message, is
``joiner_interruption_replacement_seconds``. A gang restarted as a unit counts when all of its
members run again. Pods without a controller (nothing recreates them) and DaemonSet pods are not
counted; a node with nothing else has nothing to replace.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from controller.state.views import PodView


def controller_uid(pod: PodView) -> str | None:
    """The uid of the pod's controlling owner (not a DaemonSet), or None."""
    if pod.is_daemon or pod.controller is None:
        return None
    return pod.controller.uid


def _running(pod: PodView) -> bool:
    return pod.phase == "Running" and not pod.deleting and bool(pod.node_name)


@dataclass(frozen=True, slots=True)
class Displaced:
    """The work an interruption displaced: Running pods wanted back per controller."""

    kind: str
    since: datetime
    node: str
    wanted: tuple[tuple[str, int], ...]  # (controller uid, Running pods it had at the message)


def displaced(
    *, kind: str, since: datetime, node: str, on_node: Iterable[PodView], pods: Iterable[PodView]
) -> Displaced | None:
    """What an interruption of ``node`` displaces (None: nothing a controller would recreate)."""
    owners = {uid for p in on_node if p.is_drainable and (uid := controller_uid(p)) is not None}
    if not owners:
        return None
    counts = Counter(uid for p in pods if _running(p) and (uid := controller_uid(p)) in owners)
    wanted = tuple(sorted((uid, max(1, counts[uid])) for uid in owners))
    return Displaced(kind=kind, since=since, node=node, wanted=wanted)


def replaced(d: Displaced, pods: Iterable[PodView]) -> bool:
    """Whether every displaced controller has its Running pods back, none on the interrupted node."""
    owners = dict(d.wanted)
    counts = Counter(
        uid for p in pods if _running(p) and p.node_name != d.node and (uid := controller_uid(p)) in owners
    )
    return all(counts[uid] >= n for uid, n in owners.items())
