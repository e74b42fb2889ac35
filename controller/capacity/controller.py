"""Keeps each NodePool's warm buffer described: from ``spec.capacity`` and the clock, the placeholder
pods the provisioner must plan, how much of the buffer is ready, and the pool's spend.

Per NodePool it publishes a :class:`~controller.state.buffers.BufferReport` to the shared book
(the provisioner plans the placeholders and buys what is missing, through the one NodeClaim
writer; disruption keeps the nodes holding them; the NodePool status shows wanted / ready), sets
the metrics, and wakes up again when a schedule window opens or closes.

With ``spec.capacity.forecast.enabled`` it also samples the pool's demand every minute into an
hourly history (``controller/capacity/history.py``, kept in the ConfigMap
``joiner-forecast-history`` of the controller's namespace so it survives restarts), and adds what
the forecast (``controller/capacity/forecast.py``) says to pre-warm to the pool's buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from datetime import datetime, timedelta
from typing import Any, Final

import structlog
from prometheus_client import Gauge

from api.v1.capacity import GPU_RESOURCE, price_value
from api.v1.labels import LABEL_NODEPOOL
from api.v1.nodepool import NodePool
from api.v1.types import parse_duration
from api.v1.validation import InvalidObjectError, validate
from controller.capacity.buffer import MILLI, BufferNeed, buffer_needs, node_type, virtual_pods
from controller.capacity.forecast import ForecastConfig, ForecastError, Prewarm, decide
from controller.capacity.history import History, deserialize, serialize
from controller.capacity.metrics import (
    BUDGET,
    BUFFER_READY,
    BUFFER_WANTED,
    FORECAST_CONFIDENCE,
    FORECAST_PREDICTED,
    FORECAST_PREWARM,
    SPEND,
)
from controller.capacity.schedule import next_change
from controller.cloudprovider.types import CloudProviderError
from controller.context import Context
from controller.kube.client import ApiError, NotFoundError
from controller.kube.resources import CONFIGMAPS
from controller.scheduling import kubeconv, kubeconv_nodes
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.model import ExistingNode
from controller.scheduling.resources import CPU, Resources
from controller.scheduling.warm import place_buffer
from controller.state.buffers import BufferReport
from controller.state.existing import cluster_machines
from controller.state.inputs import daemon_templates
from controller.state.queue import WorkQueue
from controller.state.spend import claim_prices
from controller.state.views import PodView

log = structlog.get_logger()
Obj = dict[str, Any]
COALESCE_SECONDS: Final = 1.0  # a burst of pod and NodeClaim events makes one pass per pool
MAX_WAIT_SECONDS: Final = 300.0  # look again at least this often (windows are also woken for exactly)
RETRY_SECONDS: Final = 10.0
FORECAST_SAMPLE_SECONDS: Final = 60.0
FORECAST_SAVE_EVERY: Final = 5  # samples between writes of the history ConfigMap
HISTORY_CONFIGMAP: Final = "joiner-forecast-history"


def forecast_config(raw: Any) -> ForecastConfig | None:
    """The pool's forecast settings (the API model's ``spec.capacity.forecast``), None when off."""
    if raw is None or not raw.enabled:
        return None
    lookback, lead_time = parse_duration(raw.lookback), parse_duration(raw.lead_time)
    return ForecastConfig(
        lookback=timedelta(days=7) if lookback is None else lookback,
        lead_time=timedelta(minutes=30) if lead_time is None else lead_time,
        confidence=float(raw.confidence),
    )


def _remove(metric: Gauge, *labels: str) -> None:
    """Drop one series (a pool that no longer has a buffer or budget); absent is fine."""
    with contextlib.suppress(KeyError):
        metric.remove(*labels)


class CapacityController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.queue = WorkQueue(name="capacity", clock=ctx.clock)
        self._spend_labels: dict[str, set[str]] = {}  # pool -> capacity types with a spend series
        self.histories: dict[str, History] = {}  # pool -> demand history (forecast pools)
        self.decisions: dict[str, Prewarm] = {}  # pool -> the forecast's latest decision
        self._loaded = False

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
        sampler = asyncio.create_task(self._forecast_loop(), name="capacity-forecast")
        try:
            await self.queue.run(self.reconcile, workers=1)
        finally:
            sampler.cancel()

    # --- forecast --------------------------------------------------------------------------
    async def _forecast_loop(self) -> None:
        samples = 0
        while True:
            try:
                changed = await self.sample()
                samples += 1
                if changed and samples % FORECAST_SAVE_EVERY == 1:
                    await self.save_history()
            except Exception:
                log.exception("capacity.forecast_failed")
            await self.ctx.clock.sleep(FORECAST_SAMPLE_SECONDS)

    async def load_history(self) -> None:
        """The histories stored by an earlier run (once); unreadable entries start afresh."""
        if self._loaded:
            return
        self._loaded = True
        try:
            cm = await self.ctx.client.get(CONFIGMAPS, HISTORY_CONFIGMAP, namespace=self.ctx.settings.namespace)
        except NotFoundError:
            return
        except ApiError as err:
            log.warning("capacity.forecast_history_unreadable", error=str(err))
            return
        histories, problems = deserialize(cm.get("data") or {})
        for problem in problems:
            log.warning("capacity.forecast_history_unreadable", error=problem)
        for pool, history in histories.items():
            self.histories.setdefault(pool, history)

    async def save_history(self) -> None:
        body = {"data": serialize(self.histories)}
        namespace = self.ctx.settings.namespace
        try:
            await self.ctx.client.patch(CONFIGMAPS, HISTORY_CONFIGMAP, body, namespace=namespace)
        except NotFoundError:
            manifest = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": HISTORY_CONFIGMAP, "namespace": namespace},
                **body,
            }
            try:
                await self.ctx.client.create(CONFIGMAPS, manifest, namespace=namespace)
            except ApiError as err:
                log.warning("capacity.forecast_history_not_saved", error=str(err))
        except ApiError as err:
            log.warning("capacity.forecast_history_not_saved", error=str(err))

    def demand(self, pool: str, unit: str) -> float:
        """What the pool's workload asks for now: pods on its nodes, and pending pods nominated to them."""
        cluster = self.ctx.cluster
        nodes = {n for n, v in cluster.node_views().items() if v.labels.get(LABEL_NODEPOOL) == pool}
        claims = {c.name for c in cluster.claim_views().values() if c.nodepool == pool}
        resource = GPU_RESOURCE if unit == "gpu" else CPU
        total = 0
        for pod in cluster.pod_views():
            if pod.is_terminal or pod.is_daemon or pod.deleting:
                continue
            where = pod.node_name or pod.nominated_node_name
            if where is None or (where not in nodes and where not in claims):
                continue
            try:
                total += kubeconv.pod_requests(pod.raw.get("spec") or {}).get(resource)
            except ValueError:
                continue
        return total / MILLI

    async def sample(self) -> bool:
        """Record each forecast pool's demand and decide; True when a history changed."""
        await self.load_history()
        now = self.ctx.clock.now()
        changed = False
        for name, pool in sorted(self.ctx.cluster.nodepools().items()):
            try:
                model = validate(NodePool, pool)
                config = forecast_config(model.spec.capacity.forecast if model.spec.capacity else None)
            except (InvalidObjectError, ForecastError, ValueError) as err:
                log.debug("capacity.forecast_unreadable", nodepool=name, error=str(err))
                config = None
            if config is None:
                if self.decisions.pop(name, None) is not None:
                    _remove(FORECAST_CONFIDENCE, name)
                    for unit in ("gpu", "cpu"):
                        _remove(FORECAST_PREDICTED, name, unit)
                        _remove(FORECAST_PREWARM, name, unit)
                    self.queue.add(name)
                continue
            try:
                types = tuple(await self.ctx.cloud.instance_types(pool))
            except CloudProviderError:
                continue
            unit = "gpu" if any(it.capacity.get(GPU_RESOURCE) > 0 for it in types) else "cpu"
            history = self.histories.get(name)
            if history is None or history.unit != unit:
                history = self.histories[name] = History(unit=unit)
            current = self.demand(name, unit)
            history.record(current, at=now)
            changed = True
            decision = decide(history.peaks, now=now, current=current, config=config)
            FORECAST_PREDICTED.labels(name, unit).set(decision.predicted)
            FORECAST_CONFIDENCE.labels(name).set(decision.confidence)
            FORECAST_PREWARM.labels(name, unit).set(decision.prewarm)
            old = self.decisions.get(name)
            self.decisions[name] = decision
            if old is None or old.prewarm != decision.prewarm:
                log.info(
                    "capacity.forecast",
                    nodepool=name,
                    prewarm=decision.prewarm,
                    unit=unit,
                    confidence=decision.confidence,
                    why=decision.why,
                )
                self.queue.add(name)
        return changed

    def _forecast_need(self, name: str, template: Any) -> BufferNeed | None:
        decision = self.decisions.get(name)
        history = self.histories.get(name)
        if decision is None or decision.prewarm <= 0 or history is None:
            return None
        if history.unit == "gpu":
            return BufferNeed("gpus", decision.prewarm, Resources({GPU_RESOURCE: MILLI}), (), ("forecast",))
        it = node_type(template)
        cpus = it.allocatable.get(CPU) / MILLI if it is not None else 0.0
        if cpus <= 0:
            return None
        return BufferNeed("nodes", math.ceil(decision.prewarm / cpus), Resources(), (), ("forecast",))

    # --- reconcile -------------------------------------------------------------------------
    def _forget(self, name: str) -> None:
        self.ctx.buffers.forget(name)
        for metric in (BUFFER_WANTED, BUFFER_READY, BUDGET):
            _remove(metric, name)
        for capacity_type in self._spend_labels.pop(name, set()):
            _remove(SPEND, name, capacity_type)

    def _spend(self, name: str, types: dict[str, InstanceType]) -> None:
        # the pool's own NodeClaims only: pricing every pool's claims for each pool cost a 1,200-node burst
        # a few CPU-seconds (a reconcile per pool each time one of its NodeClaims changes)
        claims = [
            c for c in (*self.ctx.cluster.claim_views().values(), *self.ctx.writer.in_flight()) if c.nodepool == name
        ]
        by_type: dict[str, float] = {}
        for priced in claim_prices(claims, types):
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
            n for n in cluster_machines(cluster, types, extra_claims=self.ctx.writer.in_flight()) if n.node_pool == name
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
        forecasting = capacity is not None and capacity.forecast is not None and capacity.forecast.enabled
        if capacity is None or (capacity.buffer is None and not capacity.schedules and not forecasting):
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
        forecast = model.spec.capacity.forecast
        decision = self.decisions.get(name) if forecast is not None and forecast.enabled else None
        summary: dict[str, Any] = (
            {"forecast": decision.prewarm if decision.acted else 0, "forecast_confidence": decision.confidence}
            if decision is not None
            else ({"forecast": 0, "forecast_confidence": 0.0} if forecast is not None and forecast.enabled else {})
        )
        try:
            template = kubeconv_nodes.nodepool_template(model, types)
        except ValueError as err:
            log.warning("capacity.unreadable", nodepool=name, error=str(err))
            return BufferReport(pool=name, problems=(str(err),))
        extra = self._forecast_need(name, template) if decision is not None else None
        if extra is not None:
            needs = _merge(needs, extra)
        if not needs:
            return BufferReport(pool=name, **summary)
        try:
            nodes, initialized = self._pool_nodes(name, types)
        except ValueError as err:
            log.warning("capacity.unreadable", nodepool=name, error=str(err))
            return BufferReport(pool=name, problems=(str(err),), **summary)
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
            **summary,
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


def _merge(needs: list[BufferNeed], extra: BufferNeed) -> list[BufferNeed]:
    """The forecast's need next to the static and scheduled ones: of the same kind and shape, the
    largest wins (as between a static buffer and a schedule)."""
    key = (extra.kind, extra.requests, extra.selector)
    out = []
    merged = False
    for need in needs:
        if (need.kind, need.requests, need.selector) == key:
            merged = True
            out.append(need if need.amount >= extra.amount else extra)
        else:
            out.append(need)
    return out if merged else [*out, extra]
