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
from typing import Any, Literal

import structlog

from api.v1.conditions import DRAINED
from api.v1.labels import LABEL_NODEPOOL, TAINT_DISRUPTED, TAINT_DISRUPTED_EFFECT
from controller.clock import parse_time
from controller.cloudprovider.types import CloudProviderError, NodeClaimNotFoundError
from controller.context import Context
from controller.kube.client import ApiError, ConflictError, InvalidError, NotFoundError, TooManyRequestsError
from controller.kube.resources import NODECLAIMS, NODES, PODS
from controller.nodeclaim import conditions as c
from controller.nodeclaim.decide import fmt_seconds
from controller.nodeclaim.deletion import delete_nodeclaim, termination_reason
from controller.nodeclaim.lifecycle import newer
from controller.nodeclaim.nodes import finalizer_patch, has_finalizer, taint_patch
from controller.state.informer import EventType
from controller.state.queue import WorkQueue
from controller.termination import metrics
from controller.termination.drain import DrainPlan, grace_deadline, plan_drain, seconds_until

log = structlog.get_logger()
Obj = dict[str, Any]

DRAIN_RECHECK_SECONDS = 5.0
NODE_GONE_RECHECK_SECONDS = 10.0
CONFLICT_RETRY_SECONDS = 0.5
EVICTION_CONCURRENCY = 16
CLAIM, NODE = "nodeclaim/", "node/"
DISRUPTED_TAINT: Obj = {"key": TAINT_DISRUPTED, "effect": TAINT_DISRUPTED_EFFECT}


