"""check-capacity: whether a ProvisioningRequest's pods fit on the cluster's nodes and in-flight
NodeClaims now, other bookings held, buying nothing; if they do, the room is booked for them
(cluster-autoscaler's ``check-capacity.autoscaling.x-k8s.io``)."""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from controller.context import Context
from controller.provreq import metrics
from controller.provreq.booker import Booker
from controller.provreq.booking import placements
from controller.provreq.decide import Check, Knobs, RequestView, miss, provisioned_update
from controller.provreq.effects import RequestEffects
from controller.provreq.reader import RequestReader
from controller.scheduling.model import Pod
from controller.scheduling.solver import solve

log = structlog.get_logger()


async def check_capacity(
    ctx: Context,
    knobs: Knobs,
    view: RequestView,
    step: Check,
    pods: Sequence[Pod],
    *,
    reader: RequestReader,
    effects: RequestEffects,
    booker: Booker,
) -> float | None:
    """``pods``: the request's placeholders."""
    req = view.request
    async with ctx.writer.lock:
        inputs = await reader.inputs()
        now = ctx.clock.now()
        plan = solve(
            pods=pods,
            node_pools=(),
            existing_nodes=ctx.bookings.hold(list(inputs.existing), now, except_request=req.key),
            daemon_pods=inputs.daemons,
        )
        if plan.unschedulable:
            why = next(iter(plan.unschedulable.values()))
            step_miss = miss(
                req,
                why=f"{len(plan.unschedulable)} of {len(pods)} pods do not fit on the "
                f"cluster's nodes and in-flight NodeClaims now ({why})",
                permanent=False,
                knobs=knobs,
            )
            await effects.status(req, step_miss.updates)
            if step_miss.event is not None:
                await effects.event(req, *step_miss.event)
            metrics.CHECKS.labels("NotFound").inc()
            return step_miss.requeue
        held = placements(plan, pods)
        booker.publish(req, held=held, nodes=frozenset(held))
    if not await effects.status(req, (*step.accept, provisioned_update(atomic=False, message=""))):
        return None
    await effects.event(
        req,
        "Provisioned",
        f"the {len(pods)} pods fit on existing capacity "
        f"({len(plan.existing_placements)} nodes); booked for {knobs.booking_seconds:.0f}s",
        False,
    )
    metrics.CHECKS.labels("Found").inc()
    metrics.REQUESTS.labels(req.class_name, "Provisioned").inc()
    log.info("provisioningrequest.capacity_found", request=req.key, pods=len(pods), nodes=len(plan.existing_placements))
    return None  # the status write comes back as an event: then the booking
