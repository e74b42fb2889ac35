"""Where each pending pod was planned, and for how long it keeps that place.

The provisioner's last decisions put pods on NodeClaims (pod key -> NodeClaim, ``nominations``);
the nominator reads them to set each pod's ``status.nominatedNodeName``, and the next decision
counts a pod on its NodeClaim instead of solving it again while the NodeClaim is coming up, or
has been open to kube-scheduler for less than the grace (10 s; longer while kube-scheduler works
through a backlog, at its pace), and while the pod still fits there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

import structlog

from api.v1.labels import TAINT_PLANNED, TAINT_PLANNED_EFFECT, TAINT_UNREGISTERED
from controller.context import Context
from controller.provisioning.nominations import split_nominated
from controller.scheduling.model import ExistingNode, Plan, Pod
from controller.scheduling.warm import is_virtual
from controller.state.views import NodeClaimView, NodeView, PodView

log = structlog.get_logger()
# a pod nominated to a NodeClaim keeps that place until the NodeClaim has been Initialized this long;
# if kube-scheduler has not bound it there by then, it is solved again
NOMINATION_GRACE_SECONDS = 10.0
# ... and up to this long while kube-scheduler is visibly working through a backlog, or longer when
# the backlog at kube-scheduler's pace takes longer (twice its time, at most the ceiling)
BACKLOG_NOMINATION_GRACE_SECONDS = 600.0
BACKLOG_NOMINATION_GRACE_CEILING_SECONDS = 3600.0
BIND_RATE_WINDOW_SECONDS = 15.0
# ... but not once kube-scheduler has bound nothing for this long while every planned Node has been
# open and Initialized, and every planned pod told (tolerated or nominated), at least this long: it
# has tried them there and refused them (a spread whose counts can no longer come right in the order
# it binds them), and waiting out the backlog grace only keeps them Pending
STALL_SECONDS = 5.0


class Places:
    """The provisioner's nominations (pod key -> NodeClaim) and the grace each keeps its place for."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.nominations: dict[str, str] = {}  # pod key -> NodeClaim the last decision put it on
        self._binds: deque[float] = deque()  # when kube-scheduler bound pods (monotonic), for its pace
        self._last_bind: float | None = None  # monotonic
        self._last_told: float | None = None  # monotonic: the nominator's last toleration or nomination
        self._grace = NOMINATION_GRACE_SECONDS
        self._opened: dict[str, datetime] = {}  # Node -> when its joiner.sh/unregistered taint went
        self._adopted = False  # the places an earlier process gave were read back (`adopt`)

    # --- what the watches tell -------------------------------------------------------------
    def on_node(self, etype: str, node: NodeView, old: NodeView | None) -> None:
        # a planned Node opened: the grace of the pods planned there counts from now
        if etype == "DELETED":
            self._opened.pop(node.name, None)
        elif old is not None and old.has_taint(TAINT_UNREGISTERED) and not node.has_taint(TAINT_UNREGISTERED):
            self._opened[node.name] = self.ctx.clock.now()

    def bound(self) -> None:
        """kube-scheduler bound a pod just now."""
        self._last_bind = self.ctx.clock.monotonic()
        self._binds.append(self._last_bind)

    def told(self) -> None:
        """The nominator gave a pod its place just now (a toleration or a nomination written)."""
        self._last_told = self.ctx.clock.monotonic()

    # --- the places --------------------------------------------------------------------------
    def claim(self, name: str) -> NodeClaimView | None:
        return self.ctx.cluster.claim_views().get(name) or self.ctx.writer.just_created(name)

    def bind_rate(self) -> float:
        """Pods kube-scheduler bound per second over the last ``BIND_RATE_WINDOW_SECONDS``."""
        horizon = self.ctx.clock.monotonic() - BIND_RATE_WINDOW_SECONDS
        while self._binds and self._binds[0] < horizon:
            self._binds.popleft()
        return len(self._binds) / BIND_RATE_WINDOW_SECONDS

    def nomination_grace(self) -> float:
        """How long a pod planned onto a NodeClaim keeps its place after the node is Initialized.

        10 s normally. While kube-scheduler works through a backlog (a large burst: it binds a few
        dozen pods a second, so thousands of pods wait minutes on nodes that are ready for them),
        solving the waiting pods again would only put them back where they are, at the cost of a large
        solve every few seconds: so while kube-scheduler has bound pods in the last
        ``BIND_RATE_WINDOW_SECONDS`` and pods wait on Initialized nodes, they keep their place after
        their node was Initialized for ``BACKLOG_NOMINATION_GRACE_SECONDS``, or for twice the time
        kube-scheduler needs at its pace to bind the pods still planned (10,000 pods at 13 a second:
        26 min), at most ``BACKLOG_NOMINATION_GRACE_CEILING_SECONDS``. Once it stops binding, the
        10 s apply again. A pod whose room was taken is released at once whatever the grace
        (``split_nominated``).
        """
        rate = self.bind_rate()
        if rate <= 0 or self.stalled():
            return NOMINATION_GRACE_SECONDS
        for claim_name in self.nominations.values():
            claim = self.claim(claim_name)
            if claim is not None and not claim.deleting and claim.initialized:
                backlog = 2.0 * len(self.nominations) / rate
                return min(BACKLOG_NOMINATION_GRACE_CEILING_SECONDS, max(BACKLOG_NOMINATION_GRACE_SECONDS, backlog))
        return NOMINATION_GRACE_SECONDS

    def stalled(self) -> bool:
        """Whether kube-scheduler has stopped binding the planned pods rather than working through them:
        nothing bound and nothing told for ``STALL_SECONDS``, and every planned NodeClaim still there
        Initialized with its Node open that long, so kube-scheduler has had each pod and its place in
        front of it and refused. Seen with spreads whose selectors cross (pods labelled ``a`` spread
        over ``b`` and the other way round, Karpenter's benchmark workload as Deployments): in the
        order kube-scheduler binds them, 49 of 1,000 pods were left where neither spread allowed them,
        and kept their places for the backlog grace, 20 s, before they were planned again. Those are
        paced now (`controller.provisioning.pacing`); this is what is left for any other plan that
        kube-scheduler's order of binds leaves stuck."""
        now = self.ctx.clock.monotonic()
        last = max((t for t in (self._last_bind, self._last_told) if t is not None), default=None)
        if last is not None and now - last < STALL_SECONDS:
            return False
        wall = self.ctx.clock.now()
        for claim_name in set(self.nominations.values()):
            claim = self.claim(claim_name)
            if claim is None or claim.deleting:
                continue
            initialized = claim.condition("Initialized")
            if initialized is None or not initialized.is_true:
                return False
            node = self.ctx.cluster.node_view_for_claim(claim)
            if node is None or node.has_taint(TAINT_UNREGISTERED):
                return False
            times = (initialized.transitioned, self._opened.get(node.name))
            since = max((t for t in times if t is not None), default=None)
            if since is not None and (wall - since).total_seconds() < STALL_SECONDS:
                return False
        return bool(self.nominations)

    def _claim_node_name(self, claim_name: str) -> str | None:
        """The node a nominated NodeClaim stands for in the solver's input, or None if it is gone
        or has been initialized and open to kube-scheduler long enough that a pod still pending on
        it will not land there.

        The grace counts from the later of the two: a planned Node stays closed (its
        `joiner.sh/unregistered` taint on) until its pods are nominated, which on a loaded apiserver
        took longer than the grace after it was Initialized, and 130 of a 1,000-pod burst were
        solved again while kube-scheduler had not yet been allowed to place them: 19 NodeClaims for
        a plan of 11, four of them left empty."""
        claim = self.claim(claim_name)
        if claim is None or claim.deleting:
            return None
        initialized = claim.condition("Initialized")
        if initialized is not None and initialized.is_true:
            node = self.ctx.cluster.node_view_for_claim(claim)
            if node is not None and node.has_taint(TAINT_UNREGISTERED):
                return claim.node_name or claim_name  # still closed: its pods cannot have landed yet
            since = initialized.transitioned
            opened = self._opened.get(node.name) if node is not None else None
            if since is None or (opened is not None and opened > since):
                since = opened
            if since is None or (self.ctx.clock.now() - since).total_seconds() > self._grace:
                return None
        return claim.node_name or claim_name

    def adopt(self, pending: Mapping[str, PodView]) -> int:
        """After a start (a restart, a new leader): the places an earlier process gave pending pods,
        read back from the toleration of a planned NodeClaim's `joiner.sh/planned` taint it gave each
        one (the last, when a pod was planned more than once), so the first decision keeps them there.

        The plan went with the process, but the tolerations stay on the pods, and a pod tolerating a
        reserved Node can be bound there whatever the next plan says. Solved afresh, the pods of the
        NodeClaims in flight could be dealt out to them in another order: a pod planned elsewhere but
        still tolerating its old Node would take the room of the pod planned there now, that pod would
        have nowhere to go and one more machine would be bought, and the Node planned for the first
        pod would stay empty. Only once per process, before its first decision; the places then hold
        as any other (grace, room left, the NodeClaim still there). Returns how many were adopted."""
        if self._adopted:
            return 0
        self._adopted = True
        adopted = 0
        for key, pod in pending.items():
            if key in self.nominations:
                continue
            claim_name = self._tolerated_claim(pod)
            if claim_name is not None:
                self.nominations[key] = claim_name
                adopted += 1
        if adopted:
            log.info("provisioner.places_adopted", pods=adopted, reason="tolerations of planned NodeClaims")
        return adopted

    def _tolerated_claim(self, pod: PodView) -> str | None:
        """The last NodeClaim still there whose reservation the pod was given a toleration of."""
        for raw in reversed(pod.raw_tolerations):
            if not isinstance(raw, Mapping) or raw.get("key") != TAINT_PLANNED:
                continue
            if raw.get("operator", "Equal") != "Equal" or raw.get("effect") not in (None, "", TAINT_PLANNED_EFFECT):
                continue
            claim = self.claim(str(raw.get("value") or ""))
            if claim is not None and not claim.deleting:
                return claim.name
        return None

    def with_nominations(
        self, pods: list[Pod], existing: list[ExistingNode], *, live: set[str]
    ) -> tuple[list[Pod], list[ExistingNode]]:
        """Pods an earlier decision already placed on capacity still coming up keep their place:
        they are counted on that NodeClaim, not solved again (a re-pack could buy twice), as long as
        they still fit there. ``live``: the pods pending now (the places of the others are forgotten);
        the grace is worked out once, for this decision."""
        for key in [k for k in self.nominations if k not in live]:
            del self.nominations[key]
        self._grace = self.nomination_grace()
        index = {node.name: i for i, node in enumerate(existing)}
        held: dict[int, list[Pod]] = {}
        free: list[Pod] = []
        for pod in pods:
            claim_name = self.nominations.get(pod.key)
            node_name = self._claim_node_name(claim_name) if claim_name else None
            i = index.get(node_name) if node_name else None
            if i is None:
                self.nominations.pop(pod.key, None)
                free.append(pod)
            else:
                held.setdefault(i, []).append(pod)
        for i, nominated in held.items():
            kept, released = split_nominated(existing[i], nominated)
            if released:
                log.info(
                    "provisioner.nomination_released",
                    node=existing[i].name,
                    pods=len(released),
                    reason="other pods took the room planned for them",
                )
            for pod in released:
                self.nominations.pop(pod.key, None)
            free.extend(released)
            existing[i] = replace(existing[i], pods=(*existing[i].pods, *kept))
        return free, existing

    def nominate(self, plan: Plan, created: dict[str, str]) -> None:
        """Remember where the plan put each pod: new NodeClaims (plan name -> created name) and
        placements on in-flight or registering NodeClaims."""
        for node in plan.new_nodes:
            claim_name = created.get(node.name)
            if claim_name:
                planned = [key for key in node.pods if not is_virtual(key)]  # a placeholder is no pod
                for key in planned:
                    self.nominations[key] = claim_name
                log.debug("provisioner.planned", nodeclaim=claim_name, pods=planned)
        by_node_name = {
            c.node_name or c.name: c.name
            for c in [
                *self.ctx.cluster.claim_views().values(),
                *self.ctx.writer.in_flight(),
            ]
        }
        for node_name, keys in plan.existing_placements.items():
            claim_name = by_node_name.get(node_name)
            if claim_name and self._claim_node_name(claim_name):
                for key in keys:
                    self.nominations[key] = claim_name
