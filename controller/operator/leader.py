"""Leader election on a coordination.k8s.io Lease, so that two replicas never both decide.

The rules are client-go's:

* **Expiry is judged from what this replica observed, not from timestamps in the Lease.** A
  candidate remembers when (on its own monotonic clock) it last saw the Lease record change; the
  holder's lease has expired only once ``leaseDurationSeconds`` passed since then. A holder whose
  clock is off cannot make the Lease look expired or fresh to others.
* **The leader stops before anyone else may start.** It renews every ``retry_period``; a renewal
  that does not succeed within ``renew_deadline`` of the last successful one (an error, a hung
  call, a conflict) makes it stop leading at once (``lost`` is set; the process exits and its
  controllers stop acting). Because ``renew_deadline < lease_duration``, it has stopped before any
  other replica can see the Lease expire.
* Seeing another holder with a valid lease while leading also ends leadership at once.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

import structlog

from controller.clock import Clock, format_time
from controller.kube.client import ApiError, ConflictError, KubeClient, NotFoundError, TransportError
from controller.kube.resources import LEASES

log = structlog.get_logger()
T = TypeVar("T")

DEFAULT_LEASE_SECONDS: Final = 15.0
DEFAULT_RENEW_DEADLINE_SECONDS: Final = 10.0
DEFAULT_RETRY_PERIOD_SECONDS: Final = 2.0


class LeaderElectionError(ValueError):
    """Timings that cannot give one leader at a time."""


def check_timings(*, lease: float, renew_deadline: float, retry_period: float) -> None:
    if not 0 < retry_period < renew_deadline < lease:
        raise LeaderElectionError(
            "leader election needs retry period < renew deadline < lease duration, "
            f"got {retry_period:g}s, {renew_deadline:g}s, {lease:g}s"
        )


class _Timeout(Exception):
    pass


class LeaderElector:
    def __init__(
        self,
        *,
        client: KubeClient,
        clock: Clock,
        namespace: str,
        name: str = "joiner-leader",
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        renew_deadline_seconds: float = DEFAULT_RENEW_DEADLINE_SECONDS,
        retry_period_seconds: float = DEFAULT_RETRY_PERIOD_SECONDS,
        identity: str | None = None,
    ) -> None:
        check_timings(lease=lease_seconds, renew_deadline=renew_deadline_seconds, retry_period=retry_period_seconds)
        self._client = client
        self._clock = clock
        self._namespace = namespace
        self._name = name
        self._lease_seconds = lease_seconds
        self._renew_deadline = renew_deadline_seconds
        self._retry = retry_period_seconds
        self.identity = identity or f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        self.is_leader = asyncio.Event()
        self.leader: str | None = None
        self.lost = asyncio.Event()
        self._observed: tuple[Any, ...] | None = None  # the Lease record as last seen
        self._observed_at: float | None = None  # monotonic time it was first seen so

    def _spec(self, transitions: int, acquire_time: str) -> dict[str, object]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self._lease_seconds)),
            "acquireTime": acquire_time,
            "renewTime": format_time(self._clock.now()).replace("Z", ".000000Z"),
            "leaseTransitions": transitions,
        }

    def _observe(self, spec: dict[str, Any]) -> None:
        record = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseTransitions"),
            spec.get("leaseDurationSeconds"),
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = self._clock.monotonic()

    def _expired(self, spec: dict[str, Any]) -> bool:
        """Whether the holder's lease ran out, judged on this replica's clock since it saw the record change."""
        if not spec.get("holderIdentity"):
            return True
        duration = float(spec.get("leaseDurationSeconds") or self._lease_seconds)
        assert self._observed_at is not None
        return self._clock.monotonic() - self._observed_at >= duration

    async def _try(self) -> bool:
        """Acquire or renew once: True when this replica holds the Lease afterwards."""
        now = format_time(self._clock.now()).replace("Z", ".000000Z")
        try:
            lease = await self._client.get(LEASES, self._name, namespace=self._namespace)
        except NotFoundError:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": self._spec(0, now),
            }
            try:
                await self._client.create(LEASES, body, namespace=self._namespace)
            except ConflictError:
                return False
            self.leader = self.identity
            return True
        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity")
        self.leader = holder
        if holder and holder != self.identity and not self._expired(spec):
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        acquire = spec.get("acquireTime") if holder == self.identity else now
        lease["spec"] = self._spec(transitions, str(acquire))
        try:
            written = await self._client.replace(LEASES, lease)
        except ConflictError:
            return False
        self._observe(written.get("spec") or lease["spec"])
        self.leader = self.identity
        return True

    async def _within(self, call: Awaitable[T], seconds: float) -> T:
        """``call``, or ``_Timeout`` after ``seconds`` on the injected clock."""
        task = asyncio.ensure_future(call)
        timer = asyncio.ensure_future(self._clock.sleep(max(0.0, seconds)))
        try:
            done, _ = await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            task.cancel()
            raise _Timeout
        finally:
            timer.cancel()

    async def run(self) -> None:
        """Acquire, then renew until cancelled; sets ``lost`` (and returns) once leadership ends."""
        while not self.is_leader.is_set():
            try:
                acquired = await self._try()
            except (ApiError, TransportError) as err:  # no answer (the apiserver restarts): try again
                log.warning("leader.acquire_failed", error=str(err))
                acquired = False
            if acquired:
                log.info("leader.acquired", identity=self.identity)
                self.is_leader.set()
                break
            await self._clock.sleep(self._retry)
        last_renew = self._clock.monotonic()
        while True:
            await self._clock.sleep(self._retry)
            left = self._renew_deadline - (self._clock.monotonic() - last_renew)
            why = ""
            try:
                renewed = await self._within(self._try(), left)
            except _Timeout:
                renewed, why = False, "the renewal did not answer in time"
            except (ApiError, TransportError) as err:
                renewed, why = False, str(err)
            if renewed:
                last_renew = self._clock.monotonic()
                continue
            taken = self.leader not in (None, self.identity)
            if taken or self._clock.monotonic() - last_renew >= self._renew_deadline:
                log.error(
                    "leader.lost",
                    identity=self.identity,
                    holder=self.leader,
                    why="another replica holds the Lease" if taken else f"no renewal within the deadline ({why})",
                )
                self.is_leader.clear()
                self.lost.set()
                return
            log.warning("leader.renew_failed", error=why or "conflict")

    async def release(self) -> None:
        """Give the Lease up on a clean stop, so a standby takes over without waiting for it to expire."""
        if not self.is_leader.is_set():
            return
        try:
            lease = await self._client.get(LEASES, self._name, namespace=self._namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                await self._client.replace(LEASES, lease)
        except (ApiError, TransportError) as err:
            log.warning("leader.release_failed", error=str(err))
