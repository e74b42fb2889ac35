"""A GCENodeClass resolved against Compute Engine: zones, the subnetwork, boot images (families to
their newest image, instance templates to their properties) and the selected reservations.

Resolution is asked of the API at most once per ``RESOLVE_TTL_SECONDS`` per NodeClass (and again at
once when its spec changes); a failure keeps the last good resolution, or, with none, is a
NodeClassNotReadyError whose message says what did not resolve.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from api.v1.gcenodeclass import GCENodeClass, GCENodeClassSpec, GKENodePool
from controller.clock import Clock
from controller.cloudprovider.gcp.api import GCPApi, GCPError
from controller.cloudprovider.gcp.instancetypes import Reservation
from controller.cloudprovider.types import NodeClassNotReadyError

Obj = dict[str, Any]
RESOLVE_TTL_SECONDS: Final = 60.0
DEFAULT_BOOT_DISK_GIB: Final = 100


@dataclass(frozen=True, slots=True)
class ImageChoice:
    gpu: bool | None  # the term applies to GPU machines (True), others (False), or both (None)
    image: str  # the resolved source image (a selfLink path ``projects/<p>/global/images/<name>``)
    template: Obj | None = None  # the instance template's ``properties`` when the term names one
    template_path: str = ""  # ``projects/<p>/global|regions/<r>/instanceTemplates/<name>``


@dataclass(frozen=True, slots=True)
class ResolvedNodeClass:
    name: str
    spec: GCENodeClassSpec
    zones: tuple[str, ...]
    subnetwork: str  # ``projects/<p>/regions/<r>/subnetworks/<name>``
    images: tuple[ImageChoice, ...]
    reservations: tuple[Reservation, ...]

    def image_for(self, *, gpu: bool) -> ImageChoice | None:
        return next((c for c in self.images if c.gpu is None or c.gpu == gpu), None)

    @property
    def boot_disk_gib(self) -> int:
        boot = next((d for d in self.spec.disks if d.boot), None)
        return boot.size_gib if boot is not None and boot.size_gib else DEFAULT_BOOT_DISK_GIB

    def service_account(self, choice: ImageChoice | None) -> str:
        """The email the instances run as (the NodeClass's, else the template's, else none)."""
        if self.spec.service_account is not None:
            return self.spec.service_account.email
        accounts = ((choice.template if choice else None) or {}).get("serviceAccounts") or []
        return str(accounts[0].get("email") or "") if accounts else ""


def short_path(url: str) -> str:
    """``projects/...`` from a full selfLink (``https://www.googleapis.com/compute/v1/projects/...``)."""
    index = url.find("projects/")
    return url[index:] if index >= 0 else url


def last_segment(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


@dataclass(slots=True)
class _Entry:
    at: float
    key: str
    view: ResolvedNodeClass


class NodeClassResolver:
    def __init__(self, api: GCPApi, *, nodeclasses: Callable[[], Mapping[str, Obj]], clock: Clock) -> None:
        self._api = api
        self._nodeclasses = nodeclasses
        self._clock = clock
        self._cache: dict[str, _Entry] = {}
        self.used: dict[str, int] = {}  # reservation -> launches into it since its count was last read
        self._seen: dict[str, int] = {}  # reservation -> the free count last read

    async def resolve(self, name: str, *, who: str) -> ResolvedNodeClass:
        obj = self._nodeclasses().get(name)
        if obj is None:
            raise NodeClassNotReadyError(
                f"GCENodeClass {name!r} (nodeClassRef of {who}) does not exist: create it, or point "
                f"spec.template.spec.nodeClassRef at an existing one"
            )
        try:
            model = GCENodeClass.model_validate(obj)
        except ValidationError as err:
            raise NodeClassNotReadyError(f"GCENodeClass {name!r} is invalid: {err.errors()[0]['msg']}") from None
        key = model.spec.model_dump_json()
        cached = self._cache.get(name)
        now = self._clock.monotonic()
        if cached is not None and cached.key == key and now - cached.at < RESOLVE_TTL_SECONDS:
            return cached.view
        try:
            view = await self._resolve(name, model.spec)
        except GCPError as err:
            if cached is not None and cached.key == key:
                return cached.view
            raise NodeClassNotReadyError(f"GCENodeClass {name!r} does not resolve: {err}") from None
        self._cache[name] = _Entry(at=now, key=key, view=view)
        return view

    def names(self) -> list[str]:
        return list(self._nodeclasses())

    def cached(self, name: str) -> ResolvedNodeClass | None:
        entry = self._cache.get(name)
        return entry.view if entry is not None else None

    async def _resolve(self, name: str, spec: GCENodeClassSpec) -> ResolvedNodeClass:
        project, region = spec.project, spec.region
        found = await self._api.compute("GET", f"projects/{project}/regions/{region}")
        zones = sorted(last_segment(z) for z in found.get("zones") or [])
        if spec.zones:
            missing = sorted(set(spec.zones) - set(zones))
            if missing:
                raise NodeClassNotReadyError(f"GCENodeClass {name!r}: zones {missing} are not in region {region}")
            zones = sorted(spec.zones)
        subnetwork = ""
        for term in spec.subnetwork_selector_terms:
            try:
                found = await self._api.compute(
                    "GET", f"projects/{term.project or project}/regions/{region}/subnetworks/{term.name}"
                )
            except GCPError as err:
                if err.status == 404:
                    continue
                raise
            subnetwork = short_path(str(found.get("selfLink") or ""))
            break
        if not subnetwork:
            raise NodeClassNotReadyError(
                f"GCENodeClass {name!r}: no subnetwork of subnetworkSelectorTerms exists in {region}"
            )
        images: list[ImageChoice] = []
        for image_term in spec.image_selector_terms:
            if image_term.image is not None:
                image = await self._api.compute("GET", short_path(image_term.image))
                images.append(ImageChoice(gpu=image_term.gpu, image=short_path(str(image.get("selfLink") or ""))))
            else:
                if image_term.instance_template is not None:
                    path = f"projects/{project}/global/instanceTemplates/{image_term.instance_template}"
                    what = f"instance template {image_term.instance_template!r}"
                else:
                    assert image_term.gke_node_pool is not None  # the model admits one of the three
                    path = await self._node_pool_template(name, image_term.gke_node_pool, project=project)
                    what = f"the template of GKE node pool {image_term.gke_node_pool.name!r}"
                template = await self._api.compute("GET", path)
                properties: Obj = template.get("properties") or {}
                boot: Obj = next((d for d in properties.get("disks") or [] if d.get("boot")), {})
                source = str((boot.get("initializeParams") or {}).get("sourceImage") or "")
                if not source:
                    raise NodeClassNotReadyError(f"GCENodeClass {name!r}: {what} has no boot image")
                images.append(
                    ImageChoice(gpu=image_term.gpu, image=short_path(source), template=properties, template_path=path)
                )
        reservations: list[Reservation] = []
        for r in spec.reservation_selector_terms:
            owner = r.project or project
            for zone in zones:
                try:
                    found = await self._api.compute("GET", f"projects/{owner}/zones/{zone}/reservations/{r.name}")
                except GCPError as err:
                    if err.status == 404:
                        continue
                    raise
                reservations.append(self._reservation(found, owner=owner, zone=zone))
        return ResolvedNodeClass(
            name=name,
            spec=spec,
            zones=tuple(zones),
            subnetwork=subnetwork,
            images=tuple(images),
            reservations=tuple(reservations),
        )

    async def _node_pool_template(self, name: str, pool: GKENodePool, *, project: str) -> str:
        """The instance template a GKE node pool's instance groups use now (GKE API, then the group)."""
        owner = pool.project or project
        found = await self._api.container(
            "GET", f"projects/{owner}/locations/{pool.location}/clusters/{pool.cluster}/nodePools/{pool.name}"
        )
        groups = [short_path(str(u)) for u in found.get("instanceGroupUrls") or []]
        if not groups:
            raise NodeClassNotReadyError(
                f"GCENodeClass {name!r}: GKE node pool {pool.name!r} of cluster {pool.cluster!r} has no instance group"
            )
        group = await self._api.compute("GET", groups[0].replace("/instanceGroups/", "/instanceGroupManagers/"))
        template = short_path(str(group.get("instanceTemplate") or ""))
        if not template:
            raise NodeClassNotReadyError(f"GCENodeClass {name!r}: instance group {groups[0]} has no template")
        return template

    def _reservation(self, raw: Obj, *, owner: str, zone: str) -> Reservation:
        specific = raw.get("specificReservation") or {}
        props = specific.get("instanceProperties") or {}
        machine = str(props.get("machineType") or "")
        accelerators = props.get("guestAccelerators") or []
        instance_type = machine
        if accelerators and machine.startswith("n1-"):
            acc = accelerators[0]
            instance_type = f"{machine}_{acc.get('acceleratorType')}_{int(acc.get('acceleratorCount') or 0)}"
        ready = str(raw.get("status") or "READY") == "READY"
        free = int(specific.get("count") or 0) - int(specific.get("inUseCount") or 0) if ready else 0
        key = f"{owner}/{zone}/{raw.get('name')}"
        if self._seen.get(key) != free:  # a fresh count from GCE replaces ours
            self._seen[key] = free
            self.used[key] = 0
        return Reservation(
            name=str(raw.get("name")),
            project=owner,
            zone=zone,
            instance_type=instance_type,
            available=free,
        )

    def room(self, reservation: Reservation) -> Reservation:
        """The reservation with what joiner's own launches since the count was read left of it."""
        key = f"{reservation.project}/{reservation.zone}/{reservation.name}"
        left = reservation.available - self.used.get(key, 0)
        return Reservation(
            name=reservation.name,
            project=reservation.project,
            zone=reservation.zone,
            instance_type=reservation.instance_type,
            available=left,
        )

    def consumed(self, reservation: Reservation) -> None:
        key = f"{reservation.project}/{reservation.zone}/{reservation.name}"
        self.used[key] = self.used.get(key, 0) + 1
