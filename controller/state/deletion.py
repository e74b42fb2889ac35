"""Deleting a NodeClaim on purpose, with the reason recorded where users and metrics find it.

Every controller that gives a machine back (lifecycle timeouts, garbage collection, termination of
a deleted Node, disruption, gangs) deletes through `delete_nodeclaim`. The reason goes into the
annotation ``joiner.sh/termination-reason`` (read by the termination controller for
``joiner_nodeclaims_terminated_total{reason}``) and into an Event on the NodeClaim. The delete
carries a uid precondition, so a NodeClaim re-created under the same name is never hit.
"""

from __future__ import annotations

from typing import Final, Protocol

import structlog

from controller.kube.client import ConflictError, KubeClient, NotFoundError
from controller.kube.events import EventRecorder
from controller.kube.resources import NODECLAIMS
from controller.state.views import NodeClaimView

log = structlog.get_logger()

ANNOTATION_TERMINATION_REASON: Final = "joiner.sh/termination-reason"
"""On a NodeClaim being deleted by joiner: why (``RegistrationTimedOut``, ``InsufficientCapacity``, ...)."""
DEFAULT_TERMINATION_REASON: Final = "Deleted"


class Deleter(Protocol):
    """What a deletion needs of the controller's context: the client and the Event recorder."""

    @property
    def client(self) -> KubeClient: ...
    @property
    def events(self) -> EventRecorder: ...


def termination_reason(claim: NodeClaimView) -> str:
    return str(claim.annotations.get(ANNOTATION_TERMINATION_REASON) or DEFAULT_TERMINATION_REASON)


async def delete_nodeclaim(
    ctx: Deleter, claim: NodeClaimView, *, reason: str, message: str, warning: bool = True
) -> bool:
    """Annotate, record an Event, then delete. False when it was already gone or being deleted."""
    if claim.deleting:
        return False
    try:
        await ctx.client.patch(
            NODECLAIMS, claim.name, {"metadata": {"annotations": {ANNOTATION_TERMINATION_REASON: reason}}}
        )
    except NotFoundError:
        return False
    await ctx.events.emit(claim.raw, reason=reason, message=message, type="Warning" if warning else "Normal")
    try:
        await ctx.client.delete(NODECLAIMS, claim.name, uid=claim.uid)
    except (NotFoundError, ConflictError):  # gone, or the name now belongs to another object
        return False
    log.info("nodeclaim.deleted", nodeclaim=claim.name, reason=reason, message=message)
    return True
