"""The kwok cloud provider: a fake cloud whose "instances" are Node objects that kwok makes Ready.

`create` picks the cheapest available offering and answers at once with an `Instance` whose
providerID is ``kwok://<nodeclaim>``. The Node itself appears after the KWOKNodeClass's
``registrationDelay``: the Node-making loop the operator hands the provider
(``controller/kwoknodes/``) looks at every launched NodeClaim without a Node, and `node_when_due`
creates it once the delay since launch (the Launched condition's lastTransitionTime) has passed.
It works from cluster state alone, so a restart finishes what an earlier process started. With a
zero delay the Node is created inside `create` and nothing waits. `run()` runs that loop; when
nobody calls it explicitly, the first `create()` or `list()` starts it as a background task.

The provider reads no cache of its own: the operator hands it what it reads (`ClusterReads`: the
Nodes it made, their NodeClaims, the KWOKNodeClasses). What it keeps in memory is only what the
cluster cannot know yet: instances launched whose NodeClaim status has not been written yet (they
show in `list()`, so garbage collection can reclaim them when their NodeClaim never records them).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import structlog

from api.v1.labels import ANNOTATION_PLANNED_ZONE, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE
from controller.clock import Clock
from controller.cloudprovider.catalog import parse_catalog_text
from controller.cloudprovider.kwok.node import build_node, is_kwok_provider_id, launched_here, provider_id_for
from controller.cloudprovider.kwok.nodeclass import KWOKNodeClassSpec, capacity_period, parse_nodeclass
from controller.cloudprovider.kwok.offerings import choose, compatible, offering_labels
from controller.cloudprovider.types import (
    CreateError,
    Instance,
    InsufficientCapacityError,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
)
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.kube.client import ApiError, ConflictError, KubeClient, NotFoundError
from controller.kube.resources import CONFIGMAPS, NODES
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.instancetypes import Offering as CatalogOffering
from controller.state.views import NodeClaimView, NodeView, Obj

log = structlog.get_logger()
IMAGE_PREFIX = "kwok://image/"
CATALOG_KEY = "catalog.json"
CATALOG_REFRESH_SECONDS = 60.0


class ClusterReads(Protocol):
    """What the kwok provider reads of the cluster, handed to it by the operator (the cache is one):
    its instances are the Nodes it made, their records the NodeClaims, its classes the KWOKNodeClasses."""

    def node_views(self) -> Mapping[str, NodeView]: ...

    def node_view_by_provider_id(self, provider_id: str) -> NodeView | None: ...

    def claim_views(self) -> Mapping[str, NodeClaimView]: ...

    def nodeclasses(self) -> Mapping[str, Obj]: ...


class NodeLoop(Protocol):
    """The loop that creates the Nodes of launched NodeClaims (controller/kwoknodes/), made by the
    operator over this provider."""

    async def run(self) -> None: ...

    def due(self, nodeclaim: str, seconds: float) -> None:
        """Look at the NodeClaim again after ``seconds``."""
        ...


@dataclass(frozen=True, slots=True)
class Launch:
    """An instance this process launched, remembered until its NodeClaim records it."""

    instance: Instance
    launched_at: datetime
    uid: str | None = None  # the NodeClaim's: the idempotency key of create()


@dataclass(frozen=True, slots=True)
class _Catalog:
    types: tuple[InstanceType, ...]
    by_name: dict[str, InstanceType] = field(default_factory=dict)

    @classmethod
    def of(cls, types: Iterable[InstanceType]) -> _Catalog:
        items = tuple(types)
        return cls(types=items, by_name={it.name: it for it in items})

    def offering(self, name: str | None, zone: str | None, capacity_type: str | None) -> CatalogOffering | None:
        it = self.by_name.get(name or "")
        if it is None:
            return None
        for offering in it.offerings:
            if offering.zone == zone and offering.capacity_type == capacity_type:
                return offering
        return None


class KWOKCloudProvider:
    name = "kwok"

    def __init__(
        self,
        *,
        client: KubeClient,
        cluster: ClusterReads,
        clock: Clock,
        catalog: Iterable[InstanceType],
        node_loop: Callable[[KWOKCloudProvider], NodeLoop],
        unavailable: UnavailableOfferings | None = None,
    ) -> None:
        """``node_loop`` makes the Node-making loop over this provider (the operator passes
        controller/kwoknodes/'s)."""
        self._client = client
        self._cluster = cluster
        self._clock = clock
        self._catalog = _Catalog.of(catalog)
        self._unavailable = unavailable
        self._launches: dict[str, Launch] = {}
        self._attempts: dict[str, int] = {}  # NodeClaim uid -> launch calls (the throttle draws)
        self._created: dict[str, str] = {}  # node name -> NodeClaim uid, until the cache shows the Node
        self._configmap_catalogs: dict[str, tuple[float, _Catalog]] = {}
        self._running = False
        self._task: asyncio.Task[None] | None = None
        self._loop = node_loop(self)

    @property
    def catalog(self) -> tuple[InstanceType, ...]:
        """The built-in (or --catalog) instance types; a KWOKNodeClass may point at another."""
        return self._catalog.types

    # --- the CloudProvider protocol ----------------------------------------------------------

    async def create(self, nodeclaim: Obj) -> Instance:
        self._ensure_running()
        claim = NodeClaimView.of(nodeclaim)
        name = claim.name
        previous = self._launches.get(name)
        if previous is not None and previous.uid == claim.uid:
            return previous.instance  # a retried create buys nothing more
        nodeclass = self.nodeclass_for(claim)
        failures = nodeclass.failures
        uid = str(claim.uid or name)
        attempt = self._attempts[uid] = self._attempts.get(uid, 0) + 1
        delay = failures.latency(uid)
        if delay > 0:
            await self._clock.sleep(delay)
        if failures.throttled(uid, attempt):
            raise CreateError(
                f"launch call {attempt} for NodeClaim {name} throttled (injected at the KWOKNodeClass's throttleRate)",
                reason="Throttled",
            )
        catalog = await self._catalog_for(nodeclass)
        candidates = compatible(nodeclaim=nodeclaim, catalog=catalog.types)
        if not candidates:
            raise CreateError(
                f"no instance type in the kwok catalog fits NodeClaim {name}'s requirements and requests",
                reason="NoCompatibleInstanceType",
            )
        unavailable = self._unavailable.current() if self._unavailable is not None else frozenset()
        period = capacity_period(self._clock.now())
        choice = choose(
            candidates=candidates,
            unavailable=unavailable,
            failures=failures,
            period=period,
            planned_zone=claim.annotations.get(ANNOTATION_PLANNED_ZONE),
        )
        if choice.chosen is None:
            raise InsufficientCapacityError(
                f"all {len(choice.exhausted)} candidate offerings are out of capacity: "
                + "; ".join(choice.reasons[:8]),
                offerings=choice.exhausted,
            )
        it, offering = choice.chosen.instance_type, choice.chosen.offering
        if choice.refused and self._unavailable is not None:
            # the cheaper offerings that had no capacity this time stay unavailable for a while, as
            # CreateFleet's errors beside a launched instance do in the aws provider: otherwise
            # consolidation replaces the dearer machine at once with the offering that just refused it
            for key in choice.refused:
                self._unavailable.mark(key)
        instance = dataclasses.replace(
            self._instance(name=name, instance_type=it, offering=offering, image_id=IMAGE_PREFIX + nodeclass.image_id),
            refused=choice.refused,
        )
        self._launches[name] = Launch(instance=instance, launched_at=self._clock.now(), uid=claim.uid)
        log.info(
            "kwok.instance_launched",
            nodeclaim=name,
            instance_type=it.name,
            zone=offering.zone,
            capacity_type=offering.capacity_type,
            price=offering.price,
            skipped=len(choice.exhausted),
            refused=[f"{k.instance_type}/{k.zone}/{k.capacity_type}" for k in choice.refused],
            registration_delay=nodeclass.registration_delay_seconds,
            reason="cheapest available offering among the NodeClaim's candidates",
        )
        if it.name in failures.never_register or failures.withheld(uid):
            log.info("kwok.node_withheld", nodeclaim=name, reason="failures.neverRegister or neverRegisterRate")
        elif nodeclass.registration_delay_seconds <= 0:
            await self._create_node(claim, it, offering, nodeclass)
        else:
            self._loop.due(name, nodeclass.registration_delay_seconds)
        return instance

    async def delete(self, nodeclaim: Obj) -> None:
        claim = NodeClaimView.of(nodeclaim)
        name = claim.name
        provider_id = claim.provider_id or provider_id_for(name)
        launch = self._launches.pop(name, None)
        node = await self._find_node(name=name, provider_id=provider_id)
        if node is not None:
            if not node.deleting:
                with contextlib.suppress(NotFoundError):
                    await self._client.delete(NODES, node.name, uid=node.uid)
                log.info("kwok.instance_deleted", nodeclaim=name, node=node.name, provider_id=provider_id)
            return
        if launch is not None or self._pending_claim(provider_id) is not None:
            log.info("kwok.instance_deleted", nodeclaim=name, provider_id=provider_id, reason="no Node yet")
            return
        raise NodeClaimNotFoundError(f"no kwok instance {provider_id} (no Node, no launch record)")

    async def get(self, provider_id: str) -> Instance:
        node = self._cluster.node_view_by_provider_id(provider_id)
        if node is not None and is_kwok_provider_id(provider_id):
            return self._instance_from_node(node)
        for launch in self._launches.values():
            if launch.instance.provider_id == provider_id:
                return launch.instance
        claim = self._pending_claim(provider_id)
        if claim is not None:
            instance = self._instance_from_claim(claim)
            if instance is not None:
                return instance
        raise NodeClaimNotFoundError(f"no kwok instance {provider_id}")

    async def list(self) -> list[Instance]:
        self._ensure_running()
        out: dict[str, Instance] = {}
        for node in self._cluster.node_views().values():
            if node.provider_id is not None and launched_here(node):
                out[node.provider_id] = self._instance_from_node(node)
        for claim in self._cluster.claim_views().values():
            pid = claim.provider_id
            if pid is not None and is_kwok_provider_id(pid) and pid not in out:
                instance = self._instance_from_claim(claim)
                if instance is not None:
                    out[pid] = instance
        for launch in self._launches.values():
            out.setdefault(launch.instance.provider_id, launch.instance)
        return list(out.values())

    async def is_drifted(self, nodeclaim: Obj) -> str | None:
        return None

    async def instance_types(self, nodepool: Obj) -> Sequence[InstanceType]:
        """The catalog of the NodePool's KWOKNodeClass (the built-in one unless it names a ConfigMap).

        NodeClassNotReadyError when the NodeClass is missing, invalid or its catalog cannot be read.
        """
        ref = ((((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef")) or {}
        pool = (nodepool.get("metadata") or {}).get("name", "")
        stub = NodeClaimView.of({"metadata": {"name": f"(NodePool {pool})"}, "spec": {"nodeClassRef": ref}})
        return (await self._catalog_for(self.nodeclass_for(stub))).types

    # --- NodeClass and catalog ---------------------------------------------------------------

    def nodeclass_for(self, nodeclaim: NodeClaimView) -> KWOKNodeClassSpec:
        """The NodeClaim's KWOKNodeClass from the cache; NodeClassNotReadyError naming it otherwise."""
        ref_name = nodeclaim.node_class
        claim_name = nodeclaim.name
        if not ref_name:
            raise NodeClassNotReadyError(f"NodeClaim {claim_name} has no spec.nodeClassRef.name")
        obj = self._cluster.nodeclasses().get(str(ref_name))
        if obj is None:
            raise NodeClassNotReadyError(
                f"KWOKNodeClass {ref_name!r} (nodeClassRef of NodeClaim {claim_name}) does not exist: create "
                f"it, or point the NodePool's spec.template.spec.nodeClassRef at an existing one"
            )
        try:
            spec = parse_nodeclass(obj)
        except ValueError as err:
            raise NodeClassNotReadyError(f"KWOKNodeClass {ref_name!r} is invalid: {err}") from None
        if not spec.ready:
            raise NodeClassNotReadyError(f"KWOKNodeClass {ref_name!r} is not Ready: {spec.not_ready_message}")
        return spec

    async def _catalog_for(self, nodeclass: KWOKNodeClassSpec) -> _Catalog:
        ref = nodeclass.catalog_ref
        if not ref:
            return self._catalog
        cached = self._configmap_catalogs.get(ref)
        if cached is not None and self._clock.monotonic() - cached[0] < CATALOG_REFRESH_SECONDS:
            return cached[1]
        namespace, _, cm_name = ref.partition("/")
        where = f"KWOKNodeClass {nodeclass.name!r}: spec.catalog ConfigMap {ref}"
        try:
            cm = await self._client.get(CONFIGMAPS, cm_name, namespace=namespace)
            text = (cm.get("data") or {}).get(CATALOG_KEY)
            if text is None:
                raise NodeClassNotReadyError(f"{where} has no key {CATALOG_KEY!r}")
            catalog = _Catalog.of(parse_catalog_text(text, source=f"ConfigMap {ref}"))
        except NotFoundError:
            raise NodeClassNotReadyError(f"{where} does not exist") from None
        except (ValueError, ApiError) as err:
            if cached is not None:  # keep serving the last good catalog through a bad edit or an outage
                log.warning("kwok.catalog_not_refreshed", configmap=ref, error=str(err))
                return cached[1]
            raise NodeClassNotReadyError(f"{where} cannot be read: {err}") from None
        self._configmap_catalogs[ref] = (self._clock.monotonic(), catalog)
        return catalog

    # --- Node creation after the registration delay (the loop in controller/kwoknodes/ drives it) ----

    async def run(self) -> None:
        """Run the Node-making loop: the Nodes of launched NodeClaims once their registration delay
        has passed.

        Safe to call again after a crash (the operator's supervisor does), and it takes over from
        the background task `create()`/`list()` start when nobody called it.
        """
        lazy = self._task
        if lazy is not None and lazy is not asyncio.current_task():
            self._task = None
            lazy.cancel()
        self._running = True
        await self._loop.run()

    def _ensure_running(self) -> None:
        if self._running:
            return
        self._running = True
        self._task = asyncio.get_running_loop().create_task(self.run(), name="kwok-provider")

    def launched(self, name: str) -> bool:
        """Whether this process launched the NodeClaim's instance, which its NodeClaim may not record yet."""
        return name in self._launches

    def launch_for(self, claim: NodeClaimView) -> Launch | None:
        """What this process launched for the NodeClaim. Once the NodeClaim records the launch (its
        instance type and providerID written) state is enough: the record goes, returned one last time."""
        launch = self._launches.get(claim.name)
        if launch is not None and claim.instance_type and claim.provider_id == launch.instance.provider_id:
            self._launches.pop(claim.name, None)  # the NodeClaim records it now; state is enough
        return launch

    def forget_node(self, name: str) -> None:
        """Nothing more to remember of the Node's creation: the cache shows it, or its NodeClaim is gone."""
        self._created.pop(name, None)

    async def node_when_due(self, claim: NodeClaimView, launch: Launch | None) -> float | None:
        """Create the Node of a launched NodeClaim that has none in the cache, once the KWOKNodeClass's
        registration delay since the launch has passed. Returns seconds until due, or None (created,
        withheld, or nothing to create)."""
        name = claim.name
        if self._created.get(name) == str(claim.uid):
            return None  # created a moment ago; the cache has not seen it yet
        try:
            nodeclass = self.nodeclass_for(claim)
            catalog = await self._catalog_for(nodeclass)
        except NodeClassNotReadyError as err:
            log.warning("kwok.node_delayed", nodeclaim=name, reason=str(err))
            return 30.0
        it_name = claim.instance_type or (launch.instance.instance_type if launch else None)
        zone = claim.zone or (launch.instance.zone if launch else None)
        capacity_type = claim.capacity_type or (launch.instance.capacity_type if launch else None)
        it = catalog.by_name.get(it_name or "")
        offering = catalog.offering(it_name, zone, capacity_type)
        if it is None or offering is None:
            log.warning(
                "kwok.node_not_created",
                nodeclaim=name,
                reason=f"the launched offering {it_name}/{zone}/{capacity_type} is not in the catalog",
            )
            return None
        if it.name in nodeclass.failures.never_register or nodeclass.failures.withheld(str(claim.uid or name)):
            return None
        launched_at = claim.transition_time("Launched")
        if launched_at is None and launch is not None:
            launched_at = launch.launched_at
        if launched_at is None:
            return None
        due = (launched_at - self._clock.now()).total_seconds() + nodeclass.registration_delay_seconds
        if due > 0:
            return due
        await self._create_node(claim, it, offering, nodeclass)
        return None

    async def _create_node(
        self, nodeclaim: NodeClaimView, it: InstanceType, offering: CatalogOffering, nodeclass: KWOKNodeClassSpec
    ) -> None:
        node = build_node(nodeclaim=nodeclaim, instance_type=it, offering=offering, nodeclass=nodeclass)
        name = nodeclaim.name
        uid = str(nodeclaim.uid)
        if self._created.get(name) == uid:
            return  # already created, or being created by another worker right now
        self._created[name] = uid
        try:
            await self._client.create(NODES, node)
        except ConflictError:
            log.debug("kwok.node_exists", node=name)
            return
        except BaseException:
            self._created.pop(name, None)
            raise
        log.info(
            "kwok.node_created",
            node=name,
            provider_id=provider_id_for(name),
            instance_type=it.name,
            never_ready=it.name in nodeclass.failures.never_ready or nodeclass.failures.stuck(uid),
            hide_gpus=it.name in nodeclass.failures.hide_gpus,
        )

    # --- helpers -----------------------------------------------------------------------------

    def _pending_claim(self, provider_id: str) -> NodeClaimView | None:
        """A live NodeClaim that recorded this kwok providerID (its Node may not exist yet)."""
        if not is_kwok_provider_id(provider_id):
            return None
        claim = self._cluster.claim_views().get(provider_id.removeprefix("kwok://"))
        if claim is not None and claim.provider_id == provider_id:
            return claim
        return None

    async def _find_node(self, *, name: str, provider_id: str) -> NodeView | None:
        node = self._cluster.node_view_by_provider_id(provider_id)
        if node is not None:
            return node
        try:  # created a moment ago and not in the cache yet?
            fresh = NodeView.of(await self._client.get(NODES, name))
        except NotFoundError:
            return None
        return fresh if fresh.provider_id == provider_id else None

    def _instance(
        self, *, name: str, instance_type: InstanceType, offering: CatalogOffering, image_id: str
    ) -> Instance:
        return Instance(
            provider_id=provider_id_for(name),
            nodeclaim=name,
            instance_type=instance_type.name,
            zone=offering.zone,
            capacity_type=offering.capacity_type,
            image_id=image_id,
            price=offering.price,
            capacity=instance_type.capacity.to_quantities(),
            allocatable=instance_type.allocatable.to_quantities(),
            labels=offering_labels(instance_type, offering),
            state="pending",
        )

    def _instance_from_claim(self, claim: NodeClaimView) -> Instance | None:
        it_name = claim.instance_type
        offering = self._catalog.offering(it_name, claim.zone, claim.capacity_type)
        if it_name is None or offering is None:
            # launched from a NodeClass catalog, or labels not written yet: what the status says
            return Instance(
                provider_id=str(claim.provider_id),
                nodeclaim=claim.name,
                instance_type=it_name or "",
                zone=claim.zone or "",
                capacity_type=claim.capacity_type or "",
                image_id=claim.image_id or "",
                capacity=dict(claim.capacity),
                allocatable=dict(claim.allocatable),
                state="pending",
            )
        return self._instance(
            name=claim.name,
            instance_type=self._catalog.by_name[it_name],
            offering=offering,
            image_id=claim.image_id or "",
        )

    def _instance_from_node(self, node: NodeView) -> Instance:
        labels = node.labels
        it_name = labels.get(LABEL_INSTANCE_TYPE, "")
        zone, capacity_type = labels.get(LABEL_ZONE, ""), labels.get(LABEL_CAPACITY_TYPE, "")
        offering = self._catalog.offering(it_name, zone, capacity_type)
        return Instance(
            provider_id=str(node.provider_id),
            nodeclaim=node.name,
            instance_type=it_name,
            zone=zone,
            capacity_type=capacity_type,
            price=offering.price if offering else 0.0,
            capacity=dict(node.capacity),
            allocatable=dict(node.allocatable),
            labels=dict(labels),
            state="terminating" if node.deleting else "running",
        )
