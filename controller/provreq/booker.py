"""The capacity booked for a ProvisioningRequest's pods: published in the shared book
(``state/bookings.py``, which the provisioner and disruption read), held for the pods that have not
bound, released; the request's pending pods nominated onto it. Where the room is, is the pure
``booking.py``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import structlog

from controller.context import Context
from controller.kube.client import ApiError, NotFoundError
from controller.kube.resources import PODS
from controller.provreq import metrics
from controller.provreq.booking import hold_room, unmatched
from controller.provreq.decide import Book, Knobs, RequestView, booked
from controller.provreq.reader import RequestReader
from controller.provreq.request import ProvisioningRequest
from controller.scheduling.model import Pod
from controller.state.bookings import Booking
from controller.state.patches import nomination_patch
from controller.state.views import PodView

log = structlog.get_logger()


class Booker:
    def __init__(self, ctx: Context, knobs: Knobs, reader: RequestReader) -> None:
        self.ctx = ctx
        self.knobs = knobs
        self.reader = reader

    async def book(self, view: RequestView, step: Book) -> None:
        """Hold the room for the request's pods that have not bound, and nominate those that are
        pending onto it."""
        req = view.request
        if not booked(view, now=self.ctx.clock.now(), knobs=self.knobs):
            self.release(req.key)
            return
        bound, pending = self.reader.consumers(req)
        placeholders, _ = self.reader.placeholders(view)
        arrived: list[Pod] = []
        for pod in pending:
            try:
                arrived.append(self.ctx.cluster.scheduling_pod(pod))
            except ValueError:
                continue
        async with self.ctx.writer.lock:
            inputs = await self.reader.inputs()
            existing = list(inputs.existing)
            now = self.ctx.clock.now()
            # an atomic request's own machines first (kept whole), then -- for what they do not hold,
            # room that existed when it was planned -- the rest of the cluster, other bookings held
            names = {c.node_name or c.name for c in view.claims.values() if not c.deleting} if req.atomic else set()
            others = self.ctx.bookings.hold([n for n in existing if n.name not in names], now, except_request=req.key)
            room = hold_room(
                [n for n in existing if n.name in names],
                others=others,
                arrived=arrived,
                left=unmatched(placeholders, [self.ctx.cluster.scheduling_pod(p) for p in bound]),
                daemons=inputs.daemons,
                whole_nodes=req.atomic,
            )
            self.publish(req, held=room.held, nodes=room.nodes, claimed=room.claimed)
        await self._nominate(pending, room.placed)

    def holds_attempt(self, view: RequestView) -> bool:
        """Whether the published booking keeps every machine of the attempt under its name now (the
        NodeClaim's name until its Node registers, then the Node's)."""
        booking, attempt = self.ctx.bookings.get(view.request.key), view.attempt
        if booking is None or attempt is None:
            return False
        names = {c.node_name or c.name for n, c in view.claims.items() if n in attempt.claims and not c.deleting}
        return names <= booking.nodes

    async def hold_attempt(self, view: RequestView) -> None:
        """Hold the room of an atomic attempt whose machines are coming up (after a restart: the
        book is in memory, the attempt is on the request): the attempt's own NodeClaims whole, and
        what they cannot hold on the rest of the cluster, as :meth:`book` does once provisioned."""
        req, attempt = view.request, view.attempt
        if attempt is None or not attempt.claims:
            return
        placeholders, _ = self.reader.placeholders(view)
        async with self.ctx.writer.lock:
            inputs = await self.reader.inputs()
            now = self.ctx.clock.now()
            names = {c.node_name or c.name for n, c in view.claims.items() if n in attempt.claims and not c.deleting}
            existing = list(inputs.existing)
            others = self.ctx.bookings.hold([n for n in existing if n.name not in names], now, except_request=req.key)
            room = hold_room(
                [n for n in existing if n.name in names],
                others=others,
                arrived=[],
                left=placeholders,
                daemons=inputs.daemons,
                whole_nodes=True,
            )
            self.publish(req, held=room.held, nodes=room.nodes, until=attempt.deadline)
        log.info("provisioningrequest.room_held", request=req.key, nodes=sorted(room.nodes), reason="attempt resumed")

    async def _nominate(self, pending: Sequence[PodView], placed: Mapping[str, tuple[Pod, ...]]) -> None:
        where = {p.key: node for node, ps in placed.items() for p in ps}

        async def one(pod: PodView) -> None:
            node = where.get(pod.key)
            if node is None or pod.nominated_node_name == node:
                return
            try:
                await self.ctx.client.patch(
                    PODS,
                    pod.name,
                    nomination_patch(node),
                    namespace=pod.namespace,
                    subresource="status",
                )
            except (NotFoundError, ApiError) as err:
                log.info("provisioningrequest.nomination_skipped", pod=pod.key, node=node, error=str(err))
                return
            metrics.NOMINATIONS.inc()

        await asyncio.gather(*(one(p) for p in pending))

    def publish(
        self,
        req: ProvisioningRequest,
        *,
        held: Mapping[str, tuple[Pod, ...]],
        nodes: frozenset[str],
        claimed: frozenset[str] = frozenset(),
        until: datetime | None = None,
    ) -> None:
        """``until``: while an attempt's machines come up, its deadline if later than the booking
        time from now (the booking time counts from ``Provisioned``)."""
        now = self.ctx.clock.now()
        end = (req.provisioned_at or now) + timedelta(seconds=self.knobs.booking_seconds)
        self.ctx.bookings.publish(
            Booking(
                request=req.key,
                until=max(end, until) if until is not None else end,
                held=dict(held),
                nodes=nodes,
                claimed=claimed,
            )
        )
        metrics.BOOKED_NODES.set(len(self.ctx.bookings.booked_nodes(now)))

    def release(self, key: str) -> None:
        if self.ctx.bookings.release(key):
            metrics.BOOKED_NODES.set(len(self.ctx.bookings.booked_nodes(self.ctx.clock.now())))
