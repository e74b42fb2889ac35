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
FORECAST_PREDICTED = metrics.gauge(
    "joiner_capacity_forecast_predicted_demand",
    "Demand the forecast expects within the lead time (GPUs, or CPUs in a pool without GPUs).",
    ("nodepool", "unit"),
)
FORECAST_CONFIDENCE = metrics.gauge(
    "joiner_capacity_forecast_confidence",
    "The forecast's confidence (0..1) in the hour it acts for; below the pool's threshold it does nothing.",
    ("nodepool",),
)
FORECAST_PREWARM = metrics.gauge(
    "joiner_capacity_forecast_prewarm",
    "What the forecast pre-warms now on top of the demand already there (GPUs, or CPUs).",
    ("nodepool", "unit"),
)
