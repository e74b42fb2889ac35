"""The azure cloud provider: NodeClaims become Azure VMs named after them.

* ``instance_types``: Resource SKUs of the AKSNodeClass's location (``virtualMachines``, whole GPUs
  only), priced from the Retail Prices API with the shipped table as fallback, plus ``reserved``
  offerings for the reservations of the class's capacity reservation group; cached.
* ``create``: the VM is named after the NodeClaim, so a retried call finds it (``virtualMachines.get``)
  instead of buying another. Offerings are tried one VM PUT at a time, reserved first while a
  reservation has room, then spot, then on-demand, cheapest first. A PUT whose operation fails for
  capacity (``AllocationFailed``, ``ZonalAllocationFailed``, ``OverconstrainedAllocationRequest``,
  ``SkuNotAvailable``, ``OperationNotAllowed`` for quota) leaves a Failed VM behind, as Azure does:
  it is deleted, and the next offering is tried (up to ``MAX_ATTEMPTS``); the refused offerings are
  reported so they are marked unavailable. Gangs launch member by member; the gang controller rolls
  back as on AWS.
* ``delete``/``get``/``list`` see only VMs tagged ``joiner-cluster=<cluster name>``.
* ``is_drifted``: the VM's image, subnet or user-assigned identities are no longer the class's.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import structlog
from pydantic import ValidationError

from api.v1.aksnodeclass import AKSNodeClass, AKSNodeClassSpec
from api.v1.labels import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_REGION,
)
from controller.clock import Clock
from controller.cloudprovider.azure.api import AzureApi, AzureError, as_dict
from controller.cloudprovider.azure.instancetypes import (
    Reservation,
    build_instance_type,
    build_offerings,
    offered_zones,
    retail_prices,
    shipped_prices,
)
from controller.cloudprovider.azure.vm import TAG_CLUSTER, TAG_NODECLAIM, vm_body
from controller.cloudprovider.kwok.offerings import compatible, launch_order, offering_labels
from controller.cloudprovider.types import (
    CreateError,
    Instance,
    InsufficientCapacityError,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    OfferingId,
)
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.scheduling.instancetypes import InstanceType

log = structlog.get_logger()
Obj = dict[str, Any]

PROVIDER_ID_PREFIX: Final = "azure://"
CAPACITY_CODES: Final = frozenset(
    {
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
        "SkuNotAvailable",
        "OperationNotAllowed",
    }
)
LIVE_STATES: Final = ("Creating", "Updating", "Succeeded", "Deleting")
MAX_ATTEMPTS: Final = 4
DEFAULT_CACHE_TTL_SECONDS: Final = 300.0
PRICES_REFRESH_SECONDS: Final = 12 * 3600.0
VM_NAME: Final = re.compile(r"^[a-zA-Z0-9]([-a-zA-Z0-9.]{0,62}[a-zA-Z0-9])?$")


def provider_id_of(vm_id: str) -> str:
    """``azure:///subscriptions/.../virtualMachines/<name>``, as the Azure cloud provider writes it."""
    return f"{PROVIDER_ID_PREFIX}{vm_id}"


def parse_provider_id(provider_id: str | None) -> tuple[str, str, str] | None:
    """(subscription, resource group, VM name) of an azure providerID; None for any other."""
    if not provider_id or not provider_id.startswith(PROVIDER_ID_PREFIX):
        return None
    match = re.match(
        r"^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.Compute/virtualMachines/([^/]+)$",
        provider_id.removeprefix(PROVIDER_ID_PREFIX),
        re.IGNORECASE,
    )
    return (match[1], match[2], match[3]) if match else None


@dataclass(frozen=True, slots=True)
class _TypesCache:
    at: float
    key: tuple[Any, ...]
    types: tuple[InstanceType, ...]


