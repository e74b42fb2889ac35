"""The one place NodeClaims are created, for every reason (provisioning, gang, consolidation, drift,
expiration, interruption, capacity).

A NodeClaim spends room under its NodePool's limits the moment it is written, while the cache
shows it only when its watch event arrives. So the writer owns what makes two deciders never spend
the same room: the lock under which a decision and its writes happen (a decider takes it before it
reads the cluster, and :meth:`NodeClaimWriter.create` refuses to write without it), and the list
of NodeClaims just created that every decision counts until the cache has shown them. It also owns
what is said about each creation: the ``joiner_nodeclaims_created_total`` metric, the price bought
and one ``nodeclaim.created`` log event. Deleting NodeClaims is :mod:`controller.state.deletion`;
launching them is the lifecycle controller's.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import structlog

from controller import metrics
from controller.clock import Clock
from controller.kube.client import ApiError, ConflictError, KubeClient, TransportError
from controller.kube.resources import NODECLAIMS
from controller.scheduling.model import NewNodeClaim
from controller.state.cluster import ClusterState
from controller.state.informer import EventType
from controller.state.recent import RecentClaims
from controller.state.views import NodeClaimView, Obj

log = structlog.get_logger()

CreateReason = Literal[
    "provisioning", "gang", "provisioningrequest", "consolidation", "drift", "expiration", "interruption", "capacity"
]
# NodeClaims written at once: the decision's writes share the apiserver with the launches and the
# tolerations they start; at 16, a GPU burst's 156 NodeClaims took 8-11 s to write (48: 6-10 s)
WRITE_CONCURRENCY: Final = 48

# A create without an answer (the connection broke, the apiserver restarts, 429 or 5xx) is sent again,
# under the same name, for up to a minute; waits double from half a second to 5 s
CREATE_RETRY_SECONDS: Final = 60.0
CREATE_RETRY_FIRST_WAIT: Final = 0.5
CREATE_RETRY_MAX_WAIT: Final = 5.0
NAME_TRIES: Final = 5  # names chosen here that someone else's NodeClaim already has, before giving up
# what the apiserver uses for generated names: no vowels, no look-alikes
_NAME_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_random = random.SystemRandom()


def random_suffix() -> str:
    """Five characters as the apiserver appends to a ``generateName``."""
    return "".join(_random.choice(_NAME_ALPHABET) for _ in range(5))


def _retryable(status: int) -> bool:
    """An answer that says nothing was decided: throttled, or the apiserver (or its storage) failed."""
    return status == 429 or status >= 500


# The metric's `reason` label keeps the values it had before there was one writer: disruption's
# replacements (consolidation, drift, expiration) are all `disruption`; the log line has the detail.
_METRIC_REASON: Final[Mapping[str, str]] = {
    "consolidation": "disruption",
    "drift": "disruption",
    "expiration": "disruption",
}
# The price bought is what was bought for pods with nowhere to go, not replacements of running nodes.
_PRICED: Final = frozenset({"provisioning", "gang", "provisioningrequest", "capacity"})

NODECLAIMS_CREATED = metrics.counter(
    "joiner_nodeclaims_created_total", "NodeClaims created, by NodePool and reason.", ("nodepool", "reason")
)
PRICE_CREATED = metrics.counter(
    "joiner_provisioner_price_per_hour_created_total",
    "Sum of the $/hour of the NodeClaims created for pods with nowhere to go (not replacements), by NodePool.",
    ("nodepool",),
)


@dataclass(frozen=True, slots=True)
class NewClaim:
    """One NodeClaim to write: the machine a decision planned, and the manifest that records it."""

    node: NewNodeClaim
    manifest: Obj


@dataclass(frozen=True, slots=True)
class Written:
    """What became of one :class:`NewClaim`: the NodeClaim as created (the manifest, when one of that
    name existed already), or why the apiserver refused it."""

    request: NewClaim
    claim: Obj | None
    error: str | None = None
    existed: bool = False
    tried: str = ""  # the name written under, when it failed (a generated one is chosen by the writer)

    @property
    def name(self) -> str:
        meta = (self.claim or self.request.manifest)["metadata"]
        return str(meta.get("name") or self.tried or meta.get("generateName") or "")


class NodeClaimWriter:
    def __init__(
        self,
        *,
        client: KubeClient,
        cluster: ClusterState,
        clock: Clock,
        concurrency: int = WRITE_CONCURRENCY,
        suffix: Callable[[], str] = random_suffix,
    ) -> None:
        self._client = client
        self._suffix = suffix
        self._cluster = cluster
        self._clock = clock
        self._concurrency = concurrency
        self._recent = RecentClaims()
        self._views: dict[str, tuple[Obj, NodeClaimView]] = {}  # name -> (the object, its view)
        # Held while deciding and writing new NodeClaims (a provisioning batch, a gang's attempt, a
        # disruption command's replacements), so two decisions never both count the same limit room.
        self.lock = asyncio.Lock()
        cluster.subscribe_views("NodeClaim", self._on_nodeclaim)

    def _on_nodeclaim(self, etype: EventType, claim: NodeClaimView, old: NodeClaimView | None) -> None:
        # the cache has shown it: from now on it counts (or, deleted already, does not) through the cache
        self._recent.discard(claim.name)

    # --- what a decision counts ------------------------------------------------------------------

    def _view(self, claim: Obj) -> NodeClaimView:
        """The view of a NodeClaim created here, made once per object: a burst asks for hundreds of
        them on every NodeClaim event (the capacity and provisioning controllers count them)."""
        name = str(claim["metadata"].get("name") or "")
        hit = self._views.get(name)
        if hit is not None and hit[0] is claim:
            return hit[1]
        view = NodeClaimView.of(claim)
        self._views[name] = (claim, view)
        return view

    def in_flight(self) -> list[NodeClaimView]:
        """NodeClaims created here that the cache has not shown yet."""
        pending = self._recent.pending(self._cluster.claim_views(), now=self._clock.monotonic())
        if len(self._views) > 2 * len(pending) + 64:  # forget the views of claims no longer pending
            keep = {str(c["metadata"].get("name") or "") for c in pending}
            self._views = {k: v for k, v in self._views.items() if k in keep}
        return [self._view(c) for c in pending]

    def just_created(self, name: str) -> NodeClaimView | None:
        """A NodeClaim created here lately, by name (it may be in the cache by now, or gone)."""
        claim = self._recent.get(name)
        return self._view(claim) if claim is not None else None

    def forget(self, name: str) -> None:
        """A NodeClaim created here is being deleted: no decision counts it any more."""
        self._recent.discard(name)

    # --- the write -------------------------------------------------------------------------------

    async def create(
        self,
        claims: Sequence[NewClaim],
        *,
        reason: CreateReason,
        on_written: Callable[[Written], None] | None = None,
        **fields: object,
    ) -> list[Written]:
        """Write ``claims`` (a few at a time) under the lock the caller holds since it started deciding;
        one outcome per claim, in order. ``on_written`` hears of each outcome as soon as it is known
        (the provisioner publishes each NodeClaim's pods before the others are written). ``fields`` go
        into each ``nodeclaim.created`` log event."""
        if not self.lock.locked():
            raise RuntimeError("NodeClaims are created under NodeClaimWriter.lock, taken before deciding")
        limit = asyncio.Semaphore(self._concurrency)

        async def one(request: NewClaim) -> Written:
            async with limit:
                written = await self._create_one(request, reason=reason, fields=fields)
            if on_written is not None:
                on_written(written)
            return written

        return list(await asyncio.gather(*(one(c) for c in claims)))

    async def _create_one(self, request: NewClaim, *, reason: CreateReason, fields: Mapping[str, object]) -> Written:
        """One NodeClaim, written exactly once.

        A NodeClaim that asks for a generated name gets one chosen here (``<nodepool>-`` and five
        characters, as the apiserver would choose): a create whose answer is lost (the apiserver
        committed it and went away before answering, as a restarting apiserver does) is sent again
        under the same name, and a 409 then says the first try wrote it. With ``generateName`` the
        second try would create a second machine for the same pods, and the decision after it a
        third (measured in the fault suite: an apiserver restart during a write left a NodeClaim
        nobody counted, and one node stayed empty)."""
        node = request.node
        manifest = self._named(request.manifest)
        chosen = manifest is not request.manifest  # the name was chosen here, not by the decider
        deadline = self._clock.monotonic() + CREATE_RETRY_SECONDS
        uncertain: str | None = None  # why an earlier try may have written it
        tries = 0
        while True:
            tries += 1
            try:
                claim = await self._client.create(NODECLAIMS, manifest)
                break
            except ConflictError as err:
                if uncertain is None and chosen:
                    if tries > NAME_TRIES:
                        return self._failed(request, manifest, reason=reason, error=str(err))
                    manifest = self._named(request.manifest)  # someone else's NodeClaim has that name
                    continue
                if uncertain is None:
                    if not manifest["metadata"].get("name"):
                        return self._failed(request, manifest, reason=reason, error=str(err))
                    # written before (a retry after a crash): it is there, and counted until the cache shows it
                    self._remember(manifest)
                    log.debug("nodeclaim.exists", nodeclaim=manifest["metadata"]["name"], reason=reason)
                    return Written(request=request, claim=manifest, existed=True)
                try:
                    found = await self._written_before(manifest)
                except (ApiError, TransportError) as looked:
                    # cannot tell yet: the same name again, never another (that could buy it twice)
                    uncertain = f"{err}; reading it back: {looked}"
                else:
                    if found is not None:
                        claim = found  # the try whose answer was lost wrote it
                        break
                    if chosen:
                        manifest = self._named(request.manifest)  # someone else's, made meanwhile
                        uncertain = None
                        continue
                    return self._failed(request, manifest, reason=reason, error=str(err))
            except ApiError as err:
                if not _retryable(err.status):
                    return self._failed(request, manifest, reason=reason, error=str(err))
                uncertain = str(err)
            except TransportError as err:
                uncertain = str(err)
            wait = min(CREATE_RETRY_MAX_WAIT, CREATE_RETRY_FIRST_WAIT * 2 ** (tries - 1))
            if self._clock.monotonic() + wait > deadline:
                # no answer for a minute: it may exist. Counted as in flight (as if written) until the
                # cache shows it or the minute of a just-created NodeClaim ends, so the next decision
                # does not buy its pods a second machine while the apiserver is away
                self._remember(manifest)
                return self._failed(request, manifest, reason=reason, error=f"no answer, it may exist: {uncertain}")
            log.warning(
                "nodeclaim.create_retry",
                nodeclaim=manifest["metadata"].get("name"),
                reason=reason,
                nodepool=node.node_pool,
                error=uncertain,
                retry_in=wait,
            )
            await self._clock.sleep(wait)
        self._remember(claim)
        NODECLAIMS_CREATED.labels(nodepool=node.node_pool, reason=_METRIC_REASON.get(reason, reason)).inc()
        if reason in _PRICED:
            PRICE_CREATED.labels(nodepool=node.node_pool).inc(node.choice.price)
        log.info(
            "nodeclaim.created",
            nodeclaim=claim["metadata"]["name"],
            reason=reason,
            nodepool=node.node_pool,
            instance_type=node.choice.instance_type,
            zone=node.choice.zone,
            capacity_type=node.choice.capacity_type,
            price_per_hour=node.choice.price,
            candidates=len(node.candidates),
            pods=len(node.pods),
            gang=node.gang,
            **({"tries": tries} if tries > 1 else {}),
            **fields,
        )
        return Written(request=request, claim=claim)

    def _named(self, manifest: Obj) -> Obj:
        """``manifest`` with a name chosen here when it asks for a generated one (a copy), else itself.
        The name is one the cache and this writer do not know."""
        meta = manifest["metadata"]
        prefix = meta.get("generateName")
        if meta.get("name") or not prefix:
            return manifest
        taken = self._cluster.claim_views()
        while True:
            name = f"{prefix}{self._suffix()}"
            if name not in taken and self._recent.get(name) is None:
                break
        named_meta = {k: v for k, v in meta.items() if k != "generateName"}
        named_meta["name"] = name
        return {**manifest, "metadata": named_meta}

    async def _written_before(self, manifest: Obj) -> Obj | None:
        """The NodeClaim of ``manifest``'s name if an earlier try of this write made it (its labels and
        annotations are the manifest's), else None; raises when it cannot be read."""
        meta = manifest["metadata"]
        found = await self._client.get(NODECLAIMS, str(meta["name"]))
        have = found.get("metadata") or {}
        for part in ("labels", "annotations"):
            mine = meta.get(part) or {}
            theirs = have.get(part) or {}
            if any(theirs.get(k) != v for k, v in mine.items()):
                return None
        return found

    def _remember(self, claim: Obj) -> None:
        name = claim["metadata"]["name"]
        if name not in self._cluster.claim_views():  # its watch event may have come before the answer
            self._recent.add(claim, now=self._clock.monotonic())

    @staticmethod
    def _failed(request: NewClaim, manifest: Obj, *, reason: CreateReason, error: str) -> Written:
        meta = manifest["metadata"]
        log.error(
            "nodeclaim.create_failed",
            nodeclaim=meta.get("name") or meta.get("generateName"),
            reason=reason,
            nodepool=request.node.node_pool,
            instance_type=request.node.choice.instance_type,
            error=error,
        )
        return Written(request=request, claim=None, error=error, tried=str(meta.get("name") or ""))
