"""Keeps each NodePool's warm buffer described: from ``spec.capacity`` and the clock, the placeholder
pods the provisioner must plan, how much of the buffer is ready, and the pool's spend.

Per NodePool it publishes a :class:`~controller.state.buffers.BufferReport` to the shared book
(the provisioner plans the placeholders and buys what is missing, through the one NodeClaim
writer; disruption keeps the nodes holding them; the NodePool status shows wanted / ready), sets
the metrics, and wakes up again when a schedule window opens or closes. It writes nothing to the
apiserver itself.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any, Final

import structlog
from prometheus_client import Gauge

from api.v1.capacity import price_value
from api.v1.labels import LABEL_NODEPOOL
from api.v1.nodepool import NodePool
from api.v1.validation import InvalidObjectError, validate
from controller.capacity.buffer import buffer_needs, virtual_pods
from controller.capacity.metrics import BUDGET, BUFFER_READY, BUFFER_WANTED, SPEND
from controller.capacity.schedule import next_change
from controller.cloudprovider.types import CloudProviderError
from controller.context import Context
from controller.scheduling import kubeconv
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.model import ExistingNode
from controller.scheduling.warm import place_buffer
from controller.state.buffers import BufferReport
from controller.state.existing import cluster_capacity
from controller.state.nodepools import daemon_templates
from controller.state.queue import WorkQueue
from controller.state.spend import claim_prices
from controller.state.views import PodView

log = structlog.get_logger()
Obj = dict[str, Any]
COALESCE_SECONDS: Final = 1.0  # a burst of pod and NodeClaim events makes one pass per pool
MAX_WAIT_SECONDS: Final = 300.0  # look again at least this often (windows are also woken for exactly)
RETRY_SECONDS: Final = 10.0


def _remove(metric: Gauge, *labels: str) -> None:
    """Drop one series (a pool that no longer has a buffer or budget); absent is fine."""
    with contextlib.suppress(KeyError):
        metric.remove(*labels)


class CapacityController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.queue = WorkQueue(name="capacity", clock=ctx.clock)
        self._spend_labels: dict[str, set[str]] = {}  # pool -> capacity types with a spend series

    # --- triggers --------------------------------------------------------------------------
    def _all_later(self, *_: Any) -> None:
        for name in self.ctx.cluster.nodepools():
            self.queue.add_after(name, COALESCE_SECONDS)

    def _on_pool(self, etype: str, obj: Obj, old: Obj | None) -> None:
        self.queue.add(obj["metadata"]["name"])

    def _on_claim(self, etype: str, obj: Obj, old: Obj | None) -> None:
        pool = (obj["metadata"].get("labels") or {}).get(LABEL_NODEPOOL)
        if pool:
            self.queue.add_after(pool, COALESCE_SECONDS)

    def _on_pod(self, etype: str, pod: PodView, old: PodView | None) -> None:
        # only pods taking or leaving room on a node change what is free
        if pod.node_name and (etype != "MODIFIED" or old is None or old.node_name != pod.node_name or pod.is_terminal):
            node = self.ctx.cluster.node_views().get(pod.node_name)
            pool = node.labels.get(LABEL_NODEPOOL) if node is not None else None
            if pool:
                self.queue.add_after(pool, COALESCE_SECONDS)

    async def run(self) -> None:
        cluster = self.ctx.cluster
        cluster.subscribe("NodePool", self._on_pool)
        cluster.subscribe("NodeClaim", self._on_claim)
        cluster.subscribe("Node", self._all_later)
        cluster.subscribe("DaemonSet", self._all_later)
        cluster.subscribe_views("Pod", self._on_pod)
        await cluster.wait_synced()
        for name in cluster.nodepools():
            self.queue.add(name)
        await self.queue.run(self.reconcile, workers=1)

    # --- reconcile -------------------------------------------------------------------------
    def _forget(self, name: str) -> None:
        self.ctx.buffers.forget(name)
        for metric in (BUFFER_WANTED, BUFFER_READY, BUDGET):
            _remove(metric, name)
        for capacity_type in self._spend_labels.pop(name, set()):
            _remove(SPEND, name, capacity_type)

    def _spend(self, name: str, types: dict[str, InstanceType]) -> None:
        claims = [*self.ctx.cluster.claim_views().values(), *self.ctx.writer.in_flight()]
        by_type: dict[str, float] = {}
        for priced in claim_prices(claims, types):
            if priced.pool == name:
                by_type[priced.capacity_type] = by_type.get(priced.capacity_type, 0.0) + priced.price
        for capacity_type in self._spend_labels.get(name, set()) - set(by_type):
            _remove(SPEND, name, capacity_type)
        for capacity_type, price in by_type.items():
            SPEND.labels(name, capacity_type).set(round(price, 6))
        self._spend_labels[name] = set(by_type)

    def _pool_nodes(self, name: str, types: tuple[InstanceType, ...]) -> tuple[list[ExistingNode], set[str]]:
        """The pool's nodes (registered and in flight) and the names of those initialized."""
        cluster = self.ctx.cluster
        nodes = [
            n for n in cluster_capacity(cluster, types, extra_claims=self.ctx.writer.in_flight()) if n.node_pool == name
        ]
        initialized = set()
        for n in nodes:
            view = cluster.node_views().get(n.name)
            claim = cluster.claim_view_for_node(view) if view is not None else None
            if claim is not None and claim.initialized and not n.in_flight:
                initialized.add(n.name)
        return nodes, initialized

    async def reconcile(self, name: str) -> float | None:
        pool = self.ctx.cluster.nodepools().get(name)
        if pool is None or pool["metadata"].get("deletionTimestamp"):
            self._forget(name)
            return None
        try:
            model = validate(NodePool, pool)
            types = tuple(await self.ctx.cloud.instance_types(pool))
        except InvalidObjectError:
            self._forget(name)  # the NodePool status says why
            return None
        except CloudProviderError as err:
            log.debug("capacity.instance_types_unavailable", nodepool=name, error=str(err))
            return RETRY_SECONDS
        capacity = model.spec.capacity
        self._spend(name, {it.name: it for it in types})
        if capacity is not None and capacity.budget is not None:
            BUDGET.labels(name).set(price_value(capacity.budget.max_price_per_hour))
        else:
            _remove(BUDGET, name)
        if capacity is None or (capacity.buffer is None and not capacity.schedules):
            self.ctx.buffers.forget(name)
            for metric in (BUFFER_WANTED, BUFFER_READY):
                _remove(metric, name)
            return None
        now = self.ctx.clock.now()
        report = self._report(name, model, types, now)
        self.ctx.buffers.publish(report)
        BUFFER_WANTED.labels(name).set(report.wanted)
        BUFFER_READY.labels(name).set(report.ready)
        return self._wait(capacity.schedules, now)

    def _report(self, name: str, model: NodePool, types: tuple[InstanceType, ...], now: datetime) -> BufferReport:
        assert model.spec.capacity is not None
        needs = buffer_needs(model.spec.capacity, now)
        if not needs:
            return BufferReport(pool=name)
        try:
            template = kubeconv.nodepool_template(model, types)
            nodes, initialized = self._pool_nodes(name, types)
        except ValueError as err:
            log.warning("capacity.unreadable", nodepool=name, error=str(err))
            return BufferReport(pool=name, problems=(str(err),))
        sized = virtual_pods(needs, template, daemon_templates(self.ctx.cluster, component="capacity"))
        placement = place_buffer(sized.pods, nodes)
        ready = sum(sized.units[p.key] for node, held in placement.held.items() if node in initialized for p in held)
        report = BufferReport(
            pool=name,
            pods=sized.pods,
            wanted=sized.wanted,
            ready=min(ready, sized.wanted),
            missing=len(placement.missing),
            problems=sized.problems,
        )
        if report != self.ctx.buffers.report(name):
            log.info(
                "capacity.buffer",
                nodepool=name,
                wanted=report.wanted,
                ready=report.ready,
                missing=report.missing,
                sources=sorted({s for n in needs for s in n.sources}),
            )
        return report

    def _wait(self, schedules: list[Any], now: datetime) -> float:
        change = next_change(schedules, now)
        if change is None:
            return MAX_WAIT_SECONDS
        return max(0.5, min(MAX_WAIT_SECONDS, (change - now).total_seconds() + 0.5))
