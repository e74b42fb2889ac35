"""Metrics of the NodeClaim lifecycle and garbage collection."""

from __future__ import annotations

from controller.metrics import counter, histogram

STARTUP_BUCKETS = (1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800)

LAUNCHED = counter(
    "joiner_nodeclaims_launched_total",
    "NodeClaims whose instance the cloud provider launched.",
    ("nodepool",),
)
REGISTERED = counter("joiner_nodeclaims_registered_total", "NodeClaims whose Node joined the cluster.", ("nodepool",))
INITIALIZED = counter(
    "joiner_nodeclaims_initialized_total",
    "NodeClaims whose Node became Ready with startup taints gone and requested resources registered.",
    ("nodepool",),
)
LAUNCH_FAILURES = counter(
    "joiner_nodeclaims_launch_failures_total",
    "Failed launch attempts by reason (InsufficientCapacity, NodeClassNotReady, a CreateError reason, ...).",
    ("nodepool", "reason"),
)
TIMED_OUT = counter(
    "joiner_nodeclaims_timed_out_total",
    "NodeClaims deleted because a lifecycle step (Launch, Registration, Initialization) took too long.",
    ("nodepool", "step"),
)
STARTUP_SECONDS = histogram(
    "joiner_nodeclaims_startup_duration_seconds",
    "From a NodeClaim's creation to its step being done (step: Launched, Registered, Initialized).",
    ("nodepool", "step"),
    buckets=STARTUP_BUCKETS,
)
GARBAGE_COLLECTED = counter(
    "joiner_nodeclaims_garbage_collected_total",
    "Objects garbage-collected: kind=instance (it has no NodeClaim) or kind=nodeclaim (its Node or instance is gone).",
    ("kind", "reason"),
)
