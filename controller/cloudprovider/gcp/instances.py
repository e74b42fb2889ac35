"""The gcp provider's reads of its instances: the cluster's labelled instances found, listed and
read back as ``Instance`` (``get``, ``list``), deleted, and drift (image, subnetwork, service
account). :class:`InstanceReads` is that part of
:class:`~controller.cloudprovider.gcp.provider.GCPCloudProvider`; ``provider.py`` launches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import structlog

from api.v1.labels import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_REGION,
)
from controller.clock import Clock
from controller.cloudprovider.gcp.api import GCPApi, GCPError
from controller.cloudprovider.gcp.instance import (
    LABEL_CLUSTER,
    METADATA_IMAGE,
    alive,
    parse_provider_id,
    provider_id_of,
)
from controller.cloudprovider.gcp.instancetypes import (
    TypesCache,
)
from controller.cloudprovider.gcp.nodeclass import (
    NodeClassResolver,
    ResolvedNodeClass,
    last_segment,
    short_path,
)
from controller.cloudprovider.kwok.offerings import offering_labels
from controller.cloudprovider.types import (
    CreateError,
    Instance,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    OfferingId,
)

log = structlog.get_logger()
Obj = dict[str, Any]
DRIFT_CACHE_SECONDS: Final = 30.0


class InstanceReads:
    """Find, list, get, delete and drift over the instances labelled with the cluster's name."""

    api: GCPApi
    cluster_name: str
    cluster_label: str
    _clock: Clock
    _resolver: NodeClassResolver
    _types: dict[str, TypesCache]
    _listed: tuple[float, dict[str, Obj]] | None

    async def nodeclass_for(self, nodeclaim: Obj) -> ResolvedNodeClass:
        raise NotImplementedError

    async def _find(self, nodeclass: ResolvedNodeClass, name: str, *, zones: Sequence[str] = ()) -> Obj | None:
        """The live instance named ``name`` of this cluster in the NodeClass's zones (or ``zones``)."""
        project = nodeclass.spec.project
        for zone in zones or nodeclass.zones:
            try:
                raw = await self.api.compute("GET", f"projects/{project}/zones/{zone}/instances/{name}")
            except GCPError as err:
                if err.status == 404:
                    continue
                raise
            if (raw.get("labels") or {}).get(LABEL_CLUSTER) == self.cluster_label and alive(raw):
                return raw
        return None

    def _instance(self, raw: Obj, *, refused: tuple[OfferingId, ...] = ()) -> Instance:
        zone = last_segment(str(raw.get("zone") or ""))
        project = short_path(str(raw.get("selfLink") or "")).split("/")[1] if raw.get("selfLink") else ""
        scheduling = raw.get("scheduling") or {}
        if scheduling.get("provisioningModel") == "SPOT" or scheduling.get("preemptible"):
            capacity_type = CAPACITY_TYPE_SPOT
        elif (raw.get("reservationAffinity") or {}).get("consumeReservationType") == "SPECIFIC_RESERVATION":
            capacity_type = CAPACITY_TYPE_RESERVED
        else:
            capacity_type = CAPACITY_TYPE_ON_DEMAND
        machine = last_segment(str(raw.get("machineType") or ""))
        accelerators = raw.get("guestAccelerators") or []
        it_name = machine
        if accelerators and machine.startswith("n1-"):
            acc = accelerators[0]
            accelerator = last_segment(str(acc.get("acceleratorType")))
            it_name = f"{machine}_{accelerator}_{int(acc.get('acceleratorCount') or 0)}"
        cached = next((it for c in self._types.values() for it in c.types if it.name == it_name), None)
        labels: dict[str, str] = {}
        price = 0.0
        if cached is not None:
            offering = next((o for o in cached.offerings if o.zone == zone and o.capacity_type == capacity_type), None)
            if offering is not None:
                labels = offering_labels(cached, offering)
                price = offering.price
        if zone:
            labels[LABEL_REGION] = zone.rsplit("-", 1)[0]
        status = str(raw.get("status") or "")
        state = {"PROVISIONING": "pending", "STAGING": "pending", "RUNNING": "running"}.get(status, "")
        if not state:
            state = "terminating" if status in ("STOPPING", "SUSPENDING") else status.lower()
        items = {str(i.get("key")): str(i.get("value") or "") for i in (raw.get("metadata") or {}).get("items") or []}
        return Instance(
            provider_id=provider_id_of(project=project, zone=zone, name=str(raw.get("name"))),
            nodeclaim=str(raw.get("name")),
            instance_type=it_name,
            zone=zone,
            capacity_type=capacity_type,
            image_id=items.get(METADATA_IMAGE, ""),
            price=price,
            capacity=cached.capacity.to_quantities() if cached else {},
            allocatable=cached.allocatable.to_quantities() if cached else {},
            labels=labels,
            state=state,
            refused=refused,
        )

    async def _list_raw(self) -> list[Obj]:
        projects = sorted({v.spec.project for v in self._resolved()})
        out: list[Obj] = []
        for project in projects:
            token: str | None = None
            while True:
                page = await self.api.compute(
                    "GET",
                    f"projects/{project}/aggregated/instances",
                    params={
                        "filter": f'labels.{LABEL_CLUSTER} = "{self.cluster_label}"',
                        **({"pageToken": token} if token else {}),
                    },
                )
                for scoped in (page.get("items") or {}).values():
                    out += scoped.get("instances") or []
                token = page.get("nextPageToken")
                if not token:
                    break
        return [i for i in out if (i.get("labels") or {}).get(LABEL_CLUSTER) == self.cluster_label]

    def _resolved(self) -> list[ResolvedNodeClass]:
        names = list(self._resolver.names())
        return [v for v in (self._resolver.cached(n) for n in names) if v is not None]

    async def list(self) -> list[Instance]:
        for name in list(self._resolver.names()):
            try:
                await self._resolver.resolve(name, who="garbage collection")
            except NodeClassNotReadyError:
                continue
        return [self._instance(i) for i in await self._list_raw() if alive(i)]

    async def get(self, provider_id: str) -> Instance:
        parsed = parse_provider_id(provider_id)
        if parsed is None:
            raise NodeClaimNotFoundError(f"{provider_id!r} is not a gce providerID")
        project, zone, name = parsed
        try:
            raw = await self.api.compute("GET", f"projects/{project}/zones/{zone}/instances/{name}")
        except GCPError as err:
            if err.status == 404:
                raise NodeClaimNotFoundError(f"no instance {name} in {zone}") from None
            raise
        if (raw.get("labels") or {}).get(LABEL_CLUSTER) != self.cluster_label or not alive(raw):
            raise NodeClaimNotFoundError(f"no live instance {name} of cluster {self.cluster_name} in {zone}")
        return self._instance(raw)

    async def delete(self, nodeclaim: Obj) -> None:
        name = str(nodeclaim["metadata"]["name"])
        parsed = parse_provider_id((nodeclaim.get("status") or {}).get("providerID"))
        if parsed is None:
            try:
                nodeclass = await self.nodeclass_for(nodeclaim)
            except NodeClassNotReadyError:
                raise NodeClaimNotFoundError(f"NodeClaim {name} has no gce instance it can find") from None
            raw = await self._find(nodeclass, name)
            if raw is None:
                raise NodeClaimNotFoundError(f"NodeClaim {name} has no gce instance")
            parsed = (nodeclass.spec.project, last_segment(str(raw.get("zone"))), name)
        project, zone, instance = parsed
        try:
            raw = await self.api.compute("GET", f"projects/{project}/zones/{zone}/instances/{instance}")
        except GCPError as err:
            if err.status == 404:
                raise NodeClaimNotFoundError(f"instance {instance} of NodeClaim {name} is gone") from None
            raise CreateError(f"instances.get {instance} failed: {err}", reason=err.reason) from None
        if (raw.get("labels") or {}).get(LABEL_CLUSTER) != self.cluster_label:
            raise NodeClaimNotFoundError(f"instance {instance} is not one of cluster {self.cluster_name}")
        try:
            await self.api.compute("DELETE", f"projects/{project}/zones/{zone}/instances/{instance}")
        except GCPError as err:
            if err.status == 404:
                raise NodeClaimNotFoundError(f"instance {instance} is gone") from None
            raise CreateError(f"instances.delete {instance} failed: {err}", reason=err.reason) from None
        log.info("gcp.instance_deleting", nodeclaim=name, instance=instance, zone=zone)

    # --- drift -------------------------------------------------------------------------------

    async def _all_instances(self) -> Mapping[str, Obj]:
        now = self._clock.monotonic()
        if self._listed is None or now - self._listed[0] >= DRIFT_CACHE_SECONDS:
            found = await self._list_raw()
            self._listed = (now, {str(i.get("name")): i for i in found if alive(i)})
        return self._listed[1]

    async def is_drifted(self, nodeclaim: Obj) -> str | None:
        parsed = parse_provider_id((nodeclaim.get("status") or {}).get("providerID"))
        if parsed is None:
            return None
        try:
            nodeclass = await self.nodeclass_for(nodeclaim)
        except NodeClassNotReadyError:
            return None  # a NodeClass being fixed is not a reason to replace machines
        raw = (await self._all_instances()).get(parsed[2])
        if raw is None:
            return None
        gpu = bool(raw.get("guestAccelerators"))
        cache = self._types.get(nodeclass.name)
        instance = self._instance(raw)
        if cache is not None and instance.instance_type in cache.shapes:
            gpu = cache.shapes[instance.instance_type].gpus > 0
        choice = nodeclass.image_for(gpu=gpu)
        if choice is not None and instance.image_id and instance.image_id != choice.image:
            return f"ImageDrift: image {instance.image_id} is no longer selected by GCENodeClass {nodeclass.name}"
        subnets = [short_path(str(n.get("subnetwork") or "")) for n in raw.get("networkInterfaces") or []]
        if subnets and subnets[0] != nodeclass.subnetwork:
            return (
                f"SubnetworkDrift: subnetwork {subnets[0]} is no longer selected by GCENodeClass {nodeclass.name} "
                f"({nodeclass.subnetwork})"
            )
        accounts = [str(a.get("email") or "") for a in raw.get("serviceAccounts") or []]
        wanted = nodeclass.service_account(choice)
        if (accounts[0] if accounts else "") != wanted:
            return (
                f"ServiceAccountDrift: the instance runs as {accounts[0] if accounts else 'no service account'}, "
                f"GCENodeClass {nodeclass.name} says {wanted or 'none'}"
            )
        return None
