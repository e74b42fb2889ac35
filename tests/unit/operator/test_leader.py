"""Leader election with client-go's semantics, on the fake clock: expiry judged from locally observed
time, the leader stopping within its renew deadline, and never two leaders at once."""

from __future__ import annotations

import asyncio
import copy
from datetime import timedelta
from typing import Any

import pytest

from controller.clock import FakeClock, format_time
from controller.kube.client import ApiError, ConflictError, NotFoundError, TransportError
from controller.operator.leader import LeaderElectionError, LeaderElector, check_timings

Obj = dict[str, Any]


class Leases:
    """The apiserver's Lease store (resourceVersion conflicts included)."""

    def __init__(self) -> None:
        self.obj: Obj | None = None
        self.version = 0


class Client:
    """One replica's connection to the store; ``partitioned`` fails its calls (``"unreachable"``: no
    answer, as a network partition or an apiserver restart gives; ``"503"``: an apiserver that answers
    but cannot serve), ``hung`` never answers."""

    def __init__(self, store: Leases) -> None:
        self.store = store
        self.partitioned: str | None = None
        self.hung = False

    async def _gate(self) -> None:
        if self.hung:
            await asyncio.Event().wait()
        if self.partitioned == "503":
            raise ApiError(503, "ServiceUnavailable", "the apiserver cannot be reached")
        if self.partitioned:
            raise TransportError("PUT leases/joiner: ClientConnectorError: connection refused")

    async def get(self, res: Any, name: str, *, namespace: str | None = None) -> Obj:
        await self._gate()
        if self.store.obj is None:
            raise NotFoundError(404, "NotFound", name)
        return copy.deepcopy(self.store.obj)

    async def create(self, res: Any, obj: Obj, *, namespace: str | None = None) -> Obj:
        await self._gate()
        if self.store.obj is not None:
            raise ConflictError(409, "AlreadyExists", "lease")
        self.store.version += 1
        obj["metadata"]["resourceVersion"] = str(self.store.version)
        self.store.obj = copy.deepcopy(obj)
        return obj

    async def replace(self, res: Any, obj: Obj, *, subresource: str | None = None) -> Obj:
        await self._gate()
        assert self.store.obj is not None
        if obj["metadata"].get("resourceVersion") != self.store.obj["metadata"]["resourceVersion"]:
            raise ConflictError(409, "Conflict", "the object has been modified")
        self.store.version += 1
        obj["metadata"]["resourceVersion"] = str(self.store.version)
        self.store.obj = copy.deepcopy(obj)
        return obj


def elector(store: Leases, clock: FakeClock, name: str) -> tuple[LeaderElector, Client]:
    client = Client(store)
    e = LeaderElector(
        client=client,  # type: ignore[arg-type]
        clock=clock,
        namespace="joiner",
        lease_seconds=15,
        renew_deadline_seconds=10,
        retry_period_seconds=2,
        identity=name,
    )
    return e, client


async def step(clock: FakeClock, seconds: float) -> None:
    for _ in range(int(seconds * 2)):
        await clock.advance(0.5)


async def test_one_replica_leads_and_the_other_waits() -> None:
    clock, store = FakeClock(), Leases()
    a, _ = elector(store, clock, "a")
    b, _ = elector(store, clock, "b")
    tasks = [asyncio.create_task(a.run()), asyncio.create_task(b.run())]
    await step(clock, 60)
    assert a.is_leader.is_set()
    assert not b.is_leader.is_set()
    assert b.leader == "a"
    assert store.obj is not None
    assert store.obj["spec"]["holderIdentity"] == "a"
    for t in tasks:
        t.cancel()


async def test_a_holder_whose_clock_is_wrong_cannot_make_its_lease_look_expired() -> None:
    """b judges expiry from when it saw the record change, not from the renewTime written in it."""
    clock, store = FakeClock(), Leases()
    a, _ = elector(store, clock, "a")
    task_a = asyncio.create_task(a.run())
    await step(clock, 1)
    assert a.is_leader.is_set()
    # a's clock is an hour behind: every renewTime it writes looks long expired
    real_spec = a._spec

    def skewed(transitions: int, acquire_time: str) -> dict[str, object]:
        spec = real_spec(transitions, acquire_time)
        spec["renewTime"] = format_time(clock.now() - timedelta(hours=1)).replace("Z", ".000000Z")
        return spec

    a._spec = skewed  # type: ignore[method-assign]
    b, _ = elector(store, clock, "b")
    task_b = asyncio.create_task(b.run())
    await step(clock, 60)
    assert a.is_leader.is_set()
    assert not b.is_leader.is_set()  # a keeps renewing: b sees the record change every 2 s
    task_a.cancel()
    task_b.cancel()


