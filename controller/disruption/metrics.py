"""Metrics of disruption: decisions, evicted pods, estimated savings, candidates, budgets."""

from __future__ import annotations

from controller.metrics import counter, gauge, histogram

DECISIONS = counter(
    "joiner_disruption_decisions_total",
    "Nodes disrupted, by NodePool, reason (Empty, Underutilized, Drifted, Expired) and action (delete, replace).",
    ("nodepool", "reason", "action"),
)
EVICTED_PODS = counter(
    "joiner_disruption_evicted_pods_total",
    "Pods on the nodes disruption handed to termination (they are evicted through the Eviction API), by reason.",
    ("reason",),
)
SAVINGS = counter(
    "joiner_disruption_savings_per_hour_total",
    "Estimated $/hour saved by emptiness and consolidation (price of the removed nodes minus the replacements).",
    ("reason",),
)
CANDIDATES = gauge(
    "joiner_disruption_candidates",
    "Nodes that qualified for disruption at the last pass, before budgets and simulation, by reason.",
    ("reason",),
)
BLOCKED = gauge(
    "joiner_disruption_blocked_nodes",
    "Nodes that qualified but were held back at the last pass (safety rule or budget), by reason.",
    ("reason",),
)
ALLOWED = gauge(
    "joiner_disruption_budget_allowed_nodes",
    "Nodes the budgets still allow to start being disrupted, by NodePool and reason (-1: unlimited).",
    ("nodepool", "reason"),
)
ABORTED = counter(
    "joiner_disruption_aborted_total",
    "Disruption commands dropped before any node was drained (validation failed, a replacement failed), by reason.",
    ("reason",),
)
ACTIVE = gauge("joiner_disruption_active_commands", "Disruption commands in progress (waiting or replacing).")
PASS_SECONDS = histogram(
    "joiner_disruption_evaluation_duration_seconds", "Time one planning pass took, simulations included."
)
SIMULATIONS = counter("joiner_disruption_simulations_total", "Solver runs made by the disruption planner.")
PASSES_SKIPPED = counter(
    "joiner_disruption_passes_skipped_total",
    "Planning passes skipped because nothing changed and no time threshold came since the last one.",
)