class TerminationController:
    def __init__(self, ctx: Context, *, workers: int = 16) -> None:
        self.ctx = ctx
        self.queue = WorkQueue(name="termination", clock=ctx.clock)
        self._workers = workers
        self._latest: dict[str, Obj] = {}
        self._draining: dict[str, str] = {}  # node name -> NodeClaim name
        self._instance_deleted: set[str] = set()  # NodeClaim uids
        self._announced: set[str] = set()  # NodeClaim uids whose Terminating event went out

    # --- wiring ------------------------------------------------------------------------------

    async def run(self) -> None:
        cluster = self.ctx.cluster
        cluster.subscribe("NodeClaim", self._on_claim)
        cluster.subscribe("Node", self._on_node)
        cluster.subscribe("Pod", self._on_pod)
        await cluster.wait_synced()
        for name, claim in list(cluster.nodeclaims().items()):
            if claim["metadata"].get("deletionTimestamp"):
                self.queue.add(CLAIM + name)
        for name, node in list(cluster.nodes().items()):
            if node["metadata"].get("deletionTimestamp"):
                self.queue.add(NODE + name)
        await self.queue.run(self.reconcile, workers=self._workers)

    def _on_claim(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        name = obj["metadata"]["name"]
        if etype == "DELETED":
            self._latest.pop(name, None)
            self._instance_deleted.discard(str(obj["metadata"].get("uid")))
            self._announced.discard(str(obj["metadata"].get("uid")))
            return
        if obj["metadata"].get("deletionTimestamp"):
            self.queue.add(CLAIM + name)

    def _on_node(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        name = obj["metadata"]["name"]
        if etype == "DELETED":
            claim = self._draining.pop(name, None)
            if claim is None and name in self.ctx.cluster.nodeclaims():
                claim = name
            if claim is not None:
                self.queue.add(CLAIM + claim)
            return
        if obj["metadata"].get("deletionTimestamp"):
            self.queue.add(NODE + name)

    def _on_pod(self, etype: EventType, obj: Obj, old: Obj | None) -> None:
        node = (obj.get("spec") or {}).get("nodeName") or ((old or {}).get("spec") or {}).get("nodeName")
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

    def _claim(self, name: str) -> Obj | None:
        cached = self.ctx.cluster.nodeclaims().get(name)
        if cached is None:
            self._latest.pop(name, None)
            return None
        best = newer(self._latest.get(name), cached)
        if best is cached:
            self._latest.pop(name, None)
        return best

    def _node_of(self, claim: Obj) -> Obj | None:
        node = self.ctx.cluster.node_for_claim(claim)
        if node is not None:
            return node
        status = claim.get("status") or {}
        candidate = self.ctx.cluster.nodes().get(claim["metadata"]["name"])
        if candidate is not None and (candidate.get("spec") or {}).get("providerID") == status.get("providerID"):
            return candidate
        return None

    def _claim_of(self, node: Obj) -> Obj | None:
        name = node["metadata"]["name"]
        pid = (node.get("spec") or {}).get("providerID")
        claim = self.ctx.cluster.nodeclaims().get(name)
        if claim is not None and (claim.get("status") or {}).get("providerID") in (None, pid):
            return claim
        return self.ctx.cluster.claim_for_node(node)

    async def _set_drained(self, claim: Obj, *, status: Literal["True", "False"], reason: str, message: str) -> Obj:
        update = c.ConditionUpdate(DRAINED, status, reason, message)
        if c.matches(claim, update):
            return claim
        body = {
            "metadata": {"resourceVersion": claim["metadata"].get("resourceVersion")},
            "status": {"conditions": c.with_conditions(claim, [update], now=self.ctx.clock.now())},
        }
        name = claim["metadata"]["name"]
        obj = await self.ctx.client.patch(NODECLAIMS, name, body, subresource="status")
        self._latest[name] = obj
        return obj

    async def _reconcile_claim(self, name: str) -> float | None:
        claim = self._claim(name)
        if claim is None or not claim["metadata"].get("deletionTimestamp") or not has_finalizer(claim):
            return None
        nodepool = (claim["metadata"].get("labels") or {}).get(LABEL_NODEPOOL, "")
        node = self._node_of(claim)
        node_name = node["metadata"]["name"] if node is not None else None
        now = self.ctx.clock.now()

        uid = str(claim["metadata"].get("uid"))
        if c.find(claim, DRAINED) is None and uid not in self._announced:
            self._announced.add(uid)
            reason = termination_reason(claim)
            target = f"Node {node_name}" if node_name else "no Node"
            await self.ctx.events.emit(
                claim,
                reason="Terminating",
                message=f"Terminating ({reason}): draining {target}, then deleting the instance",
            )
            log.info("nodeclaim.terminating", nodeclaim=name, nodepool=nodepool, node=node_name, reason=reason)

        if node is not None and node_name is not None:
            self._draining[node_name] = name
            patch = taint_patch(node, add=[DISRUPTED_TAINT])
            if patch and not node["metadata"].get("deletionTimestamp"):
                await self.ctx.client.patch(NODES, node_name, patch, patch_type="json")
            deadline = grace_deadline(claim)
            plan = plan_drain(pods=self.ctx.cluster.pods_on_node(node_name), now=now, deadline=deadline)
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
                await self.ctx.cloud.delete(claim)
                log.info("nodeclaim.instance_deleted", nodeclaim=name, provider_id=_pid(claim), node=node_name)
            except NodeClaimNotFoundError:
                log.debug("nodeclaim.instance_already_gone", nodeclaim=name, provider_id=_pid(claim))
            except CloudProviderError as err:
                log.warning("nodeclaim.instance_not_deleted", nodeclaim=name, error=str(err))
                return NODE_GONE_RECHECK_SECONDS
            self._instance_deleted.add(uid)

        if node is not None and node_name is not None:
            fresh: Obj | None = self.ctx.cluster.nodes().get(node_name) or node
            assert fresh is not None
            patch = finalizer_patch(fresh, add=False)
            if patch:
                try:
                    fresh = await self.ctx.client.patch(NODES, node_name, patch, patch_type="json")
                except NotFoundError:
                    fresh = None
            if fresh is not None and not fresh["metadata"].get("deletionTimestamp"):
                # the provider did not remove the Node object itself
                with contextlib.suppress(NotFoundError, ConflictError):
                    await self.ctx.client.delete(NODES, node_name, uid=fresh["metadata"].get("uid"))
            return NODE_GONE_RECHECK_SECONDS  # the Node's DELETED event brings us back sooner

        patch = finalizer_patch(claim, add=False)
        await self.ctx.client.patch(NODECLAIMS, name, patch, patch_type="json")
        self._latest.pop(name, None)
        self._instance_deleted.discard(uid)
        reason = termination_reason(claim)
        deleted_at = parse_time(claim["metadata"].get("deletionTimestamp"))
        took = (now - deleted_at).total_seconds() if deleted_at else 0.0
        metrics.TERMINATED.labels(nodepool, reason).inc()
        metrics.TERMINATION_SECONDS.labels(nodepool).observe(max(0.0, took))
        log.info(
            "nodeclaim.terminated",
            nodeclaim=name,
            nodepool=nodepool,
            provider_id=_pid(claim),
            reason=reason,
            seconds=round(took, 3),
        )
        pid = _pid(claim)
        what = f"Instance {pid} deleted and Node gone" if pid else "No instance was launched; released"
        await self.ctx.events.emit(claim, reason="Terminated", message=f"{what} {fmt_seconds(took)} after deletion")
        return None

    async def _act(self, plan: DrainPlan, *, claim: Obj, node_name: str, nodepool: str) -> list[str]:
        """Evict or delete what the plan says; the pods whose eviction was refused."""
        claim_name = claim["metadata"]["name"]
        blocked: list[str] = []
        gate = asyncio.Semaphore(EVICTION_CONCURRENCY)

        async def evict(pod: Obj) -> None:
            meta = pod["metadata"]
            ns, pod_name = meta.get("namespace", "default"), meta["name"]
            async with gate:
                try:
                    await self.ctx.client.evict(ns, pod_name)
                except TooManyRequestsError as err:
                    blocked.append(f"{ns}/{pod_name}")
                    metrics.EVICTIONS_BLOCKED.labels(nodepool).inc()
                    log.info("node.eviction_blocked", node=node_name, pod=f"{ns}/{pod_name}", reason=err.message)
                    await self.ctx.events.emit(
                        pod,
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
                pod,
                reason="Evicted",
                message=f"Evicted from Node {node_name}: NodeClaim {claim_name} is terminating",
            )

        async def delete(pod: Obj) -> None:
            meta = pod["metadata"]
            ns, pod_name = meta.get("namespace", "default"), meta["name"]
            force = 0 if meta.get("deletionTimestamp") else None
            async with gate:
                try:
                    await self.ctx.client.delete(
                        PODS, pod_name, namespace=ns, grace_period_seconds=force, uid=meta.get("uid")
                    )
                except (NotFoundError, ConflictError):
                    return
                except ApiError as err:
                    log.warning("node.pod_delete_failed", node=node_name, pod=f"{ns}/{pod_name}", error=str(err))
                    return
            metrics.EVICTED_PODS.labels(nodepool, "delete").inc()
            grace = (claim.get("spec") or {}).get("terminationGracePeriod")
            log.info(
                "node.pod_deleted",
                node=node_name,
                pod=f"{ns}/{pod_name}",
                reason=f"terminationGracePeriod {grace} ran out",
            )
            await self.ctx.events.emit(
                pod,
                reason="Evicted",
                message=f"Deleted from Node {node_name}: NodeClaim {claim_name}'s "
                f"terminationGracePeriod ({grace}) ran out",
                type="Warning",
            )

        await asyncio.gather(*(evict(p) for p in plan.evict), *(delete(p) for p in plan.delete))
        return sorted(blocked)

    async def _reconcile_node(self, name: str) -> float | None:
        node = self.ctx.cluster.nodes().get(name)
        if node is None or not node["metadata"].get("deletionTimestamp") or not has_finalizer(node):
            return None
        claim = self._claim_of(node)
        if claim is None:
            patch = finalizer_patch(node, add=False)
            await self.ctx.client.patch(NODES, name, patch, patch_type="json")
            log.info("node.finalizer_removed", node=name, reason="no NodeClaim owns the Node")
            return None
        claim_name = claim["metadata"]["name"]
        self._draining[name] = claim_name
        if not claim["metadata"].get("deletionTimestamp"):
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


def _pid(claim: Obj) -> str | None:
    pid = (claim.get("status") or {}).get("providerID")
    return str(pid) if pid else None
