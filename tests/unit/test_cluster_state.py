"""The cluster cache's subscriptions."""

from __future__ import annotations

from typing import Any

from controller.clock import FakeClock
from controller.state.cluster import ClusterState


def _claim(name: str) -> dict[str, Any]:
    return {"apiVersion": "joiner.sh/v1", "kind": "NodeClaim", "metadata": {"name": name}}


def test_a_restarted_controller_subscribing_again_gets_each_event_once() -> None:
    cluster = ClusterState(source=None, clock=FakeClock())  # type: ignore[arg-type]

    class Controller:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def on_claim(self, etype: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            self.seen.append(obj["metadata"]["name"])

    controller = Controller()
    cluster.subscribe("NodeClaim", controller.on_claim)
    cluster.subscribe("NodeClaim", controller.on_claim)  # run() called again after a crash
    cluster.informers["NodeClaim"]._apply("ADDED", _claim("gpu-abc12"))
    assert controller.seen == ["gpu-abc12"]
