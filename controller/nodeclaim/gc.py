"""Garbage collection: what exists in the cloud or the cluster without the record that explains it.

Every `gc_interval_seconds`:
* an instance the cloud provider lists (for kwok: a Node with a ``kwok://`` providerID) that no
  NodeClaim records is deleted, once it has been seen orphaned for the grace period (a launch whose
  NodeClaim status is still being written must not be hit);
* a NodeClaim that was Registered but whose Node is gone is deleted (Event ``NodeVanished``);
* a launched NodeClaim whose instance the provider no longer lists is deleted (``InstanceGone``).
Each must be seen that way for the whole grace period before anything is deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import structlog

from api.v1.labels import API_VERSION
from controller.cloudprovider.types import CloudProviderError, Instance, NodeClaimNotFoundError
from controller.context import Context
from controller.nodeclaim import metrics
from controller.state.deletion import delete_nodeclaim
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

        for key in [k for k in self._since if k not in seen]:
            del self._since[key]

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
