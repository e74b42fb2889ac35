"""Garbage collection: what exists in the cloud or the cluster without the record that explains it.

Every `gc_interval_seconds`:
* an instance the cloud provider lists (for kwok: a Node with a ``kwok://`` providerID) that no
  NodeClaim records is deleted, once it has been seen orphaned for the grace period (a launch whose
  NodeClaim status is still being written must not be hit);
* a NodeClaim that was Registered but whose Node is gone is deleted (Event ``NodeVanished``);
* a launched NodeClaim whose instance the provider no longer lists is deleted (``InstanceGone``).
Each must be seen that way for the whole grace period before anything is deleted.

The same listing keeps capacity types true: a NodeClaim labelled ``reserved`` whose instance the
provider now lists as ``on-demand`` (its capacity reservation expired or was cancelled, and the
machine runs on) is relabelled ``on-demand``, with its Node and its recorded price, at once
(Event ``ReservationEnded``), so prices, consolidation and spend see what is paid for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import structlog

from api.v1.labels import (
    ANNOTATION_PLANNED_PRICE,
    API_VERSION,
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    LABEL_CAPACITY_TYPE,
)
from controller.cloudprovider.types import CloudProviderError, Instance, NodeClaimNotFoundError
from controller.context import Context
from controller.kube.client import NotFoundError
from controller.kube.resources import NODECLAIMS, NODES
from controller.nodeclaim import metrics
from controller.state.deletion import delete_nodeclaim
from controller.state.patches import escape, label_patch
from controller.state.queue import RECONCILE_ERRORS
from controller.state.views import NodeClaimView

log = structlog.get_logger()

DEFAULT_GRACE_SECONDS = 30.0


def orphaned_instances(*, instances: Iterable[Instance], claims: Mapping[str, NodeClaimView]) -> list[Instance]:
    """Instances no NodeClaim accounts for. Pure.

    A NodeClaim accounts for an instance when its status.providerID is the instance's, or when it
    is the NodeClaim the instance was launched for and has not recorded any providerID yet.
    """
    recorded = {cl.provider_id for cl in claims.values()}
    out = []
    for inst in instances:
        if inst.state == "terminating" or inst.provider_id in recorded:
            continue
        owner = claims.get(inst.nodeclaim)
        if owner is not None and not owner.provider_id:
            continue
        out.append(inst)
    return out


def claims_without_node(*, claims: Mapping[str, NodeClaimView], has_node: Mapping[str, bool]) -> list[NodeClaimView]:
    """Registered, not deleting, and their Node is gone. Pure (`has_node` maps claim name -> bool)."""
    return [cl for name, cl in claims.items() if cl.registered and not cl.deleting and not has_node.get(name, True)]


def claims_without_instance(
    *, claims: Mapping[str, NodeClaimView], instances: Iterable[Instance]
) -> list[NodeClaimView]:
    """Launched, not deleting, and the provider does not list their providerID. Pure."""
    listed = {inst.provider_id for inst in instances}
    return [
        cl
        for cl in claims.values()
        if cl.launched and not cl.deleting and cl.provider_id and cl.provider_id not in listed
    ]


def claims_out_of_reservation(
    *, claims: Mapping[str, NodeClaimView], instances: Iterable[Instance]
) -> list[tuple[NodeClaimView, Instance]]:
    """NodeClaims labelled ``reserved`` whose instance the provider lists as ``on-demand``: the
    reservation ended and the machine runs on, bought on demand. Pure."""
    by_id = {inst.provider_id: inst for inst in instances}
    out = []
    for claim in claims.values():
        inst = by_id.get(claim.provider_id or "")
        if (
            inst is not None
            and not claim.deleting
            and claim.capacity_type == CAPACITY_TYPE_RESERVED
            and inst.capacity_type == CAPACITY_TYPE_ON_DEMAND
        ):
            out.append((claim, inst))
    return out


class GarbageCollector:
    def __init__(self, ctx: Context, *, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> None:
        self.ctx = ctx
        self.grace_seconds = grace_seconds
        self._since: dict[str, float] = {}  # "kind/id" -> monotonic time first seen orphaned

    async def run(self) -> None:
        await self.ctx.cluster.wait_synced()
        RECONCILE_ERRORS.labels("garbage-collector")  # served at 0 from the start
        while True:
            try:
                await self.collect()
            except Exception:
                log.exception("gc.failed")
                RECONCILE_ERRORS.labels("garbage-collector").inc()
            await self.ctx.clock.sleep(self.ctx.settings.gc_interval_seconds)

    def _due(self, key: str, seen: set[str]) -> bool:
        seen.add(key)
        now = self.ctx.clock.monotonic()
        first = self._since.setdefault(key, now)
        return now - first >= self.grace_seconds

    async def collect(self) -> None:
        """One pass. Deletes only what has been orphaned for at least the grace period."""
        cluster = self.ctx.cluster
        instances = await self.ctx.cloud.list()
        claims = dict(cluster.claim_views())
        seen: set[str] = set()

        for inst in orphaned_instances(instances=instances, claims=claims):
            if self._due(f"instance/{inst.provider_id}", seen):
                await self._delete_instance(inst)

        has_node = {name: cluster.node_view_for_claim(cl) is not None for name, cl in claims.items()}
        for claim in claims_without_node(claims=claims, has_node=has_node):
            if self._due(f"nodeclaim/{claim.name}/node", seen):
                node = claim.node_name or "its Node"
                await self._delete_claim(
                    claim,
                    reason="NodeVanished",
                    message=f"Node {node} was removed from the cluster after it registered; deleting the NodeClaim",
                )

        for claim in claims_without_instance(claims=claims, instances=instances):
            if self._due(f"nodeclaim/{claim.name}/instance", seen):
                pid = claim.provider_id
                await self._delete_claim(
                    claim,
                    reason="InstanceGone",
                    message=f"the cloud provider no longer has instance {pid}; deleting the NodeClaim",
                )

        for claim, inst in claims_out_of_reservation(claims=claims, instances=instances):
            await self._relabel_on_demand(claim, inst)

        for key in [k for k in self._since if k not in seen]:
            del self._since[key]

    async def _relabel_on_demand(self, claim: NodeClaimView, inst: Instance) -> None:
        """The NodeClaim and its Node say ``on-demand`` now, and the NodeClaim records the on-demand
        price (when the provider knows it)."""
        wanted = {LABEL_CAPACITY_TYPE: CAPACITY_TYPE_ON_DEMAND}
        patch = label_patch(claim, wanted)
        if inst.price > 0:
            price = f"{inst.price:.4f}"
            if (claim.raw.get("metadata") or {}).get("annotations") is None:
                patch.append({"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION_PLANNED_PRICE: price}})
            else:
                path = f"/metadata/annotations/{escape(ANNOTATION_PLANNED_PRICE)}"
                patch.append({"op": "add", "path": path, "value": price})
        node = self.ctx.cluster.node_view_for_claim(claim)
        try:
            # the Node first: the NodeClaim's label is what says it is done, so a pass that fails in
            # between relabels both again
            if node is not None and not node.deleting:
                node_patch = label_patch(node, wanted)
                if node_patch:
                    await self.ctx.client.patch(NODES, node.name, node_patch, patch_type="json")
            written = await self.ctx.client.patch(NODECLAIMS, claim.name, patch, patch_type="json")
        except NotFoundError:
            return  # deleted meanwhile: nothing to relabel
        message = (
            f"instance {inst.provider_id} left its capacity reservation (expired or cancelled) and runs on as "
            f"on-demand capacity; relabelled {LABEL_CAPACITY_TYPE}={CAPACITY_TYPE_ON_DEMAND}"
            + (f" at ${inst.price:.4f}/h" if inst.price > 0 else "")
        )
        await self.ctx.events.emit(written, reason="ReservationEnded", message=message)
        log.info(
            "nodeclaim.relabelled",
            nodeclaim=claim.name,
            node=node.name if node is not None else None,
            capacity_type=CAPACITY_TYPE_ON_DEMAND,
            price=inst.price,
            reason="its capacity reservation ended; the instance runs on as on-demand",
        )

    async def _delete_instance(self, inst: Instance) -> None:
        node = self.ctx.cluster.node_view_by_provider_id(inst.provider_id)
        stub = {
            "apiVersion": API_VERSION,
            "kind": "NodeClaim",
            "metadata": {"name": inst.nodeclaim},
            "status": {"providerID": inst.provider_id},
        }
        try:
            await self.ctx.cloud.delete(stub)
        except NodeClaimNotFoundError:
            pass
        except CloudProviderError as err:
            log.warning("gc.instance_not_deleted", provider_id=inst.provider_id, error=str(err))
            return
        kind = "node" if node is not None else "instance"
        metrics.GARBAGE_COLLECTED.labels("instance", "NoNodeClaim").inc()
        log.info(
            f"{kind}.garbage_collected",
            provider_id=inst.provider_id,
            node=node.name if node is not None else None,
            instance_type=inst.instance_type,
            reason=f"no NodeClaim records it after {self.grace_seconds:g}s",
        )

    async def _delete_claim(self, claim: NodeClaimView, *, reason: str, message: str) -> None:
        if await delete_nodeclaim(self.ctx, claim, reason=reason, message=message):
            metrics.GARBAGE_COLLECTED.labels("nodeclaim", reason).inc()
            log.info(
                "nodeclaim.garbage_collected",
                nodeclaim=claim.name,
                nodepool=claim.nodepool,
                reason=reason,
            )
