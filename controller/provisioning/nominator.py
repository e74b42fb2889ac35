"""Tell kube-scheduler the plan: each planned pod's `status.nominatedNodeName`.

The solver puts every pending pod on one node of its plan. kube-scheduler does not know that plan:
when several new nodes become Ready together, its default scoring sends a pod to the emptiest
node, which may be the node planned for another pod that then fits nowhere, and one more machine
is bought. Kubernetes lets a component other than the scheduler set a pending pod's
`status.nominatedNodeName` as the expected placement (KEP-5278, beta and on by default from 1.35):
the scheduler tries that node first, and counts the pod on it when it places any other pod of
equal or lower priority, so the room stays for the pod it was planned for.

This controller keeps that field equal to the plan, as `Provisioner` records it in its `Places`
(`places.py`: pod key -> NodeClaim):
- it is set as soon as the NodeClaim's Node exists. The Node stays closed to kube-scheduler (its
  `joiner.sh/unregistered` taint on) until the pods planned there are nominated to it (the
  lifecycle reads the plan from `ctx.planned`, see `controller.nodeclaim.decide`): nominated only
  once the Node was usable, as before, kube-scheduler gave the Node to whichever pending pods it
  tried first in the second or more the nominations took, and at 1,000 pods 916 of them bound off
  their planned node, and 23 NodeClaims were bought for a plan of 11;
- kube-scheduler clears it when it tries the pod and cannot place it (every try fails while the
  pod's Node is still closed); while the plan still holds, it is set again;
- when the plan changes (the pod was re-planned elsewhere, or its nomination released), a value
  this controller wrote is cleared; a value written by someone else (the scheduler's preemption)
  is left alone;
- cleared on an open Node that no longer has room for the pod (others took it), it is not set
  again: kube-scheduler would clear it at its next try, and the provisioner plans the pod again;
- a cluster that refuses the write (an older apiserver, RBAC without `pods/status`) turns the
  feature off with one warning; provisioning goes on as before. A pod bound between the cache's
  view and the write is refused too (422, "already bound"): that is a race, not a refusal, and
  changes nothing (a 3,000-pod burst met it after 50 s, and nominations were off for the rest).

With reservations on (`Settings.reserve`, the default), a pod planned on a NodeClaim whose Node has
not opened yet, or opened reserved (the `joiner.sh/planned=<NodeClaim>` taint, see
`controller.nodeclaim.decide`), gets a toleration of that taint instead (one patch of the pod's
spec, once that Node would take the pod: opened reserved and Ready, with no other taint the pod
does not tolerate): kube-scheduler can then place it there and no pod planned elsewhere can take its room,
whatever order it tries the pods and Nodes in. Not earlier: the write makes kube-scheduler try the
pod at once, and a try that fails writes the pod's status inside its scheduling loop before the next
pod's try (a GPU burst's 156 Nodes were ready for seconds while kube-scheduler got through such
failures at 4 a second). A nomination only says
where to try first, and kube-scheduler clears it at every failed try, so pods tried while their own
Node was still closed bound in the room of others (docs/performance.md, "Why the waves cannot close
the race"). A toleration is never taken back (a pod's tolerations may only grow); it tolerates one
NodeClaim's taint, which goes once that NodeClaim's planned pods are bound. A pod whose toleration
the cluster refuses (an admission policy) is nominated instead; RBAC without `patch` on pods turns
reservations off with one warning, and the plan is told by nominations alone.

Pods are taken in the order kube-scheduler's queue takes them (priority, then oldest first: `rank`),
so the pod it tries next is the one most likely tolerated already.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from itertools import count

import structlog

from api.v1.labels import TAINT_PLANNED, TAINT_PLANNED_EFFECT, TAINT_UNREGISTERED
from controller import metrics
from controller.context import Context
from controller.kube.client import ApiError, NotFoundError
from controller.kube.resources import PODS
from controller.provisioning.nominations import split_nominated
from controller.provisioning.pacing import Pacer, Rule, Tally
from controller.scheduling.labels import LABEL_ZONE
from controller.state.informer import EventType
from controller.state.patches import nomination_patch, toleration_patch
from controller.state.queue import WorkQueue
from controller.state.views import NodeClaimView, NodeView, PodView, TaintRef

log = structlog.get_logger()
# nominations written at once. Each is one small status patch, but a burst needs thousands as soon as
# their nodes are Initialized, and kube-scheduler places a nominated pod by trying one node instead of
# all of them: with 8 at a time and the apiserver answering in 0.2-0.8 s under a 10,000-pod burst,
# the nominations trailed the nodes by minutes (5,600 written 200 s into the burst, all Initialized
# at 140 s) and kube-scheduler placed the pods it met un-nominated the slow way meanwhile.
WORKERS = 32
# a pod a crossed spread paces is looked at again this often until its turn comes
PACE_SECONDS = 0.5
TALLY_SECONDS = 1.0
# the taint effects kube-scheduler keeps pods off a Node for
_KEEPS_OFF = frozenset({"NoSchedule", "NoExecute"})

# the apiserver's answer to a nomination of a pod bound meanwhile (pkg/apis/core/validation)
ALREADY_BOUND = "may not be set on pods that are already bound"

NOMINATIONS_RACED = metrics.counter(
    "joiner_provisioner_nominations_raced_total",
    "Nominations refused because kube-scheduler had bound the pod meanwhile (nothing left to nominate).",
)
TOLERATIONS_WRITTEN = metrics.counter(
    "joiner_provisioner_reservation_tolerations_total",
    "Pending pods given the toleration of their planned Node's joiner.sh/planned taint, by result "
    "(written, refused: the pod is nominated instead).",
    ("result",),
)
NOMINATIONS_WRITTEN = metrics.counter(
    "joiner_provisioner_nominations_total",
    "Writes of a pending pod's status.nominatedNodeName, by action (set, cleared).",
    ("action",),
)


class Nominator:
    """Keeps `status.nominatedNodeName` of planned pods equal to the provisioner's plan."""

    def __init__(
        self,
        ctx: Context,
        *,
        nominations: Callable[[], Mapping[str, str]],
        claim: Callable[[str], NodeClaimView | None],
        told: Callable[[], None] = lambda: None,
        pacer: Callable[[], Pacer | None] = lambda: None,
    ) -> None:
        """`nominations()` gives pod key -> NodeClaim name; `claim(name)` the NodeClaim (cached or just
        created); `told()` is called after each toleration or nomination written; `pacer()` the plan's
        pacing of crossed spreads (`controller.provisioning.pacing`), if any."""
        self.ctx = ctx
        self._told = told
        self._pacer = pacer
        self._binds = 0  # binds of pods the pacer counts or paces so far
        # the pacer's counts, made again after a bind of a pod they count and at least every second
        self._tally: tuple[int, Pacer, Tally, float] | None = None
        # pods the pacer let through (their toleration or nomination may still be on its way: the
        # next look counts them, whichever worker it runs on) and pods it holds back for now
        self._let: set[str] = set()
        self._held: set[str] = set()
        self._nominations = nominations
        self._claim = claim
        # pods in the order kube-scheduler will try them (see `rank`)
        self.queue = WorkQueue(name="nominator", clock=ctx.clock, order=self.rank)
        self._arrival: dict[str, int] = {}  # pod key -> when this process first saw it (a sequence number)
        self._arrivals = count()
        self._written: dict[str, str] = {}  # pod key -> the node name this controller wrote
        self._tolerated: dict[str, str] = {}  # pod key -> the NodeClaim whose taint it was given a toleration of
        self.enabled = ctx.settings.nominate
        ctx.planned.reserve = self.enabled and ctx.settings.reserve

    # --- wiring ------------------------------------------------------------------------------
    async def run(self) -> None:
        if not self.enabled:
            return
        cluster = self.ctx.cluster
        cluster.subscribe_views("NodeClaim", self._on_claim)
        cluster.subscribe_views("Node", self._on_node)
        cluster.subscribe_views("Pod", self._on_pod)
        await cluster.wait_synced()
        for pod in cluster.pod_views():  # those cached before this subscribed, in the order they came
            if not pod.node_name:
                self._arrival.setdefault(pod.key, next(self._arrivals))
        await self.queue.run(self.reconcile, workers=WORKERS)

    def sync(self) -> None:
        """The plan changed: look at every pod it names and every pod this controller nominated."""
        if not self.enabled:
            return
        for key in {*self._nominations(), *self._written}:
            self.queue.add(key)

    def _on_claim(self, etype: EventType, obj: NodeClaimView, old: NodeClaimView | None) -> None:
        # the NodeClaim was Initialized (or learned where its Node is): its pods can be nominated
        if etype == "DELETED" or not self._nominations():
            return
        if old is not None and (obj.provider_id, obj.node_name, obj.initialized) == (
            old.provider_id,
            old.node_name,
            old.initialized,
        ):
            return
        name = obj.name
        for key, claim_name in self._nominations().items():
            if claim_name == name:
                self.queue.add(key)

    def _on_node(self, etype: EventType, obj: NodeView, old: NodeView | None) -> None:
        # a NodeClaim's Node joined: its planned pods can be nominated (before it opens to kube-scheduler);
        # its taints or readiness changed: it may take its planned pods now (given its toleration then)
        if etype == "DELETED" or (
            etype == "MODIFIED" and (old is None or (old.taints, old.ready) == (obj.taints, obj.ready))
        ):
            return
        claim = self.ctx.cluster.claim_view_for_node(obj)
        if claim is not None:
            for key in self.ctx.planned.on(claim.name):
                self.queue.add(key)

    def rank(self, key: str) -> tuple[int, float, int]:
        """Where kube-scheduler's queue has the pod: higher priority first, then the pods it has had
        longest (created first; in one second, the order the watch delivered them). Tolerations and
        nominations are written in this order. kube-scheduler tries the pods in its queue one after
        the other, and a try of a pod that does not tolerate its planned Node's reservation yet fails
        and costs it a status write before the next try. Written in the plan's order, the tolerations
        of a 3,000-pod burst met a kube-scheduler working through the oldest pods, untolerated, at 10
        to 20 failed tries a second, while 2,900 pods waited in its queue and most of them were already
        tolerated (bound only once every toleration was written, 10 s after their Nodes opened)."""
        pod = self.ctx.cluster.pod_view(key)
        if pod is None:
            return (0, 0.0, next(self._arrivals))  # gone: its reconcile forgets it
        spec = pod.raw.get("spec")
        priority = spec.get("priority") if isinstance(spec, dict) else None
        created = pod.created
        arrival = self._arrival.get(key)
        if arrival is None:  # bound, or not seen arriving: after the others of its second
            arrival = next(self._arrivals)
        return (
            -priority if isinstance(priority, int) else 0,
            created.timestamp() if created is not None else 0.0,
            arrival,
        )

    def _on_pod(self, etype: EventType, obj: PodView, old: PodView | None) -> None:
        pacer = self._pacer()
        newly_bound = obj.node_name and (old is None or not old.node_name)
        if pacer is not None and newly_bound and (obj.key in pacer.counted or obj.key in pacer.owns):
            self._binds += 1  # the pacer's counts moved
            if self._held:
                # a count the pacer waits on moved, or a held spread's own pod is bound: look at the
                # pods it holds again
                for key in self._held:
                    self.queue.add(key)
                self._held.clear()
        # arrivals are kept for pods waiting for a node only
        if etype == "DELETED" or obj.node_name:
            self._arrival.pop(obj.key, None)
            if etype == "DELETED":
                return
        elif etype == "ADDED":
            self._arrival.setdefault(obj.key, next(self._arrivals))
            return
        # kube-scheduler cleared (or someone changed) the field of a pod the plan places
        if old is None:
            return
        if obj.nominated_node_name == old.nominated_node_name:
            return
        key = obj.key
        if key not in self._written and key not in self._nominations():
            return
        if obj.nominated_node_name and obj.nominated_node_name == self._written.get(key):
            return  # this controller's own write coming back
        self.queue.add(key)

    def _open_node(self, key: str) -> NodeView | None:
        """The Node the plan puts the pod on, if kube-scheduler may place pods there now."""
        claim_name = self._nominations().get(key)
        claim = self._claim(claim_name) if claim_name is not None else None
        node = self.ctx.cluster.node_view_for_claim(claim) if claim is not None else None
        if node is None or node.deleting or node.has_taint(TAINT_UNREGISTERED):
            return None
        return node

    def _refused(self, pod: PodView, node: NodeView) -> bool:
        """Whether the pod no longer fits its open planned Node next to the pods bound there: other
        pods took its room, and kube-scheduler cleared the field because it tried the pod there. Set
        again, it is cleared again at the next try, until the provisioner, which sees the same, plans
        the pod again (``split_nominated``). Measured on the race's GPU workload (300 pods on 156
        planned machines): in the two of six runs where pods lost their room, 118 and 231 of the
        nominations written after their Node opened were for pods that then bound elsewhere (29 % and
        50 % more nomination writes in those runs); with this check, 1 to 5 in each of six runs."""
        cluster = self.ctx.cluster
        try:
            bound = [cluster.scheduling_pod(p) for p in cluster.pod_views_on_node(node.name) if not p.is_terminal]
            _kept, released = split_nominated(cluster.scheduling_node(node, pods=bound), [cluster.scheduling_pod(pod)])
        except ValueError:
            return False
        return bool(released)

    def _reserving(self, key: str) -> str | None:
        """The NodeClaim whose reservation the pod is planned into: one whose Node has not opened
        yet (it opens reserved while pods are planned there) or opened reserved. None: reservations
        are off, the cluster refused this pod's toleration, a DaemonSet keeps the NodeClaim from being
        reserved, or its Node is open to every pod."""
        planned = self.ctx.planned
        if not planned.reserve or key in planned.untolerated:
            return None
        claim_name = self._nominations().get(key)
        claim = self._claim(claim_name) if claim_name is not None else None
        if claim is None or claim.deleting:
            return None
        node = self.ctx.cluster.node_view_for_claim(claim)
        if not planned.reservable(claim, self.ctx.cluster.daemonsets, node):
            return None
        if node is None or node.has_taint(TAINT_UNREGISTERED) or node.has_taint(TAINT_PLANNED):
            return claim.name
        return None

    def _takes(self, pod: PodView, claim_name: str | None) -> bool:
        """Whether the pod's planned NodeClaim's Node would take it as soon as the pod tolerates that
        Node's reservation: the Node exists, it opened reserved (its `joiner.sh/unregistered` taint
        is gone), it is Ready (a pod bound before its kubelet runs waits for it anyway), and the pod
        tolerates every other taint that keeps pods off it: `node.kubernetes.io/not-ready`, which the
        apiserver's TaintNodesByCondition admission puts on a new Node and kube-controller-manager
        takes off once it is Ready (where that admission is off, the Ready condition is all there
        is), and a startup taint until its agent removes it."""
        claim = self._claim(claim_name) if claim_name is not None else None
        node = self.ctx.cluster.node_view_for_claim(claim) if claim is not None else None
        if node is None or node.deleting or not node.ready or node.has_taint(TAINT_UNREGISTERED):
            return False
        return all(
            t.effect not in _KEEPS_OFF
            or (t.key == TAINT_PLANNED and t.value == claim_name)
            or pod.tolerates(key=t.key, effect=t.effect, value=t.value)
            for t in node.taints
        )

    def _turn(self, key: str) -> bool:
        """Whether the pod may be told now (always, unless the plan paces it and it was not told yet)."""
        pacer = self._pacer()
        if pacer is None or key not in pacer.counted or key in self._let:
            return True
        tally = self._tally_of(pacer)
        if not pacer.turn(tally, key):
            return False
        self._let.add(key)  # before any await: the next look, on any worker, counts it as told
        pacer.let(tally, key)
        self._held.discard(key)
        return True

    def _tally_of(self, pacer: Pacer) -> Tally:
        """The pacer's counts, made once after each bind of a pod they count, for each new plan and at
        least every ``TALLY_SECONDS`` (pods bound that no plan placed), then kept up as pods are let
        through."""
        now = self.ctx.clock.monotonic()
        memo = self._tally
        if memo is not None and memo[0] == self._binds and memo[1] is pacer and now - memo[3] < TALLY_SECONDS:
            return memo[2]
        cluster = self.ctx.cluster

        def waiting(other: str) -> bool:
            pod = cluster.pod_view(other)
            return pod is not None and pod.waiting_for_node

        self._let = {k for k in self._let if waiting(k)}
        tally = pacer.tally(bound=self._bound, waiting=waiting, told=self._let)
        self._tally = (self._binds, pacer, tally, now)
        return tally

    def _bound(self, rule: Rule) -> Counter[str]:
        """The pods ``rule`` counts that are bound, per zone."""
        cluster = self.ctx.cluster
        nodes = cluster.node_views()
        found: Counter[str] = Counter()
        for pod in cluster.pod_views():
            if not pod.node_name or pod.is_terminal or pod.namespace != rule.namespace:
                continue
            node = nodes.get(pod.node_name)
            zone = node.labels.get(LABEL_ZONE) if node is not None else None
            if zone and rule.selector.matches(pod.labels):
                found[zone] += 1
        return found

    def wrote(self, key: str) -> str | None:
        """The node this controller last wrote as the pod's ``status.nominatedNodeName``, if any."""
        return self._written.get(key)

    # --- reconcile ---------------------------------------------------------------------------
    def desired(self, key: str) -> str | None:
        """The node the plan puts this pod on, once that Node exists."""
        claim_name = self._nominations().get(key)
        if claim_name is None:
            return None
        claim = self._claim(claim_name)
        if claim is None or claim.deleting:
            return None
        node = self.ctx.cluster.node_view_for_claim(claim)
        if node is None or node.deleting:
            return None
        return node.name

    async def reconcile(self, key: str) -> float | None:
        if not self.enabled:
            return None
        pod = self.ctx.cluster.pod_view(key)
        if pod is None or not pod.waiting_for_node:  # a nomination no longer means anything
            self._written.pop(key, None)
            self._tolerated.pop(key, None)
            self._let.discard(key)
            self._held.discard(key)
            return None
        reserving = self._reserving(key)
        taint = TaintRef(key=TAINT_PLANNED, effect=TAINT_PLANNED_EFFECT, value=reserving or "")
        untolerated = (
            reserving is not None
            and self._tolerated.get(key) != reserving
            and not pod.tolerates(key=taint.key, effect=taint.effect, value=taint.value)
        )
        if untolerated and not self._takes(pod, reserving):
            # not before its Node would take it: the toleration's write makes kube-scheduler try the
            # pod at once, and a try that fails writes the pod's status inside its scheduling loop
            # before it tries the next pod (the Node's events bring the pod back here)
            mine = self._written.get(key)
            if mine is not None and pod.nominated_node_name == mine:
                await self._write(pod, key, None)
            return None
        if not self._turn(key):
            # a crossed spread's count in its zone is ahead: told once a pod is bound, or in a moment
            log.debug("provisioner.paced", pod=key)
            self._held.add(key)
            return PACE_SECONDS
        if reserving is not None:
            if untolerated:
                await self._tolerate(pod, key, taint)
            mine = self._written.get(key)
            if mine is not None and pod.nominated_node_name == mine:
                await self._write(pod, key, None)  # a nomination of an earlier plan would hold room there
            return None
        current = pod.nominated_node_name
        want = self.desired(key)
        if want is not None:
            if current != want:
                node = self._open_node(key) if not current else None
                if node is not None and self._refused(pod, node):
                    return None  # the provisioner plans it again
                await self._write(pod, key, want)
            else:
                self._written[key] = want
            return None
        mine = self._written.get(key)
        if mine is not None and current == mine:
            await self._write(pod, key, None)
        else:
            self._written.pop(key, None)
        return None

    async def _tolerate(self, pod: PodView, key: str, taint: TaintRef) -> None:
        try:
            await self.ctx.client.patch(
                PODS, pod.name, toleration_patch(pod.raw, taint), namespace=pod.namespace, patch_type="json"
            )
        except NotFoundError:
            self._tolerated.pop(key, None)
            return
        except ApiError as err:
            if err.status == 403 and "cannot patch resource" in err.message:
                # RBAC: no pod of this cluster can be given the toleration; the plan is told by nominations
                self.ctx.planned.reserve = False
                log.warning("provisioner.reservations_disabled", pod=key, status=err.status, error=str(err))
                self.sync()
                return
            if err.status in (400, 403, 409, 422):
                # this pod's change refused (an admission policy, or its tolerations changed meanwhile):
                # it is nominated instead, and the reservation does not wait for it
                self.ctx.planned.untolerated.add(key)
                TOLERATIONS_WRITTEN.labels(result="refused").inc()
                log.info("provisioner.toleration_refused", pod=key, status=err.status, error=str(err))
                self.queue.add(key)
                return
            raise
        self._tolerated[key] = taint.value
        self._told()
        TOLERATIONS_WRITTEN.labels(result="written").inc()
        log.debug("provisioner.tolerated", pod=key, nodeclaim=taint.value)

    async def _write(self, pod: PodView, key: str, node: str | None) -> None:
        try:
            await self.ctx.client.patch(
                PODS,
                pod.name,
                nomination_patch(node),
                namespace=pod.namespace,
                subresource="status",
            )
        except NotFoundError:
            self._written.pop(key, None)
            return
        except ApiError as err:
            if err.status == 422 and ALREADY_BOUND in err.message:
                # kube-scheduler bound the pod between our cache's view and this write: the race a burst
                # makes many times a second, not a cluster that refuses the field
                self._written.pop(key, None)
                NOMINATIONS_RACED.inc()
                return
            if err.status in (403, 405, 422):
                # the cluster will not take it: plan fidelity falls back to the scheduler's own scoring
                self.enabled = False
                log.warning("provisioner.nominations_disabled", pod=key, status=err.status, error=str(err))
                return
            raise
        if node is None:
            self._written.pop(key, None)
            NOMINATIONS_WRITTEN.labels(action="cleared").inc()
        else:
            self._written[key] = node
            self._told()
            NOMINATIONS_WRITTEN.labels(action="set").inc()
        log.debug("provisioner.nominated", pod=key, node=node)