class AzureCloudProvider:
    name = "azure"

    def __init__(
        self,
        *,
        api: AzureApi,
        cluster_name: str,
        nodeclasses: Callable[[], Mapping[str, Obj]],
        clock: Clock,
        unavailable: UnavailableOfferings | None = None,
        cache_ttl_seconds: float = DEFAULT_CACHE_TTL_SECONDS,
        status_loop: Callable[[AzureCloudProvider], Any] | None = None,
    ) -> None:
        self.api = api
        self.cluster_name = cluster_name
        self._nodeclasses = nodeclasses
        self._clock = clock
        self._unavailable = unavailable
        self._ttl = cache_ttl_seconds
        self._types: dict[str, _TypesCache] = {}
        self._prices: dict[str, tuple[float, dict[str, float], dict[str, float]]] = {}
        self._reserved_used: dict[str, int] = {}
        self._loop = status_loop(self) if status_loop is not None else None

    async def run(self) -> None:
        """The AKSNodeClass status controller, when one was given; the supervisor expects run() to last."""
        if self._loop is not None:
            await self._loop.run()
        else:
            await asyncio.Event().wait()

    async def aclose(self) -> None:
        await self.api.close()

    # --- NodeClass ---------------------------------------------------------------------------

    def nodeclass_for(self, nodeclaim: Obj) -> tuple[str, AKSNodeClassSpec]:
        ref = (nodeclaim.get("spec") or {}).get("nodeClassRef") or {}
        claim = (nodeclaim.get("metadata") or {}).get("name")
        if not ref.get("name"):
            raise NodeClassNotReadyError(f"{claim} has no spec.nodeClassRef.name")
        if ref.get("kind") not in (None, "AKSNodeClass"):
            raise NodeClassNotReadyError(
                f"{claim}'s nodeClassRef is a {ref.get('kind')}; the azure provider launches only AKSNodeClasses"
            )
        name = str(ref["name"])
        obj = self._nodeclasses().get(name)
        if obj is None:
            raise NodeClassNotReadyError(f"AKSNodeClass {name!r} (nodeClassRef of {claim}) does not exist")
        try:
            return name, AKSNodeClass.model_validate(obj).spec
        except ValidationError as err:
            raise NodeClassNotReadyError(f"AKSNodeClass {name!r} is invalid: {err.errors()[0]['msg']}") from None

    async def check(self, name: str) -> tuple[bool, str]:
        """Whether AKSNodeClass ``name`` can launch: its VM sizes listed (and its reservation group
        read); the message says what it offers or what failed."""
        try:
            _, spec = self.nodeclass_for({"metadata": {"name": "status"}, "spec": {"nodeClassRef": {"name": name}}})
            types = (await self._types_for(name, spec)).types
        except NodeClassNotReadyError as err:
            return False, str(err)
        if not types:
            return False, f"no VM size of {spec.location} is offered in the AKSNodeClass's zones at a known price"
        return True, f"{len(types)} VM sizes offered in {spec.location}"

    # --- instance types ----------------------------------------------------------------------

    async def instance_types(self, nodepool: Obj) -> Sequence[InstanceType]:
        ref = ((((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef")) or {}
        pool = (nodepool.get("metadata") or {}).get("name", "")
        name, spec = self.nodeclass_for({"metadata": {"name": f"NodePool {pool}"}, "spec": {"nodeClassRef": ref}})
        return (await self._types_for(name, spec)).types

    async def _price_tables(self, location: str) -> tuple[dict[str, float], dict[str, float]]:
        now = self._clock.monotonic()
        cached = self._prices.get(location)
        if cached is not None and now - cached[0] < PRICES_REFRESH_SECONDS:
            return cached[1], cached[2]
        on_demand, spot = shipped_prices(location)
        try:
            live_od, live_spot = retail_prices(await self.api.retail_prices(location))
        except (AzureError, OSError) as err:
            log.warning("azure.retail_prices_unavailable", location=location, error=str(err))
        else:
            on_demand.update(live_od)
            spot.update(live_spot)
        self._prices[location] = (now, on_demand, spot)
        return on_demand, spot

    async def _reservations(self, spec: AKSNodeClassSpec) -> tuple[Reservation, ...]:
        group_id = spec.capacity_reservation_group_id
        if not group_id:
            return ()
        parts = group_id.split("/")
        rg, group = parts[4], parts[-1]
        rows = await self.api.call(
            spec.subscription_id,
            "capacityReservations.list",
            lambda c: _collect(c.capacity_reservations.list_by_capacity_reservation_group(rg, group)),
        )
        out = []
        for row in rows:
            full = as_dict(
                await self.api.call(
                    spec.subscription_id,
                    "capacityReservations.get",
                    partial(_reservation_view, rg=rg, group=group, name=str(row["name"])),
                )
            )
            sku = full.get("sku") or {}
            used = ((full.get("properties") or {}).get("instanceView") or {}).get("utilizationInfo") or {}
            allocated = len(used.get("virtualMachinesAllocated") or [])
            rid = str(full.get("id"))
            zone = f"{spec.location}-{(full.get('zones') or ['1'])[0]}"
            free = int(sku.get("capacity") or 0) - allocated - self._reserved_used.get(rid, 0)
            out.append(Reservation(id=rid, size=str(sku.get("name")), zone=zone, available=free))
        return tuple(out)

    async def _types_for(self, name: str, spec: AKSNodeClassSpec) -> _TypesCache:
        now = self._clock.monotonic()
        try:
            reservations = await self._reservations(spec)
        except AzureError as err:
            raise NodeClassNotReadyError(f"cannot read the capacity reservation group of {name!r}: {err}") from None
        key = (spec.location, tuple(spec.zones), spec.os_disk_size_gb, reservations)
        cached = self._types.get(name)
        if cached is not None and cached.key == key and now - cached.at < self._ttl:
            return cached
        on_demand, spot = await self._price_tables(spec.location)
        try:
            rows = await self.api.call(
                spec.subscription_id,
                "resourceSkus.list",
                lambda c: _collect(c.resource_skus.list(filter=f"location eq '{spec.location}'")),
            )
        except AzureError as err:
            if cached is not None:
                return cached
            raise NodeClassNotReadyError(f"cannot list the VM sizes of {spec.location}: {err}") from None
        allowed = {f"{spec.location}-{z}" for z in spec.zones}
        types: list[InstanceType] = []
        for row in rows:
            if row.get("resourceType") != "virtualMachines":
                continue
            size = str(row["name"])
            zones = offered_zones(row, spec.location)
            if allowed:
                zones &= allowed
            offerings = build_offerings(
                name=size, zones=zones, on_demand=on_demand, spot=spot, reservations=reservations
            )
            if not offerings:
                continue
            it = build_instance_type(row, os_disk_gib=spec.os_disk_size_gb, offerings=offerings)
            if it is not None:
                types.append(it)
        entry = _TypesCache(at=now, key=key, types=tuple(sorted(types, key=lambda t: t.name)))
        self._types[name] = entry
        return entry

    # --- create ------------------------------------------------------------------------------

    async def create(self, nodeclaim: Obj) -> Instance:
        name = str(nodeclaim["metadata"]["name"])
        if not VM_NAME.match(name):
            raise CreateError(f"NodeClaim {name!r} cannot name an Azure VM", reason="InvalidInstanceName")
        nc_name, spec = self.nodeclass_for(nodeclaim)
        cache = await self._types_for(nc_name, spec)
        existing = await self._get_vm(spec.subscription_id, spec.resource_group, name)
        if existing is not None:
            state = _state(existing)
            if state in LIVE_STATES and _tags(existing).get(TAG_CLUSTER) == self.cluster_name:
                log.info("azure.vm_found", nodeclaim=name, reason="already launched")
                return self._instance(existing)
            if state == "Failed":  # an earlier attempt's failed allocation: out of the way first
                await self._delete_vm(spec, name)
        fitting = compatible(nodeclaim=nodeclaim, catalog=cache.types)
        if not fitting:
            raise CreateError(
                f"no Azure VM size offered to AKSNodeClass {nc_name!r} fits NodeClaim {name}",
                reason="NoCompatibleInstanceType",
            )
        unavailable = self._unavailable.current() if self._unavailable is not None else frozenset()
        tier = {CAPACITY_TYPE_RESERVED: 0, CAPACITY_TYPE_SPOT: 1, CAPACITY_TYPE_ON_DEMAND: 2}
        candidates = launch_order(
            (c for c in fitting if c.offering.available and c.key not in unavailable), nodeclaim=nodeclaim, tiers=tier
        )
        if not candidates:
            raise InsufficientCapacityError(f"no available offering for NodeClaim {name}", offerings=())
        reservations = await self._reservations(spec) if spec.capacity_reservation_group_id else ()
        refused: list[OfferingId] = []
        errors: list[str] = []
        for c in candidates[:MAX_ATTEMPTS]:
            reservation = None
            if c.offering.capacity_type == CAPACITY_TYPE_RESERVED:
                reservation = next(
                    (
                        r
                        for r in reservations
                        if r.size == c.instance_type.name and r.zone == c.offering.zone and r.available > 0
                    ),
                    None,
                )
                if reservation is None:
                    continue
            body = vm_body(nodeclaim, spec, c, reservation=reservation, cluster_name=self.cluster_name)
            try:
                vm = await self.api.call(
                    spec.subscription_id,
                    "virtualMachines.createOrUpdate",
                    partial(_create_vm, rg=spec.resource_group, name=name, body=body),
                )
            except AzureError as err:
                if err.code in CAPACITY_CODES:
                    refused.append(c.key)
                    errors.append(f"{c.key.instance_type}/{c.key.zone}/{c.key.capacity_type}: {err.code}")
                    log.info("azure.offering_refused", nodeclaim=name, offering=errors[-1])
                    await self._delete_vm(spec, name)
                    continue
                raise CreateError(f"creating VM {name} failed: {err}", reason=err.code) from None
            if reservation is not None:
                self._reserved_used[reservation.id] = self._reserved_used.get(reservation.id, 0) + 1
            log.info(
                "azure.vm_launched",
                nodeclaim=name,
                size=c.instance_type.name,
                zone=c.offering.zone,
                capacity_type=c.offering.capacity_type,
                price=c.offering.price,
            )
            return self._instance(as_dict(vm), refused=tuple(refused))
        raise InsufficientCapacityError(
            f"no capacity for NodeClaim {name} in {len(refused)} offering(s) tried: {'; '.join(errors) or 'none'}",
            offerings=tuple(refused),
        )

    async def _get_vm(self, subscription: str, rg: str, name: str) -> Obj | None:
        try:
            return as_dict(
                await self.api.call(subscription, "virtualMachines.get", lambda c: c.virtual_machines.get(rg, name))
            )
        except AzureError as err:
            if err.status == 404:
                return None
            raise

    async def _delete_vm(self, spec: AKSNodeClassSpec, name: str) -> None:
        try:
            await self.api.call(
                spec.subscription_id,
                "virtualMachines.delete",
                lambda c: _lro(c.virtual_machines.begin_delete(spec.resource_group, name)),
            )
        except AzureError as err:
            if err.status != 404:
                raise

    def _instance(self, raw: Obj, *, refused: tuple[OfferingId, ...] = ()) -> Instance:
        props = raw.get("properties") or {}
        location = str(raw.get("location") or "")
        zone = f"{location}-{(raw.get('zones') or ['1'])[0]}"
        if props.get("priority") == "Spot":
            capacity_type = CAPACITY_TYPE_SPOT
        elif props.get("capacityReservation"):
            capacity_type = CAPACITY_TYPE_RESERVED
        else:
            capacity_type = CAPACITY_TYPE_ON_DEMAND
        size = str((props.get("hardwareProfile") or {}).get("vmSize") or "")
        cached = next((it for c in self._types.values() for it in c.types if it.name == size), None)
        labels: dict[str, str] = {}
        price = 0.0
        if cached is not None:
            offering = next((o for o in cached.offerings if o.zone == zone and o.capacity_type == capacity_type), None)
            if offering is not None:
                labels = offering_labels(cached, offering)
                price = offering.price
        labels[LABEL_REGION] = location
        state = {"Creating": "pending", "Updating": "pending", "Succeeded": "running", "Deleting": "terminating"}.get(
            _state(raw), _state(raw).lower()
        )
        return Instance(
            provider_id=provider_id_of(str(raw.get("id"))),
            nodeclaim=_tags(raw).get(TAG_NODECLAIM, str(raw.get("name"))),
            instance_type=size,
            zone=zone,
            capacity_type=capacity_type,
            image_id=_image_of(raw),
            price=price,
            capacity=cached.capacity.to_quantities() if cached else {},
            allocatable=cached.allocatable.to_quantities() if cached else {},
            labels=labels,
            state=state,
            refused=refused,
        )

    def _groups(self) -> list[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        for name in list(self._nodeclasses()):
            try:
                _, spec = self.nodeclass_for({"metadata": {"name": "gc"}, "spec": {"nodeClassRef": {"name": name}}})
            except NodeClassNotReadyError:
                continue
            out.add((spec.subscription_id, spec.resource_group))
        return sorted(out)

    async def list(self) -> list[Instance]:
        found: list[Obj] = []
        for subscription, rg in self._groups():
            rows = await self.api.call(subscription, "virtualMachines.list", partial(_list_vms, rg=rg))
            found += [r for r in rows if _tags(r).get(TAG_CLUSTER) == self.cluster_name and _state(r) in LIVE_STATES]
        return [self._instance(r) for r in found]

    async def get(self, provider_id: str) -> Instance:
        parsed = parse_provider_id(provider_id)
        if parsed is None:
            raise NodeClaimNotFoundError(f"{provider_id!r} is not an azure providerID")
        raw = await self._get_vm(*parsed)
        if raw is None or _tags(raw).get(TAG_CLUSTER) != self.cluster_name or _state(raw) not in LIVE_STATES:
            raise NodeClaimNotFoundError(f"no live VM {parsed[2]} of cluster {self.cluster_name}")
        return self._instance(raw)

    async def delete(self, nodeclaim: Obj) -> None:
        name = str(nodeclaim["metadata"]["name"])
        parsed = parse_provider_id((nodeclaim.get("status") or {}).get("providerID"))
        if parsed is None:
            try:
                _, spec = self.nodeclass_for(nodeclaim)
            except NodeClassNotReadyError:
                raise NodeClaimNotFoundError(f"NodeClaim {name} has no azure VM it can find") from None
            parsed = (spec.subscription_id, spec.resource_group, name)
        subscription, rg, vm = parsed
        raw = await self._get_vm(subscription, rg, vm)
        if raw is None or _tags(raw).get(TAG_CLUSTER) != self.cluster_name:
            raise NodeClaimNotFoundError(f"VM {vm} of NodeClaim {name} is gone")
        if _state(raw) != "Deleting":
            try:
                # begun, not awaited: the VM goes to Deleting now, and get() says so until it is gone
                await self.api.call(
                    subscription, "virtualMachines.delete", lambda c: c.virtual_machines.begin_delete(rg, vm)
                )
            except AzureError as err:
                if err.status == 404:
                    raise NodeClaimNotFoundError(f"VM {vm} is gone") from None
                raise CreateError(f"deleting VM {vm} failed: {err}", reason=err.code) from None
        log.info("azure.vm_deleting", nodeclaim=name, vm=vm)

    # --- drift -------------------------------------------------------------------------------

    async def is_drifted(self, nodeclaim: Obj) -> str | None:
        parsed = parse_provider_id((nodeclaim.get("status") or {}).get("providerID"))
        if parsed is None:
            return None
        try:
            nc_name, spec = self.nodeclass_for(nodeclaim)
        except NodeClassNotReadyError:
            return None
        raw = await self._get_vm(*parsed)
        if raw is None:
            return None
        props = raw.get("properties") or {}
        size = str((props.get("hardwareProfile") or {}).get("vmSize") or "")
        cache = self._types.get(nc_name)
        it = next((t for t in cache.types if t.name == size), None) if cache else None
        gpu = it is not None and "nvidia.com/gpu" in it.capacity.to_quantities()
        wanted = spec.gpu_image_id if gpu and spec.gpu_image_id else spec.image_id
        if _image_of(raw) and _image_of(raw).lower() != wanted.lower():
            return f"ImageDrift: image {_image_of(raw)} is no longer AKSNodeClass {nc_name}'s"
        subnet = _subnet_of(raw)
        if subnet and subnet.lower() != spec.vnet_subnet_id.lower():
            return f"SubnetDrift: subnet {subnet} is no longer AKSNodeClass {nc_name}'s"
        identities = {i.lower() for i in ((raw.get("identity") or {}).get("userAssignedIdentities") or {})}
        if identities != {i.lower() for i in spec.managed_identities}:
            return f"IdentityDrift: the VM's identities {sorted(identities)} differ from AKSNodeClass {nc_name}'s"
        return None


async def _reservation_view(client: Any, *, rg: str, group: str, name: str) -> Any:
    return await client.capacity_reservations.get(rg, group, name, expand="instanceView")


async def _create_vm(client: Any, *, rg: str, name: str, body: Obj) -> Any:
    return await _lro(client.virtual_machines.begin_create_or_update(rg, name, body))


async def _list_vms(client: Any, *, rg: str) -> list[Obj]:
    return await _collect(client.virtual_machines.list(rg))


async def _collect(pager: Any) -> list[Obj]:
    return [as_dict(item) async for item in pager]


async def _lro(begin: Any) -> Any:
    poller = await begin
    return await poller.result()


def _tags(raw: Obj) -> dict[str, str]:
    return {str(k): str(v) for k, v in (raw.get("tags") or {}).items()}


def _state(raw: Obj) -> str:
    return str((raw.get("properties") or {}).get("provisioningState") or "")


def _image_of(raw: Obj) -> str:
    ref = ((raw.get("properties") or {}).get("storageProfile") or {}).get("imageReference") or {}
    return str(ref.get("communityGalleryImageId") or ref.get("sharedGalleryImageId") or ref.get("id") or "")


def _subnet_of(raw: Obj) -> str:
    configs = ((raw.get("properties") or {}).get("networkProfile") or {}).get("networkInterfaceConfigurations") or []
    for config in configs:
        for ip in (config.get("properties") or {}).get("ipConfigurations") or []:
            subnet = ((ip.get("properties") or {}).get("subnet") or {}).get("id")
            if subnet:
                return str(subnet)
    return ""
