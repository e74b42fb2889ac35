"""What the lifecycle controller checks and changes on a NodeClaim's Node. Pure.

* `registration_patch`: registering a Node to its NodeClaim (labels, finalizer, owner, no
  unregistered taint);
* `initialization_blockers`: why a registered Node is not initialized yet.

The patch builders themselves are shared by every controller: `controller.state.patches`.
"""

from __future__ import annotations

from api.v1.labels import TAINT_PLANNED, TAINT_PLANNED_EFFECT, TAINT_UNREGISTERED, TAINT_UNREGISTERED_EFFECT
from controller.state.patches import Patch, finalizer_patch, label_patch, owner_patch, taint_patch
from controller.state.reservations import unregistered_resources
from controller.state.views import NodeClaimView, NodeView, TaintRef


def planned_taint(claim: str) -> TaintRef:
    """The taint that reserves a Node to the pods planned on NodeClaim ``claim``."""
    return TaintRef(key=TAINT_PLANNED, effect=TAINT_PLANNED_EFFECT, value=claim)


def registration_patch(
    claim: NodeClaimView,
    node: NodeView,
    *,
    registered: bool = False,
    keep_closed: bool = False,
    reserve: bool = False,
) -> Patch:
    """What registering a Node to its NodeClaim changes on the Node: the NodeClaim's labels, the
    termination finalizer, the owner reference, and no more `joiner.sh/unregistered` taint.

    Until the NodeClaim is Registered, its taints and startup taints are also put on the Node when
    the kubelet did not register with them (a real machine's kubelet only has what its user data
    passed): a GPU node must not take pods that do not tolerate its taint in the moment between
    joining and being registered. After that they are left to whoever owns them (a startup taint is
    removed by its agent and must not come back).

    ``keep_closed``: leave the unregistered taint on for now (the pods planned on this Node are not
    nominated to it yet, see `controller.nodeclaim.decide`). ``reserve``: the patch that takes the
    unregistered taint off puts the `joiner.sh/planned` taint on in the same write, so no moment
    passes with the Node open to every pod."""
    missing = {k: v for k, v in claim.labels.items() if k not in node.labels}
    add = () if registered else (*claim.taints, *claim.startup_taints)
    if reserve and not keep_closed and node.has_taint(TAINT_UNREGISTERED):
        add = (*add, planned_taint(claim.name))
    return [
        *label_patch(node, missing),
        *finalizer_patch(node, add=True),
        *owner_patch(node, claim),
        # and NoExecute, the effect earlier builds of joiner gave it
        *taint_patch(
            node,
            add=add,
            remove=()
            if keep_closed
            else [(TAINT_UNREGISTERED, TAINT_UNREGISTERED_EFFECT), (TAINT_UNREGISTERED, "NoExecute")],
        ),
    ]


def reservation_end_patch(node: NodeView) -> Patch:
    """Take the `joiner.sh/planned` taint off: the Node's room is anyone's again."""
    return taint_patch(node, remove=[(TAINT_PLANNED, TAINT_PLANNED_EFFECT)])


def initialization_blockers(claim: NodeClaimView, node: NodeView) -> list[tuple[str, str]]:
    """Why the Node is not initialized yet, as (reason, message) pairs; [] when it is.

    Initialized means: Ready, none of the NodeClaim's startup taints left on the Node, and every
    resource the NodeClaim requested (a GPU, say) registered in the Node's allocatable.
    """
    out: list[tuple[str, str]] = []
    name = node.name
    if not node.ready:
        out.append(("NodeNotReady", f"Node {name} is not Ready"))
    startup = {t.ident for t in claim.startup_taints}
    left = sorted(f"{t.key}:{t.effect}" for t in node.taints if t.ident in startup)
    if left:
        out.append(("StartupTaintsPresent", f"startup taints still on Node {name}: {', '.join(left)}"))
    missing = unregistered_resources(claim, node)
    if missing:
        detail = ", ".join(f"{res} (requested {claim.requests[res]})" for res in missing)
        out.append(("ResourceNotRegistered", f"Node {name} has none of {detail} in its allocatable"))
    return out
