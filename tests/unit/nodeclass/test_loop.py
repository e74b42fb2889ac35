"""What every NodeClass status loop shares (controller/nodeclass/loop.py): a spec change queues the
class, our own status writes do not; a class gone or going is not reconciled."""

from __future__ import annotations

from typing import Any

from controller.clock import FakeClock
from controller.kube.resources import EC2NODECLASSES
from controller.nodeclass.loop import NodeClassStatusLoop, Obj
from controller.state.cluster import ClusterState


class Loop(NodeClassStatusLoop):
    KIND = "EC2NodeClass"
    RESOURCE = EC2NODECLASSES
    REFRESH_SECONDS = 42.0

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.seen: list[str] = []

    async def reconcile_class(self, name: str, obj: Obj) -> float | None:
        self.seen.append(name)
        return self.refresh_seconds


def nodeclass(name: str, generation: int, **meta: Any) -> Obj:
    return {"metadata": {"name": name, "generation": generation, **meta}, "spec": {}}


async def test_only_spec_changes_queue_a_class_and_only_live_classes_are_reconciled() -> None:
    cluster = ClusterState(source=None, clock=FakeClock(), watched=(EC2NODECLASSES,))  # type: ignore[arg-type]
    loop = Loop(client=None, cluster=cluster, clock=FakeClock())
    assert loop.refresh_seconds == 42.0
    assert loop.queue.name == "ec2nodeclass-status"
    loop._on_change("MODIFIED", nodeclass("a", 1), nodeclass("a", 1))  # our status write
    loop._on_change("DELETED", nodeclass("b", 2), None)
    assert len(loop.queue) == 0
    loop._on_change("MODIFIED", nodeclass("a", 2), nodeclass("a", 1))
    assert len(loop.queue) == 1
    assert await loop.reconcile("missing") is None
    cluster.informers["EC2NodeClass"]._apply("ADDED", nodeclass("going", 1, deletionTimestamp="2026-01-01T00:00:00Z"))
    assert await loop.reconcile("going") is None
    cluster.informers["EC2NodeClass"]._apply("ADDED", nodeclass("a", 2))
    assert await loop.reconcile("a") == 42.0
    assert loop.seen == ["a"]
