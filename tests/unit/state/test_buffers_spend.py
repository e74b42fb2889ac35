"""The shared buffer book and what NodeClaims cost."""

from __future__ import annotations

from typing import Any

from controller.scheduling import Pod
from controller.scheduling.instancetypes import InstanceType, Offering
from controller.scheduling.resources import Resources
from controller.state.buffers import BufferBook, BufferReport
from controller.state.spend import claim_price, pool_bounds
from controller.state.views import NodeClaimView

TYPES = {
    "gpu-1": InstanceType(
        name="gpu-1",
        capacity=Resources.parse({"cpu": "8", "nvidia.com/gpu": "1"}),
        offerings=(
            Offering(zone="a", capacity_type="spot", price=0.3),
            Offering(zone="a", capacity_type="on-demand", price=0.8),
        ),
    )
}


def claim(
    name: str, *, pool: str = "gpu", launched: str | None = None, planned: str = "0.8000", deleting: bool = False
) -> NodeClaimView:
    labels = {"joiner.sh/nodepool": pool}
    if launched:
        labels |= {
            "node.kubernetes.io/instance-type": "gpu-1",
            "topology.kubernetes.io/zone": "a",
            "joiner.sh/capacity-type": launched,
        }
    meta: dict[str, Any] = {"name": name, "labels": labels, "annotations": {"joiner.sh/planned-price": planned}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return NodeClaimView.of({"metadata": meta, "spec": {}})


def test_a_claim_costs_its_launched_offering_else_its_planned_price() -> None:
    assert claim_price(claim("a", launched="spot"), TYPES) == 0.3
    assert claim_price(claim("b", launched="on-demand"), TYPES) == 0.8
    assert claim_price(claim("c", planned="1.2500"), TYPES) == 1.25
    assert claim_price(claim("d", planned="garbage"), TYPES) == 0.0


def test_pool_bounds_count_the_pools_claims_not_being_deleted() -> None:
    pools: dict[str, dict[str, Any]] = {
        "gpu": {"spec": {"limits": {"nodes": "4"}, "capacity": {"budget": {"maxPricePerHour": "2.5"}}}},
        "free": {"spec": {}},
    }
    claims = [
        claim("a", launched="spot"),
        claim("b"),
        claim("c", deleting=True),
        claim("x", pool="free"),
        claim("a", launched="spot"),
    ]
    bounds = pool_bounds(pools, claims, TYPES)
    assert set(bounds) == {"gpu"}
    b = bounds["gpu"]
    assert (b.max_nodes, b.max_price, b.nodes) == (4, 2.5, 2)
    assert round(b.price, 6) == 1.1


def test_the_book_tells_listeners_about_changes_only_and_a_buffer_wanting_nothing_is_not_limited() -> None:
    book = BufferBook()
    seen: list[str] = []
    book.subscribe(seen.append)
    placeholder = Pod(name="gpu-0", namespace="joiner.sh:buffer", owner="gpu")
    report = BufferReport(pool="gpu", pods=(placeholder,), wanted=1, missing=1)
    book.publish(report)
    book.publish(report)
    assert seen == ["gpu"]
    book.set_limited("gpu", "limits.nodes")
    book.set_limited("gpu", "limits.nodes")
    assert (seen, book.limited("gpu")) == (["gpu", "gpu"], "limits.nodes")
    assert book.pods() == [placeholder]
    book.publish(BufferReport(pool="gpu"))  # the window closed
    assert book.limited("gpu") is None
    assert book.pods() == []
    book.forget("gpu")
    assert book.report("gpu") is None
    assert seen == ["gpu", "gpu", "gpu", "gpu"]