@pytest.mark.parametrize("failure", ["unreachable", "503"])
async def test_a_partitioned_leader_stops_before_the_standby_takes_over(failure: str) -> None:
    clock, store = FakeClock(), Leases()
    a, client_a = elector(store, clock, "a")
    b, _ = elector(store, clock, "b")
    task_a = asyncio.create_task(a.run())
    await step(clock, 1)
    task_b = asyncio.create_task(b.run())
    await step(clock, 10)
    cut_at = clock.monotonic()
    client_a.partitioned = failure
    stopped_at = took_over_at = None
    for _ in range(80):
        await clock.advance(0.5)
        if stopped_at is None and a.lost.is_set():
            stopped_at = clock.monotonic()
        if took_over_at is None and b.is_leader.is_set():
            took_over_at = clock.monotonic()
    assert stopped_at is not None
    assert took_over_at is not None
    assert stopped_at - cut_at <= 10 + 2  # within the renew deadline (checked every retry period)
    assert stopped_at < took_over_at  # never two leaders
    assert took_over_at - cut_at <= 15 + 2 + 2  # the lease, seen from b, plus a retry period
    assert store.obj is not None
    assert store.obj["spec"]["holderIdentity"] == "b"
    assert store.obj["spec"]["leaseTransitions"] == 1
    task_a.cancel()
    task_b.cancel()


async def test_a_renewal_that_hangs_ends_leadership_at_the_deadline() -> None:
    clock, store = FakeClock(), Leases()
    a, client_a = elector(store, clock, "a")
    task = asyncio.create_task(a.run())
    await step(clock, 5)
    assert a.is_leader.is_set()
    client_a.hung = True
    start = clock.monotonic()
    await step(clock, 14)
    assert a.lost.is_set()
    assert not a.is_leader.is_set()
    assert clock.monotonic() - start <= 14
    await asyncio.wait_for(task, timeout=1)  # run() returned


async def test_a_clean_stop_hands_over_without_waiting_for_expiry() -> None:
    clock, store = FakeClock(), Leases()
    a, _ = elector(store, clock, "a")
    b, _ = elector(store, clock, "b")
    task_a = asyncio.create_task(a.run())
    await step(clock, 1)
    task_b = asyncio.create_task(b.run())
    await step(clock, 4)
    task_a.cancel()
    await a.release()
    await step(clock, 4)
    assert b.is_leader.is_set()
    task_b.cancel()


@pytest.mark.parametrize(("lease", "deadline", "retry"), [(10, 10, 2), (15, 20, 2), (15, 10, 10), (15, 10, 0)])
def test_timings_that_could_give_two_leaders_are_refused(lease: float, deadline: float, retry: float) -> None:
    with pytest.raises(LeaderElectionError, match="retry period < renew deadline < lease duration"):
        check_timings(lease=lease, renew_deadline=deadline, retry_period=retry)


async def test_a_standby_that_cannot_reach_the_apiserver_waits_and_leads_once_it_can() -> None:
    """A standby started while the apiserver restarts keeps trying every retry period; it does not
    exit (the process would restart and start over) and takes the Lease once it answers."""
    clock, store = FakeClock(), Leases()
    a, client_a = elector(store, clock, "a")
    client_a.partitioned = "unreachable"
    task = asyncio.create_task(a.run())
    await step(clock, 10)
    assert not task.done()
    assert not a.is_leader.is_set()
    client_a.partitioned = None
    await step(clock, 3)
    assert a.is_leader.is_set()
    task.cancel()


async def test_a_leader_whose_apiserver_blips_keeps_the_lease() -> None:
    """A few seconds without an answer, shorter than the renew deadline: still the leader."""
    clock, store = FakeClock(), Leases()
    a, client_a = elector(store, clock, "a")
    task = asyncio.create_task(a.run())
    await step(clock, 3)
    assert a.is_leader.is_set()
    client_a.partitioned = "unreachable"
    await step(clock, 5)
    client_a.partitioned = None
    await step(clock, 10)
    assert a.is_leader.is_set()
    assert not a.lost.is_set()
    assert not task.done()
    task.cancel()
