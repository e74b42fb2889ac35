"""Gang metrics: how many gangs wait, provision, run; how long admission takes; why rollbacks happen."""

from __future__ import annotations

from controller import metrics

GANGS_PENDING = metrics.gauge(
    "joiner_gangs_pending",
    "Gangs whose gated members wait: for missing members, for capacity, or for the retry after a rollback.",
)
GANGS_PROVISIONING = metrics.gauge(
    "joiner_gangs_provisioning", "Gangs with an attempt in progress: NodeClaims created, pods still gated."
)
GANGS_ADMITTED = metrics.gauge("joiner_gangs_admitted", "Gangs whose gates were removed and that still run.")
ADMISSION_SECONDS = metrics.histogram(
    "joiner_gang_admission_seconds",
    "Time from a gang becoming complete (its last member created) to its gates being removed.",
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900, 1800, 3600),
)
ROLLBACKS = metrics.counter(
    "joiner_gang_rollbacks_total",
    "Gang attempts rolled back (every NodeClaim of the attempt deleted), by reason.",
    ("reason",),
)
REPLANS = metrics.counter(
    "joiner_gang_replans_total",
    "NodeClaims of a gang attempt that the cloud refused for capacity, bought again alone while the "
    "attempt's launched machines were kept (instead of rolling the whole attempt back).",
)
