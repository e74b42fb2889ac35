"""Offerings that recently failed with insufficient capacity, avoided by the solver for a while."""

from __future__ import annotations

from controller.clock import Clock
from controller.cloudprovider.types import OfferingId


class UnavailableOfferings:
    def __init__(self, *, clock: Clock, ttl_seconds: float) -> None:
        self._clock = clock
        self._ttl = ttl_seconds
        self._until: dict[OfferingId, float] = {}
        self._quota: dict[str, tuple[str, str, float]] = {}  # nodepool -> (reason, message, until)

    def note_quota(self, nodepool: str, *, reason: str, message: str) -> None:
        """A launch for ``nodepool`` hit an account quota: said in its status for as long as the
        offerings it refused are avoided."""
        self._quota[nodepool] = (reason, message, self._clock.monotonic() + self._ttl)

    def quota(self, nodepool: str) -> tuple[str, str, float] | None:
        """(reason, message, seconds left) of the pool's last quota refusal, while it lasts."""
        found = self._quota.get(nodepool)
        if found is None:
            return None
        left = found[2] - self._clock.monotonic()
        if left <= 0:
            del self._quota[nodepool]
            return None
        return found[0], found[1], left

    def mark(self, offering: OfferingId, *, ttl_seconds: float | None = None) -> None:
        self._until[offering] = self._clock.monotonic() + (self._ttl if ttl_seconds is None else ttl_seconds)

    def is_unavailable(self, offering: OfferingId) -> bool:
        until = self._until.get(offering)
        if until is None:
            return False
        if until <= self._clock.monotonic():
            del self._until[offering]
            return False
        return True

    def current(self) -> frozenset[OfferingId]:
        now = self._clock.monotonic()
        for offering in [o for o, until in self._until.items() if until <= now]:
            del self._until[offering]
        return frozenset(self._until)
