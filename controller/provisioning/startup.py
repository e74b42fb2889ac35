"""Pod startup latency: for every pod joiner had to find room for (kube-scheduler marked it
Unschedulable, or it waited behind joiner's gang gate), the time from its creation to the moment
the controller's watch sees it Running, by the NodePool of the node it runs on; and how many such
pods wait now and for how long the oldest has waited."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Any

from api.v1 import labels as wk
from controller import metrics
from controller.clock import Clock
from controller.state.cluster import ClusterState
from controller.state.views import PodView

STARTUP_BUCKETS = (1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800, 3600)

POD_STARTUP_SECONDS = metrics.histogram(
    "joiner_pods_startup_duration_seconds",
    "From a pod's creation to the controller seeing it Running, for pods that waited for joiner "
    "(Unschedulable or gang-gated), by the NodePool of the node it runs on.",
    ("nodepool",),
    buckets=STARTUP_BUCKETS,
)

WAITING = metrics.gauge(
    "joiner_pods_waiting",
    "Pods waiting for joiner now (Unschedulable or gang-gated, not yet Running).",
)
OLDEST_WAITING = metrics.gauge(
    "joiner_pods_waiting_oldest_age_seconds",
    "Age (since creation) of the oldest pod waiting for joiner; 0 when none waits.",
)


class PodStartupTracker:
    """Remembers the pods that waited for capacity and observes their startup once they run."""

    def __init__(self, *, cluster: ClusterState, clock: Clock) -> None:
        self.cluster = cluster
        self.clock = clock
        self.waiting: dict[str, datetime | None] = {}  # pod key -> its creation time

    def oldest_age(self) -> float:
        created = [c for c in self.waiting.values() if c is not None]
        return max(0.0, (self.clock.now() - min(created)).total_seconds()) if created else 0.0

    def _wait(self, pod: PodView) -> None:
        self.waiting[pod.key] = pod.created

    def on_pod(self, etype: str, pod: PodView, old: Any) -> None:
        if etype == "DELETED" or pod.deleting or pod.is_terminal:
            self.waiting.pop(pod.key, None)
            return
        if pod.is_unschedulable or wk.SCHEDULING_GATE_GANG in pod.scheduling_gates:
            self._wait(pod)
            return
        if pod.key not in self.waiting or pod.phase != "Running" or not pod.node_name:
            return
        self.waiting.pop(pod.key, None)
        node = self.cluster.node_views().get(pod.node_name)
        pool = node.labels.get(wk.LABEL_NODEPOOL) if node is not None else None
        created = pod.created
        if not pool or created is None:
            return  # it ran on a node joiner did not launch
        POD_STARTUP_SECONDS.labels(pool).observe(max(0.0, (self.clock.now() - created).total_seconds()))

    def on_pool(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """A pool's histogram exists at 0 from the start (so rate() sees its first pod), and goes with it."""
        name = str(obj["metadata"]["name"])
        if etype == "DELETED":
            with contextlib.suppress(KeyError):
                POD_STARTUP_SECONDS.remove(name)
        else:
            POD_STARTUP_SECONDS.labels(name)

    async def run(self) -> None:
        for pool in list(self.cluster.nodepools().values()):
            self.on_pool("ADDED", pool, None)
        self.cluster.subscribe("NodePool", self.on_pool)
        for pod in list(self.cluster.pod_views()):  # the pods that already waited when it started
            if pod.is_unschedulable or wk.SCHEDULING_GATE_GANG in pod.scheduling_gates:
                self._wait(pod)
        WAITING.set_function(lambda: len(self.waiting))
        OLDEST_WAITING.set_function(self.oldest_age)
        self.cluster.subscribe_views("Pod", self.on_pod)
        await asyncio.Event().wait()  # the watch calls on_pod; nothing else to do
