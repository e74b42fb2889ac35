"""ProvisioningRequest metrics: requests served by class and outcome, time to Provisioned, bookings."""

from __future__ import annotations

from controller import metrics

REQUESTS = metrics.counter(
    "joiner_provisioningrequests_total",
    "ProvisioningRequests joiner answered, by provisioning class and outcome (Provisioned, Failed, Revoked).",
    ("class", "outcome"),
)
PROVISIONED_SECONDS = metrics.histogram(
    "joiner_provisioningrequest_provisioned_seconds",
    "Time from a ProvisioningRequest's creation to Provisioned=True, by provisioning class.",
    ("class",),
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900, 1800, 3600),
)
CHECKS = metrics.counter(
    "joiner_provisioningrequest_checks_total",
    "check-capacity answers: the request's pods fit on existing and in-flight capacity (Found) or not (NotFound).",
    ("result",),
)
ROLLBACKS = metrics.counter(
    "joiner_provisioningrequest_rollbacks_total",
    "Atomic ProvisioningRequest attempts rolled back (every NodeClaim of the attempt deleted).",
)
BOOKED_NODES = metrics.gauge(
    "joiner_provisioningrequest_booked_nodes",
    "Nodes (and in-flight NodeClaims) holding capacity booked for ProvisioningRequests whose pods have not all bound.",
)
BOOKINGS_EXPIRED = metrics.counter(
    "joiner_provisioningrequest_bookings_expired_total",
    "Bookings that ended with BookingExpired=True: the request's pods did not all bind in the booking time.",
)
NOMINATIONS = metrics.counter(
    "joiner_provisioningrequest_nominations_total",
    "Pods of a ProvisioningRequest nominated (status.nominatedNodeName) onto the capacity booked for it.",
)
