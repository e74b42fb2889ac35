"""Marks NodeClaims whose GPUs sit idle: reads DCGM utilization from Prometheus on a poll.

Runs only with ``--prometheus-url``. Every poll it asks Prometheus for the highest utilization of
each node's GPUs since the last poll, feeds the :class:`IdleTracker`, and for every Initialized
NodeClaim whose Node has GPUs:

* idle for the window: condition ``GPUIdle=True`` (reason ``GPUIdle``) and an Event on the
  NodeClaim and its Node;
* marked idle before and no longer idle: ``GPUIdle=False`` (reason ``GPUBusy``, or
  ``NoUtilization`` when Prometheus has no sample for the node) and an Event.

Consolidation reads the condition (``controller/disruption/snapshot.py``). Metrics:
``joiner_gpu_idle_nodes`` and ``joiner_gpu_idle_gpus`` per NodePool,
``joiner_gpu_idle_marks_total`` and ``joiner_gpu_utilization_query_errors_total``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, Protocol

import structlog

from api.quantity import QuantityError, parse_nano
from api.v1.conditions import GPU_IDLE
from api.v1.labels import RESOURCE_NVIDIA_GPU
from api.v1.types import format_duration
from controller.clock import format_time
from controller.context import Context
from controller.gpuidle.prometheus import PrometheusError
from controller.gpuidle.tracker import IdleNode, IdleTracker
from controller.kube.client import ConflictError, InvalidError, NotFoundError
from controller.kube.resources import NODECLAIMS
from controller.metrics import counter, gauge
from controller.state.patches import ConditionUpdate, claim_status, matches
from controller.state.queue import RECONCILE_ERRORS
from controller.state.views import NodeClaimView, NodeView

log = structlog.get_logger()

IDLE_NODES = gauge(
    "joiner_gpu_idle_nodes", "Nodes whose GPUs are idle (NodeClaim GPUIdle=True), by NodePool.", ("nodepool",)
)
IDLE_GPUS = gauge("joiner_gpu_idle_gpus", "GPUs on nodes marked GPUIdle, by NodePool.", ("nodepool",))
MARKS = counter("joiner_gpu_idle_marks_total", "NodeClaims newly marked GPUIdle, by NodePool.", ("nodepool",))
QUERY_ERRORS = counter("joiner_gpu_utilization_query_errors_total", "Failed GPU utilization queries to Prometheus.")
MIN_RANGE_SECONDS: Final = 60
"""The utilization query looks back at least this far, so a scrape interval longer than the poll
still yields a sample."""

REASON_IDLE: Final = "GPUIdle"
REASON_BUSY: Final = "GPUBusy"
REASON_NO_DATA: Final = "NoUtilization"


class UtilizationSource(Protocol):
    async def utilization(self, *, range_seconds: int) -> dict[str, float]:
        """Node name → highest GPU utilization (percent) over the last ``range_seconds``."""
        ...


def gpu_count(node: NodeView) -> int:
    """The GPUs the Node offers (allocatable, else capacity); 0 when none or unreadable."""
    raw = node.allocatable.get(RESOURCE_NVIDIA_GPU, node.capacity.get(RESOURCE_NVIDIA_GPU))
    if raw is None:
        return 0
    try:
        return max(0, parse_nano(str(raw)) // 1_000_000_000)
    except QuantityError:
        return 0


def desired_condition(
    *,
    node: str,
    idle: IdleNode | None,
    reported: bool,
    marked: bool,
    threshold: float,
    window: str,
) -> ConditionUpdate | None:
    """The GPUIdle condition a NodeClaim should carry; None: leave it as it is (never marked)."""
    if idle is not None:
        return ConditionUpdate(
            GPU_IDLE,
            "True",
            REASON_IDLE,
            f"every GPU on Node {node} stayed below {threshold:g}% utilization since "
            f"{format_time(idle.since)} (idle window {window})",
        )
    if not marked:
        return None
    if not reported:
        return ConditionUpdate(
            GPU_IDLE, "False", REASON_NO_DATA, f"Prometheus reports no GPU utilization for Node {node}"
        )
    return ConditionUpdate(
        GPU_IDLE, "False", REASON_BUSY, f"a GPU on Node {node} reached {threshold:g}% utilization or more"
    )


class GPUIdleController:
    def __init__(
        self,
        ctx: Context,
        *,
        source: UtilizationSource,
        tracker: IdleTracker,
        poll_seconds: float,
    ) -> None:
        self.ctx = ctx
        self.source = source
        self.tracker = tracker
        self.poll_seconds = poll_seconds

    async def run(self) -> None:
        await self.ctx.cluster.wait_synced()
        RECONCILE_ERRORS.labels("gpu-idle")  # served at 0 from the start
        while True:
            try:
                await self.reconcile()
            except Exception:
                log.exception("gpuidle.failed")
                RECONCILE_ERRORS.labels("gpu-idle").inc()
            await self.ctx.clock.sleep(self.poll_seconds)

    async def reconcile(self) -> None:
        now = self.ctx.clock.now()
        range_seconds = max(MIN_RANGE_SECONDS, int(self.poll_seconds + 0.999))
        samples: Mapping[str, float]
        try:
            samples = await self.source.utilization(range_seconds=range_seconds)
        except PrometheusError as err:
            QUERY_ERRORS.inc()
            log.warning("gpuidle.query_failed", error=str(err))
            self.tracker.failed(now=now)
            samples = {}
        else:
            self.tracker.observe(samples, now=now)
        idle = self.tracker.idle(now=now)
        policy = self.tracker.policy
        window = format_duration(policy.window)
        nodes: dict[str, int] = {}
        gpus: dict[str, int] = {}
        for claim in list(self.ctx.cluster.claim_views().values()):
            if claim.deleting or not claim.initialized:
                continue
            node = self.ctx.cluster.node_view_for_claim(claim)
            if node is None:
                continue
            count = gpu_count(node)
            if count == 0:
                continue
            update = desired_condition(
                node=node.name,
                idle=idle.get(node.name),
                reported=node.name in samples,
                marked=claim.is_true(GPU_IDLE),
                threshold=policy.threshold_percent,
                window=window,
            )
            if update is not None and update.status == "True":
                nodes[claim.nodepool] = nodes.get(claim.nodepool, 0) + 1
                gpus[claim.nodepool] = gpus.get(claim.nodepool, 0) + count
            if update is None or matches(claim, update):
                continue
            if await self._write(claim, update):
                await self._announce(claim, node, update)
        IDLE_NODES.clear()
        IDLE_GPUS.clear()
        for pool, n in nodes.items():
            IDLE_NODES.labels(pool).set(n)
            IDLE_GPUS.labels(pool).set(gpus[pool])

    async def _write(self, claim: NodeClaimView, update: ConditionUpdate) -> bool:
        body = {
            "metadata": {"resourceVersion": claim.resource_version or None},
            "status": claim_status(claim.raw, [update], now=self.ctx.clock.now()),
        }
        try:
            await self.ctx.client.patch(NODECLAIMS, claim.name, body, subresource="status")
        except (ConflictError, NotFoundError, InvalidError) as err:
            log.debug("gpuidle.status_not_written", nodeclaim=claim.name, error=str(err))
            return False
        return True

    async def _announce(self, claim: NodeClaimView, node: NodeView, update: ConditionUpdate) -> None:
        became_idle = update.status == "True"
        if became_idle:
            MARKS.labels(claim.nodepool).inc()
        kind: Literal["Normal", "Warning"] = "Normal"
        log.info("gpuidle.marked" if became_idle else "gpuidle.cleared", nodeclaim=claim.name, node=node.name)
        for obj in (claim.raw, node.raw):
            await self.ctx.events.emit(obj, reason=update.reason, message=update.message, type=kind)
