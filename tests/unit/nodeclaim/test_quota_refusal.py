"""A launch refused by an account quota: the offerings are avoided as for no capacity, and the
NodePool says so (an Event and a QuotaExceeded condition) until the offerings are tried again."""

from __future__ import annotations

import dataclasses
from typing import Any

from controller.cloudprovider.types import Instance, InsufficientCapacityError, OfferingId
from controller.kube.resources import NODEPOOLS
from controller.nodeclaim.lifecycle import LifecycleController
from controller.provisioning.nodepool_status import NodePoolStatusController
from tests.unit.harness import Harness

REFUSED = OfferingId("gpu-1", "zone-a", "on-demand")


class QuotaRefusingCloud:
    """The kwok provider, except that every launch is refused by a vCPU quota (as AWS answers
    VcpuLimitExceeded)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.name = inner.name

    async def create(self, nodeclaim: dict[str, Any]) -> Instance:
        raise InsufficientCapacityError(
            "the account's VcpuLimitExceeded quota refused on-demand capacity for 1 offering(s)",
            offerings=(REFUSED,),
            reason="VcpuLimitExceeded",
            quota=True,
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_a_quota_refusal_is_an_event_and_a_condition_on_the_nodepool_while_it_lasts(harness: Harness) -> None:
    h = harness
    ctx = dataclasses.replace(h.ctx, cloud=QuotaRefusingCloud(h.cloud))
    await h.kube.create(
        NODEPOOLS,
        {
            "apiVersion": "joiner.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {"nodeClassRef": {"group": "joiner.sh", "kind": "KWOKNodeClass", "name": "default"}}
                }
            },
        },
    )
    await h.cached("NodePool", "default")
    await h.create_nodeclass()
    h.start(LifecycleController(ctx))
    await h.create_claim("nc-1", instance_types=["gpu-1"])
    await h.eventually(lambda: "VcpuLimitExceeded" in h.kube.event_reasons("default"), "an Event on the NodePool")
    assert h.ctx.unavailable.is_unavailable(REFUSED)
    status = NodePoolStatusController(ctx)
    await status.reconcile("default")
    pool = h.kube.obj(NODEPOOLS, "default")
    assert pool is not None
    quota = next(c for c in pool["status"]["conditions"] if c["type"] == "QuotaExceeded")
    assert (quota["status"], quota["reason"]) == ("True", "VcpuLimitExceeded")
    assert "VcpuLimitExceeded quota" in quota["message"]
    await h.advance(181)  # the TTL of the unavailable offerings: the quota is tried again
    await h.cached("NodePool", "default")
    await status.reconcile("default")
    pool = h.kube.obj(NODEPOOLS, "default")
    assert pool is not None
    assert all(c["type"] != "QuotaExceeded" for c in pool["status"]["conditions"])
