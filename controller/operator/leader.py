"""Leader election on a coordination.k8s.io Lease, so that two replicas never both decide."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from datetime import timedelta

import structlog

from controller.clock import Clock, format_time, parse_time
from controller.kube.client import ApiError, ConflictError, KubeClient, NotFoundError
from controller.kube.resources import LEASES

log = structlog.get_logger()


class LeaderElector:
    def __init__(
        self,
        *,
        client: KubeClient,
        clock: Clock,
        namespace: str,
        name: str = "joiner-leader",
        lease_seconds: int = 15,
        renew_seconds: float = 5.0,
    ) -> None:
        self._client = client
        self._clock = clock
        self._namespace = namespace
        self._name = name
        self._lease_seconds = lease_seconds
        self._renew = renew_seconds
        self.identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        self.is_leader = asyncio.Event()
        self.leader: str | None = None
        self.lost = asyncio.Event()

    def _spec(self, transitions: int, acquire_time: str) -> dict[str, object]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._lease_seconds,
            "acquireTime": acquire_time,
            "renewTime": format_time(self._clock.now()).replace("Z", ".000000Z"),
            "leaseTransitions": transitions,
        }

    async def _try(self) -> bool:
        now = self._clock.now()
        try:
            lease = await self._client.get(LEASES, self._name, namespace=self._namespace)
        except NotFoundError:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": self._spec(0, format_time(now).replace("Z", ".000000Z")),
            }
            try:
                await self._client.create(LEASES, body, namespace=self._namespace)
            except ConflictError:
                return False
            self.leader = self.identity
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renew = parse_time(spec.get("renewTime"))
        duration = int(spec.get("leaseDurationSeconds") or self._lease_seconds)
        self.leader = holder
        expired = renew is None or renew + timedelta(seconds=duration) < now
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        acquire = spec.get("acquireTime") if holder == self.identity else format_time(now).replace("Z", ".000000Z")
        lease["spec"] = self._spec(transitions, str(acquire))
        try:
            await self._client.replace(LEASES, lease)
        except ConflictError:
            return False
        self.leader = self.identity
        return True

    async def run(self) -> None:
        """Acquire, then renew until cancelled; sets `lost` if the lease is taken away."""
        last_renew = self._clock.monotonic()
        while True:
            try:
                ok = await self._try()
            except ApiError as err:
                log.warning("leader.renew_failed", error=str(err))
                # a leader that cannot reach the apiserver keeps leading until its lease runs out
                ok = self.is_leader.is_set() and self._clock.monotonic() - last_renew < self._lease_seconds
            else:
                if ok:
                    last_renew = self._clock.monotonic()
            if ok and not self.is_leader.is_set():
                log.info("leader.acquired", identity=self.identity)
                self.is_leader.set()
            elif not ok and self.is_leader.is_set():
                log.error("leader.lost", identity=self.identity, holder=self.leader)
                self.lost.set()
                return
            await self._clock.sleep(self._renew)

    async def release(self) -> None:
        if not self.is_leader.is_set():
            return
        try:
            lease = await self._client.get(LEASES, self._name, namespace=self._namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                await self._client.replace(LEASES, lease)
        except ApiError as err:
            log.warning("leader.release_failed", error=str(err))
