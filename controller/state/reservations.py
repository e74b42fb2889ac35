"""Which DaemonSets a planned Node's reservation would keep off it, and whether that matters.

A Node bought for pending pods opens reserved to them (the `joiner.sh/planned=<NodeClaim>:NoSchedule`
taint, docs/provisioning.md). The DaemonSet controller does not even create a daemon pod for a Node
whose `NoSchedule` taints the pod does not tolerate, so a DaemonSet without a toleration of that taint
waits for the reservation to end, and the reservation ends when the planned pods are bound. For most
DaemonSets (a log or metrics agent) that is a few seconds' wait, and the room they take was left for
them in the plan. Where the planned pods need the DaemonSet first, it is never: a GPU device plugin
registers the GPUs the pods request. So the reservation is judged when the Node registers: a Node
that registered with every resource its NodeClaim asked for in its allocatable needs nothing a
DaemonSet would bring to take its pods, and stays reserved (`Reserving.despite`); one that registered
without some of them (the GPUs a device plugin has not registered yet) while a DaemonSet is kept off
is not reserved, and its pods are nominated instead. Until the Node registers, the NodeClaim counts as
reserved: its pods are given the toleration, which costs nothing if the taint never comes.

A DaemonSet counts when its pod would run on the Node: it tolerates the NodeClaim's taints, and its
node selector and affinity do not exclude the NodeClaim on a label the NodeClaim already knows (its
NodePool's labels and requirements, the instance types and zones it may launch in). A selector on a
label only the Node gets later (a GPU feature label that node-feature-discovery adds, say) may match,
so it counts. DaemonSets that tolerate every taint (the usual CNI and kube-proxy) never count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import structlog

from api.v1.labels import TAINT_PLANNED, TAINT_PLANNED_EFFECT
from controller.scheduling import kubeconv
from controller.scheduling.model import Pod
from controller.scheduling.quantity import QuantityError, parse_quantity
from controller.scheduling.requirements import RequirementError, Requirements
from controller.scheduling.taints import Taint, first_untolerated, tolerates
from controller.state.views import NodeClaimView, NodeView, Obj

log = structlog.get_logger()


def node_side(claim: NodeClaimView) -> Requirements:
    """What the NodeClaim already says about its Node's labels: its requirements, and its labels."""
    expressions = [dict(r) for r in claim.requirements]
    known = {str(r.get("key")) for r in expressions}
    expressions += [{"key": k, "operator": "In", "values": [v]} for k, v in claim.labels.items() if k not in known]
    try:
        return Requirements.from_expressions(expressions)
    except (RequirementError, KeyError, ValueError):
        return Requirements()


def excludes(term: Requirements, node: Requirements) -> bool:
    """Whether a node affinity term certainly does not match: it fails on a label the node side knows."""
    known = Requirements(r for r in term if node.get(r.key) is not None)
    return known.compatible_with_node(node) is not None


def kept_off(claim: NodeClaimView, daemons: Iterable[Pod]) -> tuple[str, ...]:
    """The DaemonSets (``owner`` of each daemon pod) whose pods would run on the NodeClaim's Node but
    do not tolerate its reservation."""
    reservation = Taint(key=TAINT_PLANNED, value=claim.name, effect=TAINT_PLANNED_EFFECT)
    taints = [Taint(key=t.key, value=t.value, effect=t.effect) for t in claim.taints]
    node = node_side(claim)
    out: list[str] = []
    for daemon in daemons:
        if tolerates(daemon.tolerations, reservation):
            continue
        if first_untolerated(daemon.tolerations, taints) is not None:
            continue  # it never runs there
        terms = daemon.node_requirements
        if terms and all(excludes(term, node) for term in terms):
            continue
        out.append(daemon.owner or daemon.name)
    return tuple(out)


def daemon_pods(daemonsets: Iterable[Obj]) -> list[tuple[str, Pod]]:
    """(uid, the pod it would run on a Node) of each DaemonSet not being deleted (its namespace going:
    it makes no new pod); one that does not convert is left out (the provisioner says so,
    `controller.state.inputs.daemon_templates`)."""
    out: list[tuple[str, Pod]] = []
    for obj in daemonsets:
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        try:
            out.append((str(meta.get("uid") or ""), kubeconv.daemonset_from_dict(obj)))
        except ValueError:
            continue
    return out


def unregistered_resources(claim: NodeClaimView, node: NodeView) -> list[str]:
    """The resources the NodeClaim asked for (a GPU, say) that its Node has none of in its allocatable."""
    allocatable = node.allocatable
    return sorted(
        res
        for res, quantity in claim.requests.items()
        if _quantity(quantity) > 0 and _quantity(allocatable.get(res, 0)) <= 0
    )


def _quantity(value: Any) -> int:
    try:
        return parse_quantity(value)
    except (QuantityError, ValueError, TypeError):
        return 0


class DaemonSetsKeptOff:
    """`kept_off` per NodeClaim, worked out once per NodeClaim and again when a DaemonSet's spec changes
    (not its status, which moves with every Node it runs on); and, per NodeClaim whose Node registered,
    whether it is reserved despite them (`despite`)."""

    def __init__(self) -> None:
        self._seen: tuple[tuple[str, str], ...] | None = None
        self._daemons: Sequence[Pod] = ()
        self._by_claim: dict[str, tuple[str, ...]] = {}
        self._despite: dict[str, bool] = {}

    def of(self, claim: NodeClaimView, daemonsets: Callable[[], Iterable[Obj]]) -> tuple[str, ...]:
        # a DaemonSet being deleted (its namespace going) puts no pod on a new Node
        objs = [o for o in daemonsets() if not (o.get("metadata") or {}).get("deletionTimestamp")]
        seen = tuple(
            (str((o.get("metadata") or {}).get("uid")), str((o.get("metadata") or {}).get("generation"))) for o in objs
        )
        if seen != self._seen:
            daemons = tuple(pod for _uid, pod in daemon_pods(objs))
            self._seen, self._daemons, self._by_claim = seen, daemons, {}
        found = self._by_claim.get(claim.name)
        if found is None:
            found = self._by_claim[claim.name] = kept_off(claim, self._daemons)
        return found

    def despite(self, claim: NodeClaimView, node: NodeView | None, kept: Sequence[str]) -> bool:
        """Whether ``claim``, whose Node ``kept`` DaemonSets would be kept off, is reserved all the same:
        until its Node registers, yes; then, once and for good, if the Node registered with every
        resource the NodeClaim asked for (nothing those DaemonSets bring is needed to take its pods)."""
        decided = self._despite.get(claim.name)
        if decided is not None:
            return decided
        if node is None:
            return True
        missing = unregistered_resources(claim, node)
        decided = self._despite[claim.name] = not missing
        if decided:
            log.info(
                "nodeclaim.reserved_daemonsets_wait",
                nodeclaim=claim.name,
                daemonsets=list(kept),
                reason="these DaemonSets do not tolerate joiner.sh/planned: their pods start when the "
                "reservation ends (their room is kept)",
            )
        else:
            log.info(
                "nodeclaim.not_reserved",
                nodeclaim=claim.name,
                daemonsets=list(kept),
                unregistered=missing,
                reason="its Node registered without these resources, and these DaemonSets, which may be "
                "what registers them, do not tolerate joiner.sh/planned: its pods are nominated instead",
            )
        return decided

    def forget(self, claim: str) -> None:
        self._by_claim.pop(claim, None)
        self._despite.pop(claim, None)
