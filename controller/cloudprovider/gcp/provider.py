"""The gcp cloud provider: NodeClaims become Compute Engine instances named after them.

* ``instance_types``: the ``machineTypes`` and ``acceleratorTypes`` of the GCENodeClass's zones, priced
  from the Cloud Billing Catalog (:mod:`.billing`) over the shipped table (on-demand and spot), plus
  ``reserved`` offerings for the selected specific reservations; cached for ``cache_ttl_seconds``.
* ``create``: the instance is named after the NodeClaim, so a retried call finds it (``instances.get``,
  or the ``alreadyExists`` answer of a racing insert) instead of buying a second one. Offerings are
  tried one ``instances.insert`` at a time, reserved first while a reservation has room, then the
  cheapest; an operation that fails with a capacity error (``ZONE_RESOURCE_POOL_EXHAUSTED``,
  ``QUOTA_EXCEEDED``, a stockout) moves on to the next offering, up to ``MAX_ATTEMPTS``, and the
  refused offerings are reported so they are marked unavailable.
* A gang's NodeClaims (``joiner.sh/gang-claims`` names the attempt's members of one NodePool and
  their planned offering) launch together with one ``instances.bulkInsert`` whose ``minCount`` is
  their number:
  GCE creates all of them or none, so a zone short of one machine refuses the whole gang and no
  member is left to roll back. The members' concurrent ``create`` calls share that one request.
* ``delete``/``get``/``list`` see only instances labelled ``joiner-cluster=<cluster name>``.
* ``is_drifted``: the instance's image (the ``joiner-image`` metadata item it was launched with),
  subnetwork or service account is no longer what the GCENodeClass resolves to.

What one insert or bulkInsert asks for is built by the pure functions of :mod:`.instance`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog

from api.v1.labels import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
)
from controller.clock import Clock
from controller.cloudprovider.gcp.api import GCPApi, GCPError, OperationError
from controller.cloudprovider.gcp.billing import Rates, fetch_rates, priced
from controller.cloudprovider.gcp.instance import (
    ANNOTATION_GANG_ATTEMPT,
    CAPACITY_CODES,
    GCE_NAME,
    bulk_insert_body,
    gang_members,
    instance_properties,
    label_value,
)
from controller.cloudprovider.gcp.instances import InstanceReads
from controller.cloudprovider.gcp.instancetypes import (
    Prices,
    Reservation,
    Shape,
    TypesCache,
    build_instance_type,
    build_offerings,
    shapes,
    shipped_prices,
    split_name,
)
from controller.cloudprovider.gcp.nodeclass import (
    NodeClassResolver,
    ResolvedNodeClass,
    last_segment,
)
from controller.cloudprovider.kwok.offerings import Candidate, compatible, launch_order
from controller.cloudprovider.types import (
    CreateError,
    Instance,
    InsufficientCapacityError,
    NodeClassNotReadyError,
    OfferingId,
)
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.scheduling.instancetypes import InstanceType

log = structlog.get_logger()
Obj = dict[str, Any]

MAX_ATTEMPTS: Final = 4
DEFAULT_CACHE_TTL_SECONDS: Final = 300.0
BILLING_REFRESH_SECONDS: Final = 12 * 3600.0
BILLING_RETRY_SECONDS: Final = 3600.0
BULK_RESULT_SECONDS: Final = 120.0


@dataclass(slots=True)
class _Bulk:
    task: asyncio.Task[Mapping[str, Obj]]
    started: float


class GCPCloudProvider(InstanceReads):
    name = "gcp"

    def __init__(
        self,
        *,
        api: GCPApi,
        cluster_name: str,
        nodeclasses: Callable[[], Mapping[str, Obj]],
        clock: Clock,
        region: str = "us-central1",
        unavailable: UnavailableOfferings | None = None,
        prices: Prices | None = None,
        cache_ttl_seconds: float = DEFAULT_CACHE_TTL_SECONDS,
        status_loop: Callable[[NodeClassResolver], Any] | None = None,
        billing: bool = True,
    ) -> None:
        """``status_loop`` makes the GCENodeClass status controller over this provider's resolver (so
        the status shows what launches use); :meth:`run` runs it. ``billing``: read prices from the
        Cloud Billing Catalog API (every 12 hours), the shipped table filling in what it lacks."""
        self.api = api
        self.cluster_name = cluster_name
        self.cluster_label = label_value(cluster_name)
        self._clock = clock
        self._unavailable = unavailable
        self._prices = prices if prices is not None else shipped_prices(region)
        self._region = region
        self._billing = billing
        self._rates: Rates = Rates()
        self._rates_at: float | None = None  # when the catalog was last asked (read or failed)
        self._ttl = cache_ttl_seconds
        self._resolver = NodeClassResolver(api, nodeclasses=nodeclasses, clock=clock)
        self._types: dict[str, TypesCache] = {}
        self._bulks: dict[str, _Bulk] = {}
        self._listed: tuple[float, dict[str, Obj]] | None = None
        self._loop = status_loop(self._resolver) if status_loop is not None else None

    @property
    def resolver(self) -> NodeClassResolver:
        return self._resolver

    async def run(self) -> None:
        """The GCENodeClass status controller, when one was given; the supervisor expects run() to last."""
        if self._loop is not None:
            await self._loop.run()
        else:
            await asyncio.Event().wait()

    async def aclose(self) -> None:
        await self.api.close()

    # --- NodeClass ---------------------------------------------------------------------------

    async def nodeclass_for(self, nodeclaim: Obj) -> ResolvedNodeClass:
        ref = (nodeclaim.get("spec") or {}).get("nodeClassRef") or {}
        claim = (nodeclaim.get("metadata") or {}).get("name")
        if not ref.get("name"):
            raise NodeClassNotReadyError(f"{claim} has no spec.nodeClassRef.name")
        if ref.get("kind") not in (None, "GCENodeClass"):
            raise NodeClassNotReadyError(
                f"{claim}'s nodeClassRef is a {ref.get('kind')}; the gcp provider launches only GCENodeClasses"
            )
        return await self._resolver.resolve(str(ref["name"]), who=str(claim))

    # --- instance types ----------------------------------------------------------------------

    async def instance_types(self, nodepool: Obj) -> Sequence[InstanceType]:
        ref = ((((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef")) or {}
        pool = (nodepool.get("metadata") or {}).get("name", "")
        stub: Obj = {"metadata": {"name": f"NodePool {pool}"}, "spec": {"nodeClassRef": ref}}
        return (await self._types_for(await self.nodeclass_for(stub))).types

    def _reservations(self, nodeclass: ResolvedNodeClass) -> tuple[Reservation, ...]:
        return tuple(self._resolver.room(r) for r in nodeclass.reservations)

    async def _types_for(self, nodeclass: ResolvedNodeClass) -> TypesCache:
        reservations = self._reservations(nodeclass)
        key = (nodeclass.zones, reservations, nodeclass.boot_disk_gib)
        cached = self._types.get(nodeclass.name)
        now = self._clock.monotonic()
        if cached is not None and cached.key == key and now - cached.at < self._ttl:
            return cached
        project = nodeclass.spec.project
        wanted = set(self._prices.on_demand) | {split_name(r.instance_type).machine_type for r in reservations}
        zones_of: dict[str, set[str]] = {}
        found: dict[str, tuple[Shape, Obj]] = {}
        per_zone: list[tuple[str, list[Obj], list[Obj]]] = []
        try:
            for zone in nodeclass.zones:
                machines = await self.api.compute_list(f"projects/{project}/zones/{zone}/machineTypes")
                accelerators = await self.api.compute_list(f"projects/{project}/zones/{zone}/acceleratorTypes")
                per_zone.append((zone, [m for m in machines if m.get("name") in wanted], accelerators))
        except GCPError as err:
            if cached is not None:
                log.warning("gcp.instance_types_not_refreshed", nodeclass=nodeclass.name, error=str(err))
                return cached
            raise NodeClassNotReadyError(f"cannot list Compute Engine machine types: {err}") from None
        rows = {str(m["name"]): m for _, machines, _ in per_zone for m in machines}
        prices = priced(self._prices, await self._catalog_rates(), rows)
        for zone, machines, accelerators in per_zone:
            for name, shaped in shapes(machines, accelerators, prices).items():
                found.setdefault(name, shaped)
                zones_of.setdefault(name, set()).add(zone)
        types: list[InstanceType] = []
        by_name: dict[str, Shape] = {}
        for name, (shape, row) in sorted(found.items()):
            offerings = build_offerings(shape=shape, zones=zones_of[name], prices=prices, reservations=reservations)
            if not offerings:
                continue
            types.append(build_instance_type(shape, row, boot_disk_gib=nodeclass.boot_disk_gib, offerings=offerings))
            by_name[name] = shape
        result = TypesCache(at=now, key=key, types=tuple(types), shapes=by_name)
        self._types[nodeclass.name] = result
        return result

    async def _catalog_rates(self) -> Rates:
        """The Cloud Billing Catalog's rates, read at most every 12 hours (an hour after a failure:
        the shipped table prices meanwhile)."""
        if not self._billing:
            return self._rates
        now = self._clock.monotonic()
        wait = BILLING_REFRESH_SECONDS if self._rates else BILLING_RETRY_SECONDS
        if self._rates_at is not None and now - self._rates_at < wait:
            return self._rates
        self._rates_at = now
        try:
            self._rates = await fetch_rates(self.api, self._region)
        except GCPError as err:
            log.warning(
                "gcp.billing_catalog_unavailable",
                error=str(err),
                reason="prices come from the shipped table (enable cloudbilling.googleapis.com to read the catalog)",
            )
            return self._rates
        log.info("gcp.billing_catalog_read", families=len({f for f, _ in self._rates.core}), gpus=len(self._rates.gpu))
        return self._rates

    # --- create ------------------------------------------------------------------------------

    async def create(self, nodeclaim: Obj) -> Instance:
        meta = nodeclaim["metadata"]
        name = str(meta["name"])
        if not GCE_NAME.match(name):
            raise CreateError(
                f"NodeClaim {name!r} cannot name a Compute Engine instance (lower-case letters, digits and '-', "
                f"at most 63 characters): rename the NodePool",
                reason="InvalidInstanceName",
            )
        nodeclass = await self.nodeclass_for(nodeclaim)
        cache = await self._types_for(nodeclass)
        existing = await self._find(nodeclass, name)
        if existing is not None:
            log.info(
                "gcp.instance_found",
                nodeclaim=name,
                zone=last_segment(str(existing.get("zone"))),
                reason="already launched",
            )
            return self._instance(existing)
        members = gang_members(nodeclaim)
        if len(members) > 1 and name in members and len(set(members.values())) == 1:
            return await self._gang_create(nodeclaim, nodeclass, cache, members)
        return await self._single_create(nodeclaim, nodeclass, cache)

    def _candidates(self, nodeclaim: Obj, nodeclass: ResolvedNodeClass, cache: TypesCache) -> list[Candidate]:
        name = str(nodeclaim["metadata"]["name"])
        unavailable = self._unavailable.current() if self._unavailable is not None else frozenset()
        fitting = compatible(nodeclaim=nodeclaim, catalog=cache.types)
        if not fitting:
            raise CreateError(
                f"no Compute Engine machine type offered in the zones of GCENodeClass {nodeclass.name!r} fits "
                f"NodeClaim {name}'s requirements and requests",
                reason="NoCompatibleInstanceType",
            )
        candidates = [c for c in fitting if c.offering.available and c.key not in unavailable]
        if not candidates:
            raise InsufficientCapacityError(
                f"no available offering of NodeClaim {name}'s candidate machine types in the zones of "
                f"GCENodeClass {nodeclass.name!r}",
                offerings=(),
            )
        tier = {CAPACITY_TYPE_RESERVED: 0, CAPACITY_TYPE_SPOT: 1, CAPACITY_TYPE_ON_DEMAND: 2}
        return launch_order(candidates, nodeclaim=nodeclaim, tiers=tier)

    def _reservation_for(self, nodeclass: ResolvedNodeClass, c: Candidate) -> Reservation | None:
        if c.offering.capacity_type != CAPACITY_TYPE_RESERVED:
            return None
        return next(
            (
                r
                for r in self._reservations(nodeclass)
                if r.instance_type == c.instance_type.name and r.zone == c.offering.zone and r.available > 0
            ),
            None,
        )

    async def _single_create(self, nodeclaim: Obj, nodeclass: ResolvedNodeClass, cache: TypesCache) -> Instance:
        name = str(nodeclaim["metadata"]["name"])
        project = nodeclass.spec.project
        refused: list[OfferingId] = []
        errors: list[str] = []
        tried_zones_types: set[tuple[str, str, str]] = set()
        for c in self._candidates(nodeclaim, nodeclass, cache):
            if len(tried_zones_types) >= MAX_ATTEMPTS:
                break
            reservation = self._reservation_for(nodeclass, c)
            if c.offering.capacity_type == CAPACITY_TYPE_RESERVED and reservation is None:
                continue
            zone = c.offering.zone
            tried_zones_types.add((c.instance_type.name, zone, c.offering.capacity_type))
            shape = cache.shapes[c.instance_type.name]
            body = instance_properties(
                nodeclaim,
                nodeclass,
                shape=shape,
                zone=zone,
                capacity_type=c.offering.capacity_type,
                reservation=reservation,
                cluster_label=self.cluster_label,
            )
            body["name"] = name
            try:
                operation = await self.api.compute("POST", f"projects/{project}/zones/{zone}/instances", body=body)
                await self.api.wait_zone_operation(project, zone, operation)
            except GCPError as err:
                if err.status == 409 or err.reason == "alreadyExists":
                    found = await self._find(nodeclass, name)
                    if found is not None:
                        return self._instance(found, refused=tuple(refused))
                if err.reason in CAPACITY_CODES:
                    refused.append(c.key)
                    errors.append(f"{c.key.instance_type}/{zone}/{c.key.capacity_type}: {err.reason}")
                    continue
                raise CreateError(f"instances.insert of {name} failed: {err}", reason=err.reason) from None
            except OperationError as err:
                if "RESOURCE_ALREADY_EXISTS" in err.codes:  # a concurrent insert of the same name won
                    found = await self._find(nodeclass, name)
                    if found is not None:
                        return self._instance(found, refused=tuple(refused))
                if err.codes and all(code in CAPACITY_CODES for code in err.codes):
                    refused.append(c.key)
                    errors.append(f"{c.key.instance_type}/{zone}/{c.key.capacity_type}: {','.join(err.codes)}")
                    log.info("gcp.offering_refused", nodeclaim=name, offering=errors[-1])
                    continue
                raise CreateError(f"instances.insert of {name} failed: {err}", reason=err.codes[0]) from None
            if reservation is not None:
                self._resolver.consumed(reservation)
            found = await self._find(nodeclass, name, zones=(zone,))
            if found is None:
                raise CreateError(f"instance {name} was created in {zone} but cannot be read back", reason="NotFound")
            log.info(
                "gcp.instance_launched",
                nodeclaim=name,
                instance_type=c.instance_type.name,
                zone=zone,
                capacity_type=c.offering.capacity_type,
                price=c.offering.price,
                refused=len(refused),
            )
            return self._instance(found, refused=tuple(refused))
        raise InsufficientCapacityError(
            f"no capacity for NodeClaim {name} in {len(refused)} offering(s) tried: {'; '.join(errors) or 'none left'}",
            offerings=tuple(refused),
        )

    async def _gang_create(
        self, nodeclaim: Obj, nodeclass: ResolvedNodeClass, cache: TypesCache, members: Mapping[str, OfferingId]
    ) -> Instance:
        """All members in one ``bulkInsert`` (count = minCount = the gang's size): GCE creates every
        one of them or none. Concurrent calls of the attempt's members await the same request."""
        name = str(nodeclaim["metadata"]["name"])
        attempt = str((nodeclaim["metadata"].get("annotations") or {}).get(ANNOTATION_GANG_ATTEMPT) or "")
        key = f"{attempt}/{','.join(sorted(members))}"
        now = self._clock.monotonic()
        for k, old in list(self._bulks.items()):
            if old.task.done() and now - old.started > BULK_RESULT_SECONDS:
                del self._bulks[k]
        bulk = self._bulks.get(key)
        if bulk is None:
            offering = next(iter(members.values()))
            task = asyncio.create_task(
                self._bulk_insert(nodeclaim, nodeclass, cache, sorted(members), offering),
                name=f"gcp-bulk-insert-{attempt}",
            )
            bulk = self._bulks[key] = _Bulk(task=task, started=now)
        created = await asyncio.shield(bulk.task)
        raw = created.get(name)
        if raw is None:
            raise CreateError(f"bulkInsert of gang attempt {attempt} did not create {name}", reason="NotFound")
        return self._instance(raw)

    async def _bulk_insert(
        self,
        nodeclaim: Obj,
        nodeclass: ResolvedNodeClass,
        cache: TypesCache,
        names: list[str],
        offering: OfferingId,
    ) -> Mapping[str, Obj]:
        project, zone = nodeclass.spec.project, offering.zone
        if self._unavailable is not None and offering in self._unavailable.current():
            raise InsufficientCapacityError(
                f"the gang's offering {offering.instance_type}/{zone}/{offering.capacity_type} is marked unavailable",
                offerings=(offering,),
            )
        shape = cache.shapes.get(offering.instance_type)
        if shape is None or zone not in nodeclass.zones:
            raise CreateError(
                f"the gang's planned offering {offering.instance_type}/{zone} is not offered by GCENodeClass "
                f"{nodeclass.name!r}",
                reason="NoCompatibleOffering",
            )
        reservation = None
        if offering.capacity_type == CAPACITY_TYPE_RESERVED:
            reservation = next(
                (
                    r
                    for r in self._reservations(nodeclass)
                    if r.instance_type == offering.instance_type and r.zone == zone and r.available >= len(names)
                ),
                None,
            )
            if reservation is None:
                raise InsufficientCapacityError(
                    f"no reservation of {offering.instance_type} in {zone} has room for {len(names)} machines",
                    offerings=(offering,),
                )
        properties = instance_properties(
            nodeclaim,
            nodeclass,
            shape=shape,
            zone=zone,
            capacity_type=offering.capacity_type,
            reservation=reservation,
            cluster_label=self.cluster_label,
        )
        attempt = str((nodeclaim["metadata"].get("annotations") or {}).get(ANNOTATION_GANG_ATTEMPT) or "")
        body = bulk_insert_body(properties, names, attempt=attempt)
        try:
            path = f"projects/{project}/zones/{zone}/instances/bulkInsert"
            operation = await self.api.compute("POST", path, body=body)
            await self.api.wait_zone_operation(project, zone, operation)
        except (OperationError, GCPError) as err:
            exists = isinstance(err, GCPError) and (err.status == 409 or err.reason == "alreadyExists")
            if exists or (isinstance(err, OperationError) and "RESOURCE_ALREADY_EXISTS" in err.codes):
                # an earlier bulkInsert of this attempt (before a restart) made them: find them all
                made = {n: raw for n in names if (raw := await self._find(nodeclass, n, zones=(zone,))) is not None}
                if len(made) == len(names):
                    return made
            raise self._bulk_error(err, names=names, offering=offering) from None
        if reservation is not None:
            for _ in names:
                self._resolver.consumed(reservation)
        out: dict[str, Obj] = {}
        for n in names:
            found = await self._find(nodeclass, n, zones=(zone,))
            if found is not None:
                out[n] = found
        log.info(
            "gcp.gang_launched",
            machines=len(names),
            instance_type=offering.instance_type,
            zone=zone,
            capacity_type=offering.capacity_type,
            reason="bulkInsert with minCount = the gang's size",
        )
        return out

    @staticmethod
    def _bulk_error(err: OperationError | GCPError, *, names: list[str], offering: OfferingId) -> Exception:
        """A failed bulkInsert as the lifecycle reads it: no capacity for the offering, or another failure."""
        codes = err.codes if isinstance(err, OperationError) else (err.reason,)
        where = f"{offering.instance_type} in {offering.zone}"
        if codes and all(code in CAPACITY_CODES for code in codes):
            return InsufficientCapacityError(
                f"bulkInsert of the gang's {len(names)} machines ({where}) created none: {', '.join(codes)}",
                offerings=(offering,),
            )
        return CreateError(f"bulkInsert of {len(names)} machines ({where}) failed: {err}", reason=codes[0] or "Unknown")
