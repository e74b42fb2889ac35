"""The loop that gives launched kwok NodeClaims their Nodes.

For every NodeClaim with a kwok instance (launched by this process, or recorded in its status)
and no Node in the cache, it asks the provider to create the Node once the KWOKNodeClass's
registration delay since the launch has passed (`KWOKCloudProvider.node_when_due`), and looks
again when that is due. It works from cluster state alone, so a restart finishes what an earlier
process started. The operator hands it to the provider, whose `run()` runs it.
"""

from __future__ import annotations

from controller.clock import Clock
from controller.cloudprovider.kwok.node import is_kwok_provider_id
from controller.cloudprovider.kwok.provider import KWOKCloudProvider
from controller.state.cluster import ClusterState
from controller.state.informer import EventType
from controller.state.queue import WorkQueue
from controller.state.views import NodeClaimView


class KWOKNodeController:
    def __init__(self, *, provider: KWOKCloudProvider, cluster: ClusterState, clock: Clock, workers: int = 8) -> None:
        self._provider = provider
        self._cluster = cluster
        self._workers = workers
        self.queue = WorkQueue(name="kwok-nodes", clock=clock)

    def due(self, nodeclaim: str, seconds: float) -> None:
        """Look at the NodeClaim again after ``seconds`` (the provider launched it with a registration delay)."""
        self.queue.add_after(nodeclaim, seconds)

    async def run(self) -> None:
        self._cluster.subscribe_views("NodeClaim", self._on_claim)
        await self._cluster.wait_synced()
        for name in list(self._cluster.claim_views()):
            self.queue.add(name)
        await self.queue.run(self.reconcile, workers=self._workers)

    def _on_claim(self, etype: EventType, claim: NodeClaimView, old: NodeClaimView | None) -> None:
        if etype == "DELETED":
            self._provider.forget_node(claim.name)
            return
        if self._provider.launched(claim.name) or is_kwok_provider_id(claim.provider_id):
            self.queue.add(claim.name)

    async def reconcile(self, name: str) -> float | None:
        """One pass for one NodeClaim: create its Node when due. Returns seconds until due, or None."""
        claim = self._cluster.claim_views().get(name)
        if claim is None or claim.deleting:
            return None
        launch = self._provider.launch_for(claim)
        provider_id = claim.provider_id or (launch.instance.provider_id if launch else None)
        if not is_kwok_provider_id(provider_id) or claim.registered:
            return None
        if self._cluster.node_view_by_provider_id(str(provider_id)) is not None or name in self._cluster.node_views():
            self._provider.forget_node(name)
            return None
        return await self._provider.node_when_due(claim, launch)
