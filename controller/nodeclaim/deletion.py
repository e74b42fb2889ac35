"""Compatibility for callers that still hold NodeClaim dicts (gang/, disruption/controller.py):
`controller.state.deletion` is where deleting a NodeClaim with a reason lives; these wrappers
make the view and delegate. Remove once those callers use views."""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller.state import deletion as _deletion
from controller.state.deletion import ANNOTATION_TERMINATION_REASON, DEFAULT_TERMINATION_REASON
from controller.state.views import NodeClaimView, Obj

if TYPE_CHECKING:
    from controller.context import Context

__all__ = ["ANNOTATION_TERMINATION_REASON", "DEFAULT_TERMINATION_REASON", "delete_nodeclaim", "termination_reason"]


def termination_reason(claim: Obj) -> str:
    return _deletion.termination_reason(NodeClaimView.of(claim))


async def delete_nodeclaim(ctx: Context, claim: Obj, *, reason: str, message: str, warning: bool = True) -> bool:
    return await _deletion.delete_nodeclaim(
        ctx, NodeClaimView.of(claim), reason=reason, message=message, warning=warning
    )
