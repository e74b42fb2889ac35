"""Termination: a deleted NodeClaim gives its Node back gracefully before its finalizer goes.

For a NodeClaim with a deletionTimestamp and the ``joiner.sh/termination`` finalizer:

1. Event ``Terminating``; condition ``Drained=False``.
2. Taint its Node ``joiner.sh/disrupted:NoSchedule`` so nothing new lands there.
3. Evict its pods through the Eviction API (PDB-aware; see `drain.plan_drain` for which and in what
   order). A refused eviction (429) is retried later. When the NodeClaim's
   ``terminationGracePeriod`` has passed since its deletion, the pods left are deleted outright.
4. ``Drained=True``; delete the instance (``CloudProvider.delete``) and the Node object; release
   the Node's finalizer.
5. Once the Node is gone, remove the NodeClaim's finalizer (Event ``Terminated``).

Nodes joiner creates carry the same finalizer, so ``kubectl delete node`` is graceful too: the Node
stays while this controller deletes its NodeClaim and runs the flow above. A Node with the finalizer
but no NodeClaim simply has the finalizer removed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

import structlog

from api.v1.conditions import DRAINED
from api.v1.labels import ANNOTATION_EVICTION_PRIORITY, TAINT_DISRUPTED, TAINT_DISRUPTED_EFFECT
from controller.clock import format_seconds
from controller.cloudprovider.types import CloudProviderError, NodeClaimNotFoundError
from controller.context import Context
from controller.kube.client import ApiError, ConflictError, InvalidError, NotFoundError, TooManyRequestsError
from controller.kube.resources import NODECLAIMS, NODES, PODS
from controller.state.deletion import delete_nodeclaim, termination_reason
from controller.state.informer import EventType
from controller.state.patches import ConditionUpdate, claim_status, finalizer_patch, matches, taint_patch
from controller.state.queue import WorkQueue
from controller.state.views import NodeClaimView, NodeView, PodView, TaintRef, newer
from controller.termination import metrics
from controller.termination.drain import DrainPlan, grace_deadline, plan_drain, seconds_until

log = structlog.get_logger()

DRAIN_RECHECK_SECONDS = 5.0
NODE_GONE_RECHECK_SECONDS = 10.0
CONFLICT_RETRY_SECONDS = 0.5
EVICTION_CONCURRENCY = 16
CLAIM, NODE = "nodeclaim/", "node/"
DISRUPTED_TAINT = TaintRef(key=TAINT_DISRUPTED, effect=TAINT_DISRUPTED_EFFECT)


class TerminationController:
    def __init__(self, ctx: Context, *, workers: int = 16) -> None:
        self.ctx = ctx
        self.queue = WorkQueue(name="termination", clock=ctx.clock)
        self._workers = workers
        self._latest: dict[str, NodeClaimView] = {}
        self._draining: dict[str, str] = {}  # node name -> NodeClaim name
        self._instance_deleted: set[str] = set()  # NodeClaim uids
        self._announced: set[str] = set()  # NodeClaim uids whose Terminating event went out

    # --- wiring ------------------------------------------------------------------------------

    async def run(self) -> None:
        cluster = self.ctx.cluster
        cluster.subscribe_views("NodeClaim", self._on_claim)
        cluster.subscribe_views("Node", self._on_node)
        cluster.subscribe_views("Pod", self._on_pod)
        await cluster.wait_synced()
        for name, claim in list(cluster.claim_views().items()):
            if claim.deleting:
                self.queue.add(CLAIM + name)
        for name, node in list(cluster.node_views().items()):
            if node.deleting:
                self.queue.add(NODE + name)
        await self.queue.run(self.reconcile, workers=self._workers)

    def _on_claim(self, etype: EventType, claim: NodeClaimView, old: NodeClaimView | None) -> None:
        if etype == "DELETED":
            self._latest.pop(claim.name, None)
            self._instance_deleted.discard(str(claim.uid))
            self._announced.discard(str(claim.uid))
            # a Node deleted while this claim still owned it was handed to the claim's reconcile; with
            # the claim gone nothing else changes on that Node, so look at it again now (its finalizer
            # is removed once no NodeClaim owns it)
            nodes = {node for node, owner in self._draining.items() if owner == claim.name}
            node = self._node_of(claim)
            if node is not None and node.deleting:
                nodes.add(node.name)
            for name in nodes:
                self.queue.add(NODE + name)
            return
        if claim.deleting:
            self.queue.add(CLAIM + claim.name)

    def _on_node(self, etype: EventType, node: NodeView, old: NodeView | None) -> None:
        name = node.name
        if etype == "DELETED":
            claim = self._draining.pop(name, None)
            if claim is None and name in self.ctx.cluster.claim_views():
                claim = name
            if claim is not None:
                self.queue.add(CLAIM + claim)
            return
        if node.deleting:
            self.queue.add(NODE + name)

    def _on_pod(self, etype: EventType, pod: PodView, old: PodView | None) -> None:
        node = pod.node_name or (old.node_name if old is not None else None)
        if node and node in self._draining:
            self.queue.add(CLAIM + self._draining[node])

    # --- reconcile ---------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        try:
            if key.startswith(NODE):
                return await self._reconcile_node(key.removeprefix(NODE))
            return await self._reconcile_claim(key.removeprefix(CLAIM))
        except (ConflictError, InvalidError) as err:
            log.debug("termination.write_conflict", key=key, error=str(err))
            self._latest.pop(key.removeprefix(CLAIM), None)
            return CONFLICT_RETRY_SECONDS
        except NotFoundError:
            return None

    def _claim(self, name: str) -> NodeClaimView | None:
        cached = self.ctx.cluster.claim_views().get(name)
        if cached is None:
            self._latest.pop(name, None)
            return None
        best = newer(self._latest.get(name), cached)
        if best is cached:
            self._latest.pop(name, None)
        return best

    def _node_of(self, claim: NodeClaimView) -> NodeView | None:
        node = self.ctx.cluster.node_view_for_claim(claim)
        if node is not None:
            return node
        candidate = self.ctx.cluster.node_views().get(claim.name)
        if candidate is not None and candidate.provider_id == claim.provider_id:
            return candidate
        return None

    def _claim_of(self, node: NodeView) -> NodeClaimView | None:
        claim = self.ctx.cluster.claim_views().get(node.name)
        if claim is not None and claim.provider_id in (None, node.provider_id):
            return claim
        return self.ctx.cluster.claim_view_for_node(node)

    async def _set_drained(
        self, claim: NodeClaimView, *, status: Literal["True", "False"], reason: str, message: str
    ) -> NodeClaimView:
        update = ConditionUpdate(DRAINED, status, reason, message)
        if matches(claim, update):
            return claim
        body = {
            "metadata": {"resourceVersion": claim.resource_version or None},
            "status": claim_status(claim.raw, [update], now=self.ctx.clock.now()),
        }
        written = NodeClaimView.of(await self.ctx.client.patch(NODECLAIMS, claim.name, body, subresource="status"))
        self._latest[claim.name] = written
        return written

    async def _reconcile_claim(self, name: str) -> float | None:
        claim = self._claim(name)
        if claim is None or not claim.deleting or not claim.has_finalizer():
            return None
        nodepool = claim.nodepool
        node = self._node_of(claim)
        node_name = node.name if node is not None else None
        now = self.ctx.clock.now()

        uid = str(claim.uid)
        if claim.condition(DRAINED) is None and uid not in self._announced:
            self._announced.add(uid)
            reason = termination_reason(claim)
            target = f"Node {node_name}" if node_name else "no Node"
            await self.ctx.events.emit(
                claim.raw,
                reason="Terminating",
                message=f"Terminating ({reason}): draining {target}, then deleting the instance",
            )
            log.info("nodeclaim.terminating", nodeclaim=name, nodepool=nodepool, node=node_name, reason=reason)

        if node is not None and node_name is not None:
            self._draining[node_name] = name
            patch = taint_patch(node, add=[DISRUPTED_TAINT])
            if patch and not node.deleting:
                await self.ctx.client.patch(NODES, node_name, patch, patch_type="json")
            deadline = grace_deadline(claim)
            on_node = self.ctx.cluster.pod_views_on_node(node_name)
            plan = plan_drain(pods=on_node, now=now, deadline=deadline)
            for pod in plan.evict + plan.waiting:
                if pod.eviction_priority is None:  # the Event recorder sends each message once
                    await self.ctx.events.emit(
                        pod.raw,
                        reason="InvalidEvictionPriority",
                        message=f"{ANNOTATION_EVICTION_PRIORITY}={pod.annotations.get(ANNOTATION_EVICTION_PRIORITY)!r} "
                        "is not low, medium or high: drained as medium",
                        type="Warning",
                    )
            if not plan.done:
                blocked = await self._act(plan, claim=claim, node_name=node_name, nodepool=nodepool)
                detail = f"evicting pods from Node {node_name}"
                if blocked:
                    shown = ", ".join(blocked[:5]) + (" ..." if len(blocked) > 5 else "")
                    detail += f"; eviction refused (PodDisruptionBudget) for {shown}"
                if deadline is None:
                    detail += "; no terminationGracePeriod, so PodDisruptionBudgets are honoured indefinitely"
                else:
                    detail += f"; remaining pods are deleted at {deadline.isoformat()}"
                await self._set_drained(
                    claim, status="False", reason="EvictionBlocked" if blocked else "Draining", message=detail
                )
                until = seconds_until(deadline, now)
                return DRAIN_RECHECK_SECONDS if until is None else max(0.1, min(DRAIN_RECHECK_SECONDS, until))
            claim = await self._set_drained(
                claim, status="True", reason="Drained", message=f"no evictable pods left on Node {node_name}"
            )

        if uid not in self._instance_deleted:
            try:
                await self.ctx.cloud.delete(claim.raw)
                log.info("nodeclaim.instance_deleted", nodeclaim=name, provider_id=claim.provider_id, node=node_name)
            except NodeClaimNotFoundError:
                log.debug("nodeclaim.instance_already_gone", nodeclaim=name, provider_id=claim.provider_id)
            except CloudProviderError as err:
                log.warning("nodeclaim.instance_not_deleted", nodeclaim=name, error=str(err))
                return NODE_GONE_RECHECK_SECONDS
            self._instance_deleted.add(uid)

        if node is not None and node_name is not None:
            fresh: NodeView | None = self.ctx.cluster.node_views().get(node_name) or node
            assert fresh is not None
            patch = finalizer_patch(fresh, add=False)
            if patch:
                try:
                    fresh = NodeView.of(await self.ctx.client.patch(NODES, node_name, patch, patch_type="json"))
                except NotFoundError:
                    fresh = None
            if fresh is not None and not fresh.deleting:
                # the provider did not remove the Node object itself
                with contextlib.suppress(NotFoundError, ConflictError):
                    await self.ctx.client.delete(NODES, node_name, uid=fresh.uid)
            return NODE_GONE_RECHECK_SECONDS  # the Node's DELETED event brings us back sooner

        patch = finalizer_patch(claim, add=False)
        await self.ctx.client.patch(NODECLAIMS, name, patch, patch_type="json")
        self._latest.pop(name, None)
        self._instance_deleted.discard(uid)
        reason = termination_reason(claim)
        deleted_at = claim.deleted_at
        took = (now - deleted_at).total_seconds() if deleted_at else 0.0
        metrics.TERMINATED.labels(nodepool, reason).inc()
        metrics.TERMINATION_SECONDS.labels(nodepool).observe(max(0.0, took))
        log.info(
            "nodeclaim.terminated",
            nodeclaim=name,
            nodepool=nodepool,
            provider_id=claim.provider_id,
            reason=reason,
            seconds=round(took, 3),
        )
        pid = claim.provider_id
        what = f"Instance {pid} deleted and Node gone" if pid else "No instance was launched; released"
        await self.ctx.events.emit(
            claim.raw, reason="Terminated", message=f"{what} {format_seconds(took)} after deletion"
        )
        return None

    async def _act(self, plan: DrainPlan, *, claim: NodeClaimView, node_name: str, nodepool: str) -> list[str]:
        """Evict or delete what the plan says; the pods whose eviction was refused."""
        claim_name = claim.name
        blocked: list[str] = []
        gate = asyncio.Semaphore(EVICTION_CONCURRENCY)

        async def evict(pod: PodView) -> None:
            ns, pod_name = pod.namespace, pod.name
            async with gate:
                try:
                    await self.ctx.client.evict(ns, pod_name)
                except TooManyRequestsError as err:
                    blocked.append(f"{ns}/{pod_name}")
                    metrics.EVICTIONS_BLOCKED.labels(nodepool).inc()
                    log.info("node.eviction_blocked", node=node_name, pod=f"{ns}/{pod_name}", reason=err.message)
                    await self.ctx.events.emit(
                        pod.raw,
                        reason="EvictionBlocked",
                        message=f"Cannot evict from Node {node_name} (NodeClaim {claim_name} terminating): "
                        f"{err.message}",
                        type="Warning",
                    )
                    return
                except NotFoundError:
                    return
                except ApiError as err:
                    log.warning("node.eviction_failed", node=node_name, pod=f"{ns}/{pod_name}", error=str(err))
                    return
            metrics.EVICTED_PODS.labels(nodepool, "evict").inc()
            log.info("node.pod_evicted", node=node_name, pod=f"{ns}/{pod_name}", nodeclaim=claim_name)
            await self.ctx.events.emit(
                pod.raw,
                reason="Evicted",
                message=f"Evicted from Node {node_name}: NodeClaim {claim_name} is terminating",
            )

        async def delete(pod: PodView) -> None:
            ns, pod_name = pod.namespace, pod.name
            force = 0 if pod.deleting else None
            async with gate:
                try:
                    await self.ctx.client.delete(PODS, pod_name, namespace=ns, grace_period_seconds=force, uid=pod.uid)
                except (NotFoundError, ConflictError):
                    return
                except ApiError as err:
                    log.warning("node.pod_delete_failed", node=node_name, pod=f"{ns}/{pod_name}", error=str(err))
                    return
            metrics.EVICTED_PODS.labels(nodepool, "delete").inc()
            grace = claim.termination_grace_period
            log.info(
                "node.pod_deleted",
                node=node_name,
                pod=f"{ns}/{pod_name}",
                reason=f"terminationGracePeriod {grace} ran out",
            )
            await self.ctx.events.emit(
                pod.raw,
                reason="Evicted",
                message=f"Deleted from Node {node_name}: NodeClaim {claim_name}'s "
                f"terminationGracePeriod ({grace}) ran out",
                type="Warning",
            )

        await asyncio.gather(*(evict(p) for p in plan.evict), *(delete(p) for p in plan.delete))
        return sorted(blocked)

    async def _reconcile_node(self, name: str) -> float | None:
        node = self.ctx.cluster.node_views().get(name)
        if node is None or not node.deleting or not node.has_finalizer():
            return None
        claim = self._claim_of(node)
        if claim is None:
            patch = finalizer_patch(node, add=False)
            await self.ctx.client.patch(NODES, name, patch, patch_type="json")
            log.info("node.finalizer_removed", node=name, reason="no NodeClaim owns the Node")
            return None
        claim_name = claim.name
        self._draining[name] = claim_name
        if not claim.deleting:
            await delete_nodeclaim(
                self.ctx,
                claim,
                reason="NodeDeleted",
                message=f"Node {name} was deleted; draining it and terminating the NodeClaim",
                warning=False,
            )
            log.info("node.deleted_by_user", node=name, nodeclaim=claim_name, reason="terminating its NodeClaim")
        self.queue.add(CLAIM + claim_name)
        return None
