"""Metrics of NodeClaim termination (drain, instance deletion, finalizer release)."""

from __future__ import annotations

from controller.metrics import counter, histogram

TERMINATION_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)

TERMINATED = counter(
    "joiner_nodeclaims_terminated_total",
    "NodeClaims fully terminated (instance gone, finalizer removed), by the reason they were deleted.",
    ("nodepool", "reason"),
)
TERMINATION_SECONDS = histogram(
    "joiner_nodeclaims_termination_duration_seconds",
    "From a NodeClaim's deletionTimestamp to the removal of its finalizer.",
    ("nodepool",),
    buckets=TERMINATION_BUCKETS,
)
EVICTED_PODS = counter(
    "joiner_nodes_evicted_pods_total",
    "Pods removed from terminating Nodes: method=evict (Eviction API) or delete (grace period ran out).",
    ("nodepool", "method"),
)
EVICTIONS_BLOCKED = counter(
    "joiner_nodes_evictions_blocked_total",
    "Evictions refused (429), mostly by a PodDisruptionBudget; retried later.",
    ("nodepool",),
)
