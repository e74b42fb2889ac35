"""Which DaemonSets a planned Node's reservation would keep off it.

A Node bought for pending pods opens reserved to them (the `joiner.sh/planned=<NodeClaim>:NoSchedule`
taint, docs/provisioning.md). The DaemonSet controller does not even create a daemon pod for a Node
whose `NoSchedule` taints the pod does not tolerate, so a DaemonSet without a toleration of that taint
waits for the reservation to end, and the reservation ends when the planned pods are bound. Where the
planned pods need the DaemonSet first that never happens: a GPU device plugin registers the GPUs the
pods request, a CNI agent makes the Node Ready. Such a NodeClaim is not reserved: its Node opens as
it did before reservations (closed until its pods are nominated, then in waves).

A DaemonSet counts when its pod would run on the Node: it tolerates the NodeClaim's taints, and its
node selector and affinity do not exclude the NodeClaim on a label the NodeClaim already knows (its
NodePool's labels and requirements, the instance types and zones it may launch in). A selector on a
label only the Node gets later (a GPU feature label that node-feature-discovery adds, say) may match,
so it counts. DaemonSets that tolerate every taint (the usual CNI and kube-proxy) never count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import structlog

from api.v1.labels import TAINT_PLANNED, TAINT_PLANNED_EFFECT
from controller.scheduling import kubeconv
from controller.scheduling.model import Pod
from controller.scheduling.requirements import RequirementError, Requirements
from controller.scheduling.taints import Taint, first_untolerated, tolerates
from controller.state.views import NodeClaimView, Obj

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


def _excludes(term: Requirements, node: Requirements) -> bool:
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
        if terms and all(_excludes(term, node) for term in terms):
            continue
        out.append(daemon.owner or daemon.name)
    return tuple(out)


class DaemonSetsKeptOff:
    """`kept_off` per NodeClaim, worked out once per NodeClaim and again when the DaemonSets change."""

    def __init__(self) -> None:
        self._seen: tuple[tuple[str, str], ...] | None = None
        self._daemons: Sequence[Pod] = ()
        self._by_claim: dict[str, tuple[str, ...]] = {}

    def of(self, claim: NodeClaimView, daemonsets: Callable[[], Iterable[Obj]]) -> tuple[str, ...]:
        # a DaemonSet being deleted (its namespace going) puts no pod on a new Node
        objs = [o for o in daemonsets() if not (o.get("metadata") or {}).get("deletionTimestamp")]
        seen = tuple(
            (str((o.get("metadata") or {}).get("uid")), str((o.get("metadata") or {}).get("resourceVersion")))
            for o in objs
        )
        if seen != self._seen:
            daemons = []
            for obj in objs:
                try:
                    daemons.append(kubeconv.daemonset_from_dict(obj))
                except ValueError:
                    continue  # the provisioner says so already (`daemon_templates`)
            self._seen, self._daemons, self._by_claim = seen, tuple(daemons), {}
        found = self._by_claim.get(claim.name)
        if found is None:
            found = self._by_claim[claim.name] = kept_off(claim, self._daemons)
            if found:
                log.info(
                    "nodeclaim.not_reserved",
                    nodeclaim=claim.name,
                    daemonsets=list(found),
                    reason="these DaemonSets would run on its Node and do not tolerate joiner.sh/planned: "
                    "the Node opens once its pods are nominated instead",
                )
        return found

    def forget(self, claim: str) -> None:
        self._by_claim.pop(claim, None)
