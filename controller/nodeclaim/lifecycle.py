"""The NodeClaim lifecycle controller: finalizer, launch, registration, initialization, timeouts.

Each reconcile asks the pure `decide()` for the next step, applies it, and asks again until the
answer is to wait. Waits are requeued for the next deadline (`add_after`), never polled; changes of
the NodeClaim, its Node or its NodeClass requeue at once. Only this controller calls
`CloudProvider.create`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from api.v1.conditions import INITIALIZED, LAUNCHED, READY, REGISTERED
from api.v1.labels import (
    ANNOTATION_REFUSED_OFFERINGS,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    TAINT_PLANNED,
    TAINT_PLANNED_EFFECT,
    TAINT_UNREGISTERED,
)
from controller.clock import format_seconds as fmt_seconds
from controller.clock import format_time, parse_time
from controller.cloudprovider.types import (
    CloudProviderError,
    CreateError,
    Instance,
    InsufficientCapacityError,
    NodeClassNotReadyError,
    OfferingId,
)
from controller.context import Context
from controller.kube.client import ConflictError, InvalidError, NotFoundError
from controller.kube.resources import NODECLAIMS, NODES
from controller.nodeclaim import metrics, opening
from controller.nodeclaim.decide import (
    AddFinalizer,
    Initialize,
    Launch,
    NominationProgress,
    NotInitialized,
    Register,
    SyncNode,
    TimedOut,
    Wait,
    decide,
    initialized_update,
    not_initialized_update,
)
from controller.nodeclaim.nodes import initialization_blockers
from controller.nodeclaim.opening import OPEN
from controller.scheduling.kubeconv import pod_requests
from controller.scheduling.resources import ONE_POD, Resources
from controller.state.deletion import delete_nodeclaim
from controller.state.informer import EventType
from controller.state.patches import ConditionUpdate, claim_status, escape, finalizer_patch, label_patch, matches
from controller.state.queue import WorkQueue
from controller.state.views import NodeClaimView, NodeView, PodView, newer

log = structlog.get_logger()

MAX_STEPS = 12
# how long one count of the planned pods not nominated yet serves every closed Node asking
CLOSED_MEMO_SECONDS = 0.1
CONFLICT_RETRY_SECONDS = 0.5
# A reserved Node whose own planned pods are all bound keeps its reservation this long at most while
# pods planned on other Nodes still wait: taking its `joiner.sh/planned` taint off makes it a Node
# every pending pod tolerates, so kube-scheduler tries again each pod its taints refused, and each
# try that fails (no room there) writes the pod's status inside its scheduling loop before the next.
# Measured in the race's GPU burst with a Node before it: the first reservation to end moved 131
# pending pods into kube-scheduler's active queue at once, and it bound nothing for 2 s.
RESERVE_HOLD_SECONDS = 30.0
LAUNCH_RETRY_BASE_SECONDS = 2.0
LAUNCH_RETRY_MAX_SECONDS = 60.0
_WELL_KNOWN = (LABEL_INSTANCE_TYPE, LABEL_ZONE, LABEL_CAPACITY_TYPE)


def refusals_patch(claim: NodeClaimView, refused: tuple[OfferingId, ...], *, at: datetime) -> list[dict[str, Any]]:
    """JSON patch recording the offerings that refused this NodeClaim's launch (and when)."""
    value = json.dumps(
        {"at": format_time(at), "offerings": [f"{o.instance_type}/{o.zone}/{o.capacity_type}" for o in refused]},
        separators=(",", ":"),
    )
    if (claim.raw.get("metadata") or {}).get("annotations") is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION_REFUSED_OFFERINGS: value}}]
    return [{"op": "add", "path": f"/metadata/annotations/{escape(ANNOTATION_REFUSED_OFFERINGS)}", "value": value}]


def refusals_of(claim: NodeClaimView) -> tuple[datetime, tuple[OfferingId, ...]] | None:
    """What ``refusals_patch`` recorded, or None (absent or unreadable)."""
    text = claim.annotations.get(ANNOTATION_REFUSED_OFFERINGS)
    if not text:
        return None
    try:
        data = json.loads(str(text))
        at = parse_time(data["at"])
        offerings = tuple(OfferingId(*str(o).split("/")) for o in data["offerings"] if str(o).count("/") == 2)
    except (ValueError, KeyError, TypeError):
        return None
    return (at, offerings) if at is not None else None


