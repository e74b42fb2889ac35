"""Capacity booked for ProvisioningRequests, shared: the ProvisioningRequest controller publishes
each booking (which nodes hold room for the request's pods that have not bound yet, and which of
its pods it nominated there); the provisioner counts the held room as taken and leaves those pods to
the booking; disruption does not take a booked node away.

It lives in the shared layer so those controllers stay independent of each other. In memory only:
the controller publishes every booking again from the requests' status and the cache after a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from controller.scheduling.model import ExistingNode, Pod


@dataclass(frozen=True, slots=True)
class Booking:
    request: str  # namespace/name of the ProvisioningRequest
    until: datetime
    held: Mapping[str, tuple[Pod, ...]]  # node name -> placeholders for the request's pods not bound yet
    nodes: frozenset[str] = frozenset()  # every node (or in-flight NodeClaim) the booking keeps
    claimed: frozenset[str] = frozenset()  # pod keys of the request's pods placed on the booked room


@dataclass
class BookingBook:
    _bookings: dict[str, Booking] = field(default_factory=dict)

    def publish(self, booking: Booking) -> None:
        self._bookings[booking.request] = booking

    def release(self, request: str) -> bool:
        return self._bookings.pop(request, None) is not None

    def get(self, request: str) -> Booking | None:
        return self._bookings.get(request)

    def __len__(self) -> int:
        return len(self._bookings)

    def active(self, now: datetime) -> list[Booking]:
        return [b for b in self._bookings.values() if now < b.until]

    def booked_nodes(self, now: datetime) -> frozenset[str]:
        """Nodes disruption must keep: they hold a booking's room."""
        return frozenset(n for b in self.active(now) for n in b.nodes)

    def claimed_pods(self, now: datetime) -> frozenset[str]:
        """Pending pods a booking placed: the provisioner does not plan them again."""
        return frozenset(k for b in self.active(now) for k in b.claimed)

    def hold(
        self, existing: list[ExistingNode], now: datetime, *, except_request: str | None = None
    ) -> list[ExistingNode]:
        """``existing`` with every active booking's placeholders added to the nodes that hold them, so
        a solve over it does not plan other pods into booked room."""
        held: dict[str, list[Pod]] = {}
        for b in self.active(now):
            if b.request == except_request:
                continue
            for node, pods in b.held.items():
                held.setdefault(node, []).extend(pods)
        if not held:
            return existing
        return [replace(n, pods=(*n.pods, *held[n.name])) if n.name in held else n for n in existing]
