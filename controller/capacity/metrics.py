"""The capacity controller's metrics: warm buffer wanted and ready per NodePool, and spend in $/hour
per NodePool and capacity type beside the pool's budget."""

from __future__ import annotations

from controller import metrics

BUFFER_WANTED = metrics.gauge(
    "joiner_capacity_buffer_wanted",
    "Warm buffer a NodePool wants now (nodes, or GPUs for a GPU buffer): the static buffer and open schedules.",
    ("nodepool",),
)
BUFFER_READY = metrics.gauge(
    "joiner_capacity_buffer_ready",
    "Of the warm buffer wanted, the part sitting unused on initialized nodes (nodes or GPUs).",
    ("nodepool",),
)
SPEND = metrics.gauge(
    "joiner_capacity_spend_dollars_per_hour",
    "$/hour of a NodePool's NodeClaims (running and launching), by capacity type (unknown before launch).",
    ("nodepool", "capacity_type"),
)
BUDGET = metrics.gauge(
    "joiner_capacity_budget_dollars_per_hour",
    "A NodePool's $/hour ceiling (spec.capacity.budget.maxPricePerHour); absent without one.",
    ("nodepool",),
)