def _relevant_node_change(node: NodeView, old: NodeView | None) -> bool:
    """Skip heartbeats: only labels, taints, Ready, allocatable, finalizers, owners or deletion matter."""
    if old is None:
        return True

    def view(n: NodeView) -> tuple[Any, ...]:
        ready = n.condition("Ready")
        return (
            n.labels,
            n.finalizers,
            n.owner_uids,
            n.deletion_timestamp,
            n.provider_id,
            n.taints,
            n.allocatable,
            ready.status if ready is not None else None,
        )

    return view(node) != view(old)


@dataclass(frozen=True, slots=True)
class ClosedPlan:
    """The plan's closed Nodes, counted once for all of them."""

    unnominated: int  # pending pods planned on a closed Node (or one with no Node yet), not nominated to it
    blocked: dict[str, int]  # every closed NodeClaim -> waiting pods it opens after (`opening.blocked`)


class LifecycleController:
    def __init__(self, ctx: Context, *, workers: int = 48) -> None:
        self.ctx = ctx
        self.queue = WorkQueue(name="nodeclaim-lifecycle", clock=ctx.clock)
        self._workers = workers
        self._latest: dict[str, NodeClaimView] = {}  # what our own writes returned, until the cache catches up
        self._latest_nodes: dict[str, NodeView] = {}
        self._launch_failures: dict[str, int] = {}
        self._deleted: set[str] = set()  # uids we deleted, until the cache shows the deletion
        self._closed_memo: tuple[float, ClosedPlan] | None = None
        self._shapes_memo: tuple[float, int, dict[str, frozenset[Resources]]] | None = None
        self._requests: dict[str, tuple[str | None, Resources]] = {}  # pod key -> (uid, requests)
        self._progress = NominationProgress()
        self._bound_since: dict[str, float] = {}  # reserved NodeClaim -> when its own planned pods were all bound

    # --- wiring ------------------------------------------------------------------------------

    async def run(self) -> None:
        cluster = self.ctx.cluster
        cluster.subscribe_views("NodeClaim", self._on_claim)
        cluster.subscribe_views("Node", self._on_node)
        cluster.subscribe_views("Pod", self._on_pod)
        cluster.subscribe("KWOKNodeClass", self._on_nodeclass)
        cluster.subscribe("EC2NodeClass", self._on_nodeclass)
        cluster.subscribe("GCENodeClass", self._on_nodeclass)
        cluster.subscribe("AKSNodeClass", self._on_nodeclass)
        await cluster.wait_synced()
        self.remember_refusals()
        for name in list(cluster.claim_views()):
            self.queue.add(name)
        await self.queue.run(self.reconcile, workers=self._workers)

    def remember_refusals(self) -> int:
        """At start-up: the offerings that refused a launch within the unavailable-offering TTL (as
        the NodeClaims record them) are unavailable again for the rest of it, so a restart does not
        let consolidation or the provisioner try them at once. Returns how many were marked."""
        now = self.ctx.clock.now()
        ttl = self.ctx.settings.unavailable_offering_ttl_seconds
        marked = 0
        for claim in self.ctx.cluster.claim_views().values():
            refused = refusals_of(claim)
            if refused is None:
                continue
            at, offerings = refused
            left = ttl - (now - at).total_seconds()
            if left <= 0:
                continue
            for offering in offerings:
                if not self.ctx.unavailable.is_unavailable(offering):
                    self.ctx.unavailable.mark(offering, ttl_seconds=left)
                    marked += 1
        if marked:
            log.info("nodeclaim.refusals_remembered", offerings=marked, reason="recorded on NodeClaims within the TTL")
        return marked

    def _on_claim(self, etype: EventType, claim: NodeClaimView, old: NodeClaimView | None) -> None:
        if etype == "DELETED":
            self._forget(claim.name, claim.uid)
            return
        self.queue.add(claim.name)

    def _on_node(self, etype: EventType, node: NodeView, old: NodeView | None) -> None:
        if etype == "MODIFIED" and not _relevant_node_change(node, old):
            return
        name = node.name
        if etype == "DELETED":
            self._latest_nodes.pop(name, None)
        claim = self.ctx.cluster.claim_views().get(name)
        if claim is not None and claim.provider_id in (None, node.provider_id):
            self.queue.add(name)
            return
        if node.provider_id:
            owner = self.ctx.cluster.claim_view_for_node(node)
            if owner is not None:
                self.queue.add(owner.name)

    def _on_pod(self, etype: EventType, pod: PodView, old: PodView | None) -> None:
        # a pod planned on a reserved Node bound or went: the reservation may end
        if not self.ctx.planned.reserve:
            return
        if etype != "DELETED" and (old is None or old.node_name or not pod.node_name):
            return
        claim = self.ctx.planned.claim_of(pod.key)
        if claim is not None:
            self.queue.add(claim)

    def _on_nodeclass(self, etype: EventType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if etype == "DELETED":
            return
        name = obj["metadata"]["name"]
        for claim in self.ctx.cluster.claim_views().values():
            if claim.node_class == name and not claim.launched:
                self.queue.add(claim.name)

    def _forget(self, name: str, uid: str | None = None) -> None:
        self._latest.pop(name, None)
        self._launch_failures.pop(name, None)
        self.ctx.planned.kept_off.forget(name)
        self._bound_since.pop(name, None)
        if uid:
            self._deleted.discard(uid)

    # --- reading -----------------------------------------------------------------------------

    def _claim(self, name: str) -> NodeClaimView | None:
        cached = self.ctx.cluster.claim_views().get(name)
        if cached is None:
            self._forget(name)
            return None
        mine = self._latest.get(name)
        best = newer(mine, cached)
        if best is cached:
            self._latest.pop(name, None)
        return best

    def _node(self, claim: NodeClaimView) -> NodeView | None:
        cached = self.ctx.cluster.node_view_for_claim(claim)
        if cached is None:
            mine = self._latest_nodes.get(claim.name)
            if mine is not None and claim.provider_id and mine.provider_id == claim.provider_id:
                return mine
            return None
        name = cached.name
        best = newer(self._latest_nodes.get(name), cached)
        if best is cached:
            self._latest_nodes.pop(name, None)
        return best

    def _unnominated(self, claim: NodeClaimView, node: NodeView | None) -> int:
        """Pending pods planned on a Node that has not opened yet, this one or another, and not
        nominated to it yet (at least 1 while the provisioner is still writing a plan: its pods are
        not known yet). The plan's Nodes open only once all are nominated: before that, the tries
        of kube-scheduler that every opening sets off clear the nominations of the pods whose Nodes
        are still closed, and the pods whose nominations are missing when their Node opens leave
        their room to others (measured in the race at 1,000 pods: Nodes that opened once their own
        pods were nominated bought 12 NodeClaims for a plan of 11 in 2 of 3 runs; waiting for all,
        11 in each of 2)."""
        if node is None or not node.has_taint(TAINT_UNREGISTERED):
            return 0
        reservable = self._reservable(claim)
        if self.ctx.planned.writing:
            # its pods are known (published as its NodeClaim was written): with reservations it may open
            return 0 if reservable and self.ctx.planned.on(claim.name) else 1
        if not self.ctx.planned.on(claim.name):
            return 0  # bought for no pending pod (a gang, a replacement): opens at registration
        if reservable:
            return 0  # it opens reserved to its pods: no other pod may take their room meanwhile
        plan = self._closed(claim.name)
        return plan.unnominated if claim.name in plan.blocked else 1

    def _blocked_by(self, claim: NodeClaimView, node: NodeView | None) -> int:
        """The pods waiting for other planned Nodes whose place this Node's free room could take,
        so it opens after theirs (`controller.nodeclaim.opening`): a pod whose own Node is closed
        fails there when kube-scheduler tries it, and binds in any open room it fits."""
        if node is None or not node.has_taint(TAINT_UNREGISTERED) or self.ctx.planned.writing:
            return 0
        if not self.ctx.planned.on(claim.name) or self._reservable(claim):
            return 0
        return self._closed(claim.name).blocked.get(claim.name, 0)

    def _reservable(self, claim: NodeClaimView) -> bool:
        cluster = self.ctx.cluster
        return self.ctx.planned.reservable(claim, cluster.daemonsets, cluster.node_view_for_claim(claim))

    def _reserved(self, claim: NodeClaimView, node: NodeView | None) -> int | None:
        """With reservations on: the pending pods planned on this NodeClaim that its `joiner.sh/planned`
        taint keeps the room for (pods whose toleration the cluster refused are nominated instead, and
        not waited for); once there are none, 1 while its free room would fit a pending pod planned on
        another Node; while the provisioner is still writing a plan, at least 1 for a Node that is
        reserved already (its new pods are not known yet). None: reservations off."""
        planned = self.ctx.planned
        if not self._reservable(claim):
            return None
        if planned.writing and node is not None and node.has_taint(TAINT_PLANNED):
            return 1
        cluster = self.ctx.cluster
        if not planned.published and node is not None and node.has_taint(TAINT_PLANNED):
            # joiner restarted and has not planned yet: the pods still pending with this Node's
            # toleration are the ones it was reserved to (the plan in memory went with the process)
            return sum(
                1
                for pod in cluster.pod_views()
                if pod.waiting_for_node
                and pod.tolerates(key=TAINT_PLANNED, effect=TAINT_PLANNED_EFFECT, value=claim.name)
            )
        count = sum(1 for _pod in self._waiting(claim.name, tolerated_only=True))
        if count:
            self._bound_since.pop(claim.name, None)
        elif node is not None and node.has_taint(TAINT_PLANNED):
            # its own pods are bound: the room left over stays reserved while a pod planned on another
            # Node, still pending, would fit there (kube-scheduler may try it before its own Node takes
            # it, and that Node would be left with its room unused, or empty)
            room = self._room(node, (), self._requests)
            others = [shapes for other, shapes in self._pending_shapes().items() if other != claim.name]
            if any(shape.fits_in(room) for shapes in others for shape in shapes):
                return 1
            if others:
                # and, for a while, as long as any pod planned elsewhere waits (RESERVE_HOLD_SECONDS)
                now = self.ctx.clock.monotonic()
                since = self._bound_since.setdefault(claim.name, now)
                if now - since < RESERVE_HOLD_SECONDS:
                    return 1
        return count

    def _waiting(self, claim: str, *, tolerated_only: bool = False) -> Iterator[PodView]:
        """The pods planned on ``claim`` still to be placed (``tolerated_only``: not those whose
        toleration the cluster refused)."""
        planned = self.ctx.planned
        for key in planned.on(claim):
            if tolerated_only and key in planned.untolerated:
                continue
            pod = self.ctx.cluster.pod_view(key)
            if pod is not None and pod.waiting_for_node:
                yield pod

    def _pending_shapes(self) -> dict[str, frozenset[Resources]]:
        """Per NodeClaim of the plan, the requests (with a pod slot) of its pending pods (not those whose
        toleration the cluster refused: two reserved Nodes would otherwise each wait for the other's
        pods, which can enter neither), counted at most every CLOSED_MEMO_SECONDS for all the reserved
        Nodes asking."""
        now = self.ctx.clock.monotonic()
        memo = self._shapes_memo
        if memo is not None and now - memo[0] < CLOSED_MEMO_SECONDS and memo[1] == self.ctx.planned.version:
            return memo[2]
        previous = self._requests  # what is made again from it is kept: the pods gone are dropped
        self._requests = {}
        found: dict[str, frozenset[Resources]] = {}
        for name in self.ctx.planned.claims():
            # (not the pods nominated instead of tolerated: no reservation waits for them)
            shapes = {self._requests_of(pod, previous) for pod in self._waiting(name, tolerated_only=True)}
            if shapes:
                found[name] = frozenset(shapes)
        self._shapes_memo = (now, self.ctx.planned.version, found)
        return found

    def _closed(self, asking: str) -> ClosedPlan:
        """The plan's closed Nodes, judged together at most every CLOSED_MEMO_SECONDS (every closed
        Node asks, each time anything it reads changes), and again when ``asking`` (a closed
        planned NodeClaim) is not in the last judgement (it was not in the cache yet). Not in it
        even then: it waits for the cache."""
        now = self.ctx.clock.monotonic()
        memo = self._closed_memo
        if memo is not None and now - memo[0] < CLOSED_MEMO_SECONDS and asking in memo[1].blocked:
            return memo[1]
        cluster = self.ctx.cluster
        claims = cluster.claim_views()
        count = 0
        closed: dict[str, NodeView | None] = {}  # closed NodeClaim -> its Node (None: none yet)
        waiting: list[tuple[str, PodView]] = []  # (claim, or OPEN, pending pod that may go elsewhere)
        nominated: dict[str, list[PodView]] = {}  # Node -> the planned pods nominated to it
        for name in self.ctx.planned.claims():
            other = claims.get(name)
            if other is None or other.deleting:
                continue
            if self._reservable(other):
                # reserved to its pods: none of them is waiting for a nomination, but each may still
                # bind in room nobody holds (a Node opened without a reservation) until it is bound
                waiting += ((OPEN, pod) for pod in self._waiting(name))
                continue
            other_node = cluster.node_view_for_claim(other)
            is_open = other_node is not None and not other_node.has_taint(TAINT_UNREGISTERED)
            want = other_node.name if other_node is not None else None
            if not is_open:
                closed[name] = other_node
            for key in self.ctx.planned.on(name):
                pod = cluster.pod_view(key)
                if pod is None or not pod.waiting_for_node:
                    continue
                if pod.nominated_node_name:
                    nominated.setdefault(pod.nominated_node_name, []).append(pod)
                if is_open:
                    if pod.nominated_node_name != want:
                        waiting.append((OPEN, pod))
                    continue
                count += want is None or pod.nominated_node_name != want
                waiting.append((name, pod))
        if count == 0:
            # every closed Node has its pods nominated: which of them open now
            requests = self._requests
            self._requests = {}
            rooms = {
                name: None if n is None else self._room(n, nominated.get(n.name, ()), requests)
                for name, n in closed.items()
            }
            blocked = opening.blocked(
                rooms, (opening.Waiting(c, self._requests_of(pod, requests)) for c, pod in waiting)
            )
        else:
            blocked = dict.fromkeys(closed, 0)  # all wait for the nominations first
        plan = ClosedPlan(unnominated=count, blocked=blocked)
        self._closed_memo = (now, plan)
        self._progress.seconds_since(plan=self.ctx.planned.version, count=count, now=now)
        return plan

    def _requests_of(self, pod: PodView, previous: dict[str, tuple[str | None, Resources]]) -> Resources:
        """A pending pod's requests as kube-scheduler counts them, with its pod slot (made once
        per pod: the spec's requests of a pending pod do not change)."""
        hit = previous.get(pod.key) or self._requests.get(pod.key)
        if hit is not None and hit[0] == pod.uid:
            self._requests[pod.key] = hit
            return hit[1]
        try:
            requests = pod_requests(pod.raw.get("spec") or {}) + ONE_POD
        except ValueError:
            requests = ONE_POD  # kube-scheduler would refuse it anyway: count it as fitting anywhere
        self._requests[pod.key] = (pod.uid, requests)
        return requests

    def _room(
        self, node: NodeView, nominated: Iterable[PodView], requests: dict[str, tuple[str | None, Resources]]
    ) -> Resources:
        """The free room kube-scheduler sees on a Node: allocatable, less the pods bound there and
        the pending pods nominated there."""
        try:
            room = Resources.parse(node.allocatable)
        except ValueError:
            return Resources()
        for pod in self.ctx.cluster.pod_views_on_node(node.name):
            if not pod.is_terminal:
                room = room - self._requests_of(pod, requests)
        for pod in nominated:
            room = room - self._requests_of(pod, requests)
        return room

    def _since_progress(self) -> float:
        """Seconds since the planned pods not nominated yet last fell to a new low."""
        return self.ctx.clock.monotonic() - self._progress.at

    def _opens(self, claim: NodeClaimView, node: NodeView | None) -> bool:
        """Whether syncing ``node`` now takes its `joiner.sh/unregistered` taint off a Node planned for
        pending pods (`decide` keeps it on while any planned pod is not nominated yet)."""
        return (
            node is not None
            and node.has_taint(TAINT_UNREGISTERED)
            and bool(self.ctx.planned.on(claim.name))
            and self._unnominated(claim, node) == 0
            and self._blocked_by(claim, node) == 0
        )

    # --- reconcile ---------------------------------------------------------------------------

    async def reconcile(self, name: str) -> float | None:
        try:
            return await self._reconcile(name)
        except (ConflictError, InvalidError) as err:
            # A concurrent writer won (resourceVersion or a JSON-patch test): retry on a fresh cache.
            log.debug("nodeclaim.write_conflict", nodeclaim=name, error=str(err))
            self._latest.pop(name, None)
            return CONFLICT_RETRY_SECONDS
        except NotFoundError:
            self._forget(name)
            return None

    async def _reconcile(self, name: str) -> float | None:
        for _ in range(MAX_STEPS):
            claim = self._claim(name)
            if claim is None or claim.uid in self._deleted:
                return None  # gone, or deleted by us a moment ago and the cache has not seen it yet
            node = self._node(claim)
            reserved = self._reserved(claim, node)
            decision = decide(
                claim=claim,
                node=node,
                now=self.ctx.clock.now(),
                settings=self.ctx.settings,
                unnominated=self._unnominated(claim, node),
                blocked_by=self._blocked_by(claim, node),
                since_progress=self._since_progress(),
                reserved=reserved,
            )
            if isinstance(decision, Wait):
                return decision.seconds
            if isinstance(decision, AddFinalizer):
                self._latest[name] = NodeClaimView.of(
                    await self.ctx.client.patch(NODECLAIMS, name, finalizer_patch(claim, add=True), patch_type="json")
                )
            elif isinstance(decision, Launch):
                retry = await self._launch(claim, decision)
                if retry is not None:
                    return retry if retry > 0 else None
            elif isinstance(decision, SyncNode):
                opens = not self._reservable(claim) and self._opens(claim, node)
                judged = self._closed_memo[1] if self._closed_memo is not None else None
                if opens:
                    # the planned Nodes open together: the others' patches go out with this one,
                    # not at their next look (kube-scheduler tries every pending pod on each Node
                    # that opens, and clears the nomination of each pod whose Node is still closed)
                    for other in self.ctx.planned.claims():
                        if other != name:
                            self.queue.add(other)
                updated = NodeView.of(
                    await self.ctx.client.patch(NODES, decision.node, list(decision.patch), patch_type="json")
                )
                self._latest_nodes[decision.node] = updated
                if (
                    node is not None
                    and node.has_taint(TAINT_UNREGISTERED)
                    and not updated.has_taint(TAINT_UNREGISTERED)
                ):
                    log.debug(
                        "nodeclaim.opened",
                        nodeclaim=name,
                        node=decision.node,
                        planned=len(self.ctx.planned.on(name)),
                        reserved=updated.has_taint(TAINT_PLANNED),
                        # what the opening was judged on: the plan's closed Nodes, and how many of them
                        # the same judgement let open (for `hack.bench.race --explain` and the like)
                        closed=len(judged.blocked) if opens and judged is not None else None,
                        free_to_open=sum(1 for n in judged.blocked.values() if n == 0)
                        if opens and judged is not None
                        else None,
                    )
                elif node is not None and node.has_taint(TAINT_PLANNED) and not updated.has_taint(TAINT_PLANNED):
                    if claim.initialized or not reserved:
                        # every pod planned there is bound (kube-scheduler binds to a Node kwok or
                        # the kubelet has not marked Ready yet): nothing was given up
                        log.debug("nodeclaim.reservation_ended", nodeclaim=name, node=decision.node)
                    else:
                        # something the planned pods need first is kept off by the reservation itself
                        log.warning(
                            "nodeclaim.reservation_ended_uninitialized",
                            nodeclaim=name,
                            node=decision.node,
                            blockers=[m for _r, m in initialization_blockers(claim, updated)],
                            reason="not Initialized while reserved: a DaemonSet the Node needs may not tolerate "
                            "joiner.sh/planned; its pods are nominated instead",
                        )
            elif isinstance(decision, Register):
                assert node is not None  # decide() registers only a Node it was given
                await self._register(claim, node)
            elif isinstance(decision, Initialize):
                await self._initialize(claim, decision.node)
            elif isinstance(decision, NotInitialized):
                await self._write_status(claim, updates=not_initialized_update(decision.reason, decision.message))
                log.info(
                    "nodeclaim.not_initialized",
                    nodeclaim=name,
                    reason=decision.reason,
                    detail=decision.message,
                )
            elif isinstance(decision, TimedOut):
                await self._time_out(claim, decision)
                return None
        return CONFLICT_RETRY_SECONDS  # still moving: continue on the next pass

    # --- steps -------------------------------------------------------------------------------

    async def _write_status(
        self, claim: NodeClaimView, *, updates: list[ConditionUpdate], extra: dict[str, Any] | None = None
    ) -> NodeClaimView:
        body = {
            "metadata": {"resourceVersion": claim.resource_version or None},
            "status": {
                **(extra or {}),
                **claim_status(claim.raw, updates, now=self.ctx.clock.now()),
            },
        }
        written = NodeClaimView.of(await self.ctx.client.patch(NODECLAIMS, claim.name, body, subresource="status"))
        self._latest[claim.name] = written
        return written

    def _elapsed_since_creation(self, claim: NodeClaimView) -> float:
        created = claim.created
        return 0.0 if created is None else max(0.0, (self.ctx.clock.now() - created).total_seconds())

    async def _launch(self, claim: NodeClaimView, decision: Launch) -> float | None:
        """Launch; None to continue with the next step, seconds to retry later, or 0 to stop."""
        name, nodepool = claim.name, claim.nodepool
        try:
            instance = await self.ctx.cloud.create(claim.raw)
        except InsufficientCapacityError as err:
            for offering in err.offerings:
                self.ctx.unavailable.mark(offering)
            metrics.LAUNCH_FAILURES.labels(nodepool, err.reason).inc()
            ttl = fmt_seconds(self.ctx.settings.unavailable_offering_ttl_seconds)
            what = "Insufficient capacity" if err.reason == "InsufficientCapacity" else err.reason
            message = (
                f"{what}: {err}. Marked {len(err.offerings)} offering(s) unavailable for "
                f"{ttl}; deleting the NodeClaim so its pods are provisioned again elsewhere"
            )
            log.warning(
                "nodeclaim.launch_failed",
                nodeclaim=name,
                nodepool=nodepool,
                reason=err.reason,
                offerings=[f"{o.instance_type}/{o.zone}/{o.capacity_type}" for o in err.offerings],
            )
            if err.quota and nodepool:  # the user must raise a quota: say so where they look, the NodePool
                self.ctx.unavailable.note_quota(nodepool, reason=err.reason, message=str(err))
                pool = self.ctx.cluster.nodepools().get(nodepool)
                if pool is not None:
                    await self.ctx.events.emit(pool, reason=err.reason, message=str(err), type="Warning")
            await delete_nodeclaim(self.ctx, claim, reason=err.reason, message=message)
            self._deleted.add(str(claim.uid))  # the cache may lag: no second attempt
            return 0
        except NodeClassNotReadyError as err:
            return await self._launch_failed(claim, decision, reason="NodeClassNotReady", message=str(err))
        except CreateError as err:
            return await self._launch_failed(claim, decision, reason=err.reason, message=str(err))
        except CloudProviderError as err:
            return await self._launch_failed(claim, decision, reason="LaunchFailed", message=str(err))
        await self._launched(claim, instance, nodepool=nodepool)
        return None

    async def _launch_failed(self, claim: NodeClaimView, decision: Launch, *, reason: str, message: str) -> float:
        name, nodepool = claim.name, claim.nodepool
        failures = self._launch_failures.get(name, 0) + 1
        self._launch_failures[name] = failures
        retry = min(LAUNCH_RETRY_MAX_SECONDS, LAUNCH_RETRY_BASE_SECONDS * 2.0 ** (failures - 1))
        retry = round(max(0.5, min(retry, decision.remaining)), 3)
        metrics.LAUNCH_FAILURES.labels(nodepool, reason).inc()
        log.warning(
            "nodeclaim.launch_failed",
            nodeclaim=name,
            nodepool=nodepool,
            reason=reason,
            detail=message,
            retry_in=retry,
        )
        update = ConditionUpdate(LAUNCHED, "False", reason, message)
        if not matches(claim, update):
            await self._write_status(claim, updates=[update])
            await self.ctx.events.emit(claim.raw, reason=reason, message=message, type="Warning")
        return retry

    async def _launched(self, claim: NodeClaimView, instance: Instance, *, nodepool: str) -> None:
        name = claim.name
        self._launch_failures.pop(name, None)
        updates = [
            ConditionUpdate(
                LAUNCHED,
                "True",
                "Launched",
                f"{instance.instance_type} ({instance.capacity_type}) in {instance.zone} at ${instance.price:.4f}/h",
            )
        ]
        for ctype, reason in (
            (REGISTERED, "AwaitingNode"),
            (INITIALIZED, "AwaitingNode"),
            (READY, "AwaitingNode"),
        ):
            if claim.condition(ctype) is None:
                updates.append(ConditionUpdate(ctype, "Unknown", reason, "the Node has not joined yet"))
        extra: dict[str, Any] = {
            "providerID": instance.provider_id,
            "imageID": instance.image_id or None,
            "capacity": dict(instance.capacity),
            "allocatable": dict(instance.allocatable),
        }
        # Labels first, status last: the providerID in the status is what commits the launch, so a
        # crash in between leaves a NodeClaim that simply launches (idempotently) again.
        labels = dict(instance.labels)
        labels.update({LABEL_INSTANCE_TYPE: instance.instance_type, LABEL_ZONE: instance.zone})
        labels[LABEL_CAPACITY_TYPE] = instance.capacity_type
        wanted = {k: v for k, v in labels.items() if v and (k in _WELL_KNOWN or k not in claim.labels)}
        patch = label_patch(claim, wanted)
        if instance.refused:
            # durable, so that a restarted controller still avoids them (``remember_refusals``)
            patch = [*patch, *refusals_patch(claim, instance.refused, at=self.ctx.clock.now())]
        if patch:
            claim = NodeClaimView.of(await self.ctx.client.patch(NODECLAIMS, name, patch, patch_type="json"))
            self._latest[name] = claim
        claim = await self._write_status(claim, updates=updates, extra={k: v for k, v in extra.items() if v})
        elapsed = self._elapsed_since_creation(claim)
        metrics.LAUNCHED.labels(nodepool).inc()
        metrics.STARTUP_SECONDS.labels(nodepool, "Launched").observe(elapsed)
        log.info(
            "nodeclaim.launched",
            nodeclaim=name,
            nodepool=nodepool,
            provider_id=instance.provider_id,
            instance_type=instance.instance_type,
            zone=instance.zone,
            capacity_type=instance.capacity_type,
            price=instance.price,
            reason="cheapest available offering among the NodeClaim's candidate instance types",
        )

    async def _register(self, claim: NodeClaimView, node: NodeView) -> None:
        """Registered=True and nodeName, with the initialization state in the same write."""
        name, node_name, nodepool = claim.name, node.name, claim.nodepool
        was_registered = claim.registered
        updates = [ConditionUpdate(REGISTERED, "True", "Registered", f"Node {node_name} joined the cluster")]
        blockers = initialization_blockers(claim, node)
        was_initialized = claim.initialized
        if blockers:
            updates += not_initialized_update(blockers[0][0], "; ".join(m for _, m in blockers))
        else:
            updates += initialized_update(node_name)
        claim = await self._write_status(claim, updates=updates, extra={"nodeName": node_name})
        if not was_registered:
            launched_at = claim.transition_time(LAUNCHED)
            since_launch = (self.ctx.clock.now() - launched_at).total_seconds() if launched_at else 0.0
            metrics.REGISTERED.labels(nodepool).inc()
            metrics.STARTUP_SECONDS.labels(nodepool, "Registered").observe(self._elapsed_since_creation(claim))
            log.info(
                "nodeclaim.registered",
                nodeclaim=name,
                nodepool=nodepool,
                node=node_name,
                seconds_since_launch=round(since_launch, 3),
                reason="a Node with the NodeClaim's providerID joined; unregistered taint removed",
            )
        if not blockers and not was_initialized:
            self._record_initialized(claim, node_name)

    async def _initialize(self, claim: NodeClaimView, node_name: str) -> None:
        was_initialized = claim.initialized
        claim = await self._write_status(claim, updates=initialized_update(node_name))
        if not was_initialized:
            self._record_initialized(claim, node_name)

    def _record_initialized(self, claim: NodeClaimView, node_name: str) -> None:
        nodepool = claim.nodepool
        elapsed = self._elapsed_since_creation(claim)
        metrics.INITIALIZED.labels(nodepool).inc()
        metrics.STARTUP_SECONDS.labels(nodepool, "Initialized").observe(elapsed)
        log.info(
            "nodeclaim.initialized",
            nodeclaim=claim.name,
            nodepool=nodepool,
            node=node_name,
            seconds_since_creation=round(elapsed, 3),
            reason="Node Ready, startup taints gone, requested resources in allocatable",
        )

    async def _time_out(self, claim: NodeClaimView, decision: TimedOut) -> None:
        name, nodepool = claim.name, claim.nodepool
        message = (
            f"{decision.step} timed out after {fmt_seconds(decision.elapsed)} "
            f"(limit {fmt_seconds(decision.limit)}): {decision.message}; deleting the NodeClaim"
        )
        metrics.TIMED_OUT.labels(nodepool, decision.step).inc()
        log.warning(
            "nodeclaim.timed_out",
            nodeclaim=name,
            nodepool=nodepool,
            step=decision.step,
            elapsed=round(decision.elapsed, 3),
            limit=decision.limit,
            reason=decision.message,
        )
        await delete_nodeclaim(self.ctx, claim, reason=decision.reason, message=message)
        self._deleted.add(str(claim.uid))  # the cache may lag: no second attempt
