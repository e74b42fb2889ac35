"""The aws cloud provider: NodeClaims become EC2 instances through one CreateFleet (instant) each.

* ``instance_types``: DescribeInstanceTypes for the types offered in the EC2NodeClass's zones, with
  on-demand prices from the shipped table, spot prices from the spot price history and the
  selected capacity reservations; cached for ``cache_ttl_seconds``.
* ``create``: one CreateFleet over the NodeClaim's candidate types x the subnets of its allowed
  zones, for one capacity type (reserved while a reservation has room, else spot when allowed,
  else on-demand), with a launch template per NodeClass + image (created once, then cached). The
  ClientToken is derived from the NodeClaim's uid, and an instance already tagged with the
  NodeClaim is returned instead of buying another, so a retried or repeated call buys once.
* ``delete``/``get``/``list`` see only instances tagged ``joiner.sh/cluster=<cluster name>``.
* ``is_drifted``: the instance's image, subnet or security groups are no longer what the NodeClass
  resolves to.
* capacity type of a launched instance (``get``/``list``): spot for a Spot instance; reserved while
  the capacity reservation it was launched into (EC2's ``CapacityReservationId``, else joiner's
  launch tag) is active; on-demand once EC2 says that reservation expired, was cancelled or is gone.
  The NodeClaim garbage collector relabels a reserved NodeClaim and Node that ``list`` reports so.

Errors: no capacity in any override -> InsufficientCapacityError naming the offerings (the lifecycle
marks them unavailable); anything else from AWS -> CreateError carrying the AWS error code.
Throttling and 5xx are retried inside :class:`AWSApi`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import UTC, datetime
from typing import Any, Final

import structlog

from api.v1.labels import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_NODEPOOL,
    LABEL_REGION,
)
from controller.clock import Clock
from controller.cloudprovider.aws.api import AWSApi, AWSError
from controller.cloudprovider.aws.bootstrap import (
    FAMILIES_WITH_BOOTSTRAP,
    BootTaint,
    ClusterInfo,
    UserDataError,
    family_of,
    user_data_for,
)
from controller.cloudprovider.aws.cluster import ClusterInfoSource, ClusterSettings
from controller.cloudprovider.aws.fleet import (
    ICE_CODES,
    MAX_OVERRIDES,
    SPOT_ROLE_FIX,
    TAG_CLUSTER,
    TAG_GANG,
    TAG_NODECLAIM,
    TAG_NODECLAIM_UID,
    TAG_NODECLASS,
    TAG_NODECLASS_HASH,
    TAG_RESERVATION,
    UNAVAILABLE_CODES,
    Refusal,
    fleet_request,
    gang_placement_group,
    image_for,
    nodeclass_hash,
    refused_offerings,
    resource_tags,
    tag_specifications,
    template_data,
)
from controller.cloudprovider.aws.gc import Collected
from controller.cloudprovider.aws.gc import collect as collect_garbage
from controller.cloudprovider.aws.instancetypes import (
    DEFAULT_ROOT_VOLUME_GIB,
    EFA_RESOURCE,
    Reservation,
    build_instance_type,
    build_offerings,
    efa_interfaces,
    latest_spot_prices,
    max_pods,
    on_demand_prices,
)
from controller.cloudprovider.aws.nodeclass import ResolvedNodeClass, instance_profile_name, resolved_view
from controller.cloudprovider.aws.pricing import OnDemandPrices
from controller.cloudprovider.kwok.offerings import Candidate, compatible, offering_labels
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


PROVIDER_ID_PREFIX: Final = "aws:///"
LIVE_STATES: Final = ("pending", "running", "stopping", "stopped", "shutting-down")
DEFAULT_CACHE_TTL_SECONDS: Final = 300.0
DRIFT_CACHE_SECONDS: Final = 30.0
SUBNET_CACHE_SECONDS: Final = 60.0
CAPACITY_BLOCK_DRAIN_SECONDS: Final = 40 * 60.0
GROUP_GRACE_SECONDS: Final = 600.0  # a per-gang placement group a launch just used is not collected
UNKNOWN_FREE_IPS: Final = 1 << 20  # a subnet DescribeSubnets did not count is not taken for full
RESERVATION_CHECK_SECONDS: Final = 60.0  # a reservation no NodeClass lists as active is asked about again after
# the states of a capacity reservation whose instances run on as plain on-demand ones
RESERVATION_ENDED_STATES: Final = frozenset({"expired", "cancelled", "failed"})


def provider_id_of(*, zone: str, instance_id: str) -> str:
    return f"{PROVIDER_ID_PREFIX}{zone}/{instance_id}"


def instance_id_of(provider_id: str | None) -> str | None:
    """``i-…`` from ``aws:///<zone>/i-…``; None for any other providerID."""
    if not provider_id or not provider_id.startswith(PROVIDER_ID_PREFIX):
        return None
    tail = provider_id.removeprefix(PROVIDER_ID_PREFIX).rsplit("/", 1)[-1]
    return tail if tail.startswith("i-") else None


@dataclass(frozen=True, slots=True)
class _TypesCache:
    at: float
    key: tuple[Any, ...]
    types: tuple[InstanceType, ...]
    architectures: Mapping[str, str]
    gpu_makers: Mapping[str, str]
    max_pods: Mapping[str, int]  # what the kubelet of each type is told: the pods its capacity says
    efa: Mapping[str, int] = dataclass_field(default_factory=dict)  # EFA interfaces per type


class AWSCloudProvider:
    name = "aws"

    def __init__(
        self,
        *,
        api: AWSApi,
        cluster_name: str,
        nodeclasses: Callable[[], Mapping[str, Obj]],
        clock: Clock,
        unavailable: UnavailableOfferings | None = None,
        prices: Mapping[str, float] | None = None,
        cache_ttl_seconds: float = DEFAULT_CACHE_TTL_SECONDS,
        loop: Any = None,
        pricing_refresh_seconds: float = 0.0,
        cluster_settings: ClusterSettings | None = None,
        cluster_source: ClusterInfoSource | None = None,
        gc_seconds: float = 0.0,
    ) -> None:
        self.api = api
        self.cluster_name = cluster_name
        self._nodeclasses = nodeclasses
        self._clock = clock
        self._unavailable = unavailable
        self._pricing = OnDemandPrices(api, prices if prices is not None else on_demand_prices(api.region), clock=clock)
        self._ttl = cache_ttl_seconds
        self._types: dict[str, _TypesCache] = {}
        self._templates: dict[str, str] = {}  # launch template name -> id
        self._reserved_used: dict[str, int] = {}  # reservation id -> launches since its status was read
        self._reserved_seen: dict[str, int] = {}  # reservation id -> availableInstanceCount last read
        self._loop = loop
        self._described: tuple[float, dict[str, Obj]] | None = None
        self._pricing_refresh = pricing_refresh_seconds
        self._cluster = cluster_source or ClusterInfoSource(api, cluster_name, cluster_settings)
        self._gc_seconds = gc_seconds
        self._groups_ensured: dict[str, float] = {}  # placement group -> when a launch last used it
        self._template_used: dict[str, float] = {}  # launch template -> when this process last used it
        self._started = clock.monotonic()
        self._ips_free: dict[str, int] = {}  # subnet id -> AvailableIpAddressCount last read
        self._ips_in_flight: dict[str, int] = {}  # subnet id -> addresses launched since then
        self._ips_read_at: dict[str, float] = {}  # NodeClass -> when its subnets were counted
        self._reservations_ended: set[str] = set()  # reservations EC2 said ended (they never come back)
        self._reservations_asked: dict[str, float] = {}  # reservation id -> when its state was last asked

    async def run(self) -> None:
        """The provider's own loops: the EC2NodeClass status controller, when one was given, and the
        on-demand price refresh, when it is on. Either alone lasts; the supervisor expects run() to."""
        loops = []
        if self._loop is not None:
            loops.append(self._loop.run())
        if self._pricing_refresh > 0:
            loops.append(self._refresh_prices_forever())
        if self._gc_seconds > 0:
            loops.append(self._collect_forever())
        if not loops:
            loops.append(asyncio.Event().wait())
        await asyncio.gather(*loops)

    async def refresh_prices(self) -> bool:
        """Refresh the on-demand prices now; False (prices kept) when the Price List API failed."""
        changed = await self._pricing.refresh()
        if changed:
            self._types.clear()  # the next instance_types() builds offerings at the new prices
        return changed is not None

    async def collect_garbage(self) -> Collected:
        """Delete the launch templates and instance profiles no EC2NodeClass needs (see aws/gc.py)."""
        classes = self._nodeclasses()
        needed: set[str] = set()
        for name, obj in classes.items():
            role = ((obj.get("spec") or {}).get("role")) or ""
            if role:
                needed.add(instance_profile_name(cluster=self.cluster_name, nodeclass=name, role=str(role)))
        in_use: set[str] = set()
        classes_in_use: set[str] = set()
        gangs_in_use: set[str] = set()
        for raw in await self._describe(filters=[{"Name": "instance-state-name", "Values": list(LIVE_STATES)}]):
            arn = str((raw.get("IamInstanceProfile") or {}).get("Arn") or "")
            if arn:
                in_use.add(arn.rsplit("/", 1)[-1])
            tags = {t["Key"]: t["Value"] for t in raw.get("Tags") or []}
            if tags.get(TAG_NODECLASS):
                classes_in_use.add(str(tags[TAG_NODECLASS]))
            if tags.get(TAG_GANG):
                gangs_in_use.add(str(tags[TAG_GANG]))
        now = self._clock.monotonic()
        found = await collect_garbage(
            self.api,
            cluster=self.cluster_name,
            nodeclasses=classes,
            needed_profiles=needed,
            profiles_in_use=in_use,
            classes_in_use=classes_in_use,
            gangs_in_use=gangs_in_use,
            groups_just_used={n for n, at in self._groups_ensured.items() if now - at < GROUP_GRACE_SECONDS},
            used_templates={name: now - at for name, at in self._template_used.items()},
            now=self._clock.now(),
            uptime_seconds=now - self._started,
        )
        for name in found.launch_templates:
            self._templates.pop(name, None)
            self._template_used.pop(name, None)
        return found

    async def _collect_forever(self) -> None:
        while True:
            await self._clock.sleep(self._gc_seconds)
            try:
                await self.collect_garbage()
            except AWSError as err:
                log.warning("aws.gc_failed", code=err.code, error=err.message)

    async def _refresh_prices_forever(self) -> None:
        while True:
            await self.refresh_prices()
            await self._clock.sleep(self._pricing_refresh)

    async def aclose(self) -> None:
        """Close the AWS clients (at shutdown)."""
        await self.api.close()

    # --- NodeClass ---------------------------------------------------------------------------

    def nodeclass_for(self, nodeclaim: Obj) -> ResolvedNodeClass:
        ref = (nodeclaim.get("spec") or {}).get("nodeClassRef") or {}
        ref_name = ref.get("name")
        claim = (nodeclaim.get("metadata") or {}).get("name")
        if not ref_name:
            raise NodeClassNotReadyError(f"{claim} has no spec.nodeClassRef.name")
        if ref.get("kind") not in (None, "EC2NodeClass"):
            raise NodeClassNotReadyError(
                f"{claim}'s nodeClassRef is a {ref.get('kind')}; the aws provider launches only EC2NodeClasses"
            )
        obj = self._nodeclasses().get(str(ref_name))
        if obj is None:
            raise NodeClassNotReadyError(
                f"EC2NodeClass {ref_name!r} (nodeClassRef of {claim}) does not exist: create it, or point "
                f"spec.template.spec.nodeClassRef at an existing one"
            )
        try:
            view = resolved_view(obj)
        except ValueError as err:
            raise NodeClassNotReadyError(f"EC2NodeClass {ref_name!r} is invalid: {err}") from None
        if not view.ready:
            raise NodeClassNotReadyError(f"EC2NodeClass {ref_name!r} is not Ready: {view.message}")
        return view

    # --- instance types ----------------------------------------------------------------------

    async def instance_types(self, nodepool: Obj) -> Sequence[InstanceType]:
        ref = ((((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef")) or {}
        pool = (nodepool.get("metadata") or {}).get("name", "")
        stub: Obj = {"metadata": {"name": f"NodePool {pool}"}, "spec": {"nodeClassRef": ref}}
        return (await self._types_for(self.nodeclass_for(stub))).types

    def _reservations(self, nodeclass: ResolvedNodeClass) -> tuple[Reservation, ...]:
        out = []
        for cr in nodeclass.capacity_reservations:
            rid = str(cr.get("id"))
            available = int(cr.get("availableInstanceCount") or 0)
            if self._reserved_seen.get(rid) != available:  # a fresh count from AWS replaces ours
                self._reserved_seen[rid] = available
                self._reserved_used[rid] = 0
            out.append(
                Reservation(
                    id=rid,
                    instance_type=str(cr.get("instanceType")),
                    zone=str(cr.get("availabilityZone")),
                    available=available - self._reserved_used.get(rid, 0),
                    capacity_block=cr.get("reservationType") == "capacity-block",
                )
            )
        return tuple(out)

    def _root_volume_gib(self, nodeclass: ResolvedNodeClass) -> int:
        mappings = nodeclass.model.spec.block_device_mappings
        root = next((m for m in mappings if m.root_volume), mappings[0] if mappings else None)
        size = root.ebs.volume_size if root is not None and root.ebs is not None else None
        if not size:
            return DEFAULT_ROOT_VOLUME_GIB
        number = int("".join(ch for ch in size if ch.isdigit()))
        return number * 1024 if size.endswith(("Ti", "T")) else number

    async def _types_for(self, nodeclass: ResolvedNodeClass) -> _TypesCache:
        reservations = self._reservations(nodeclass)
        raid0 = nodeclass.model.spec.instance_store_policy == "RAID0"
        key = (nodeclass.zones, reservations, self._root_volume_gib(nodeclass), raid0)
        cached = self._types.get(nodeclass.name)
        now = self._clock.monotonic()
        if cached is not None and cached.key == key and now - cached.at < self._ttl:
            return cached
        zones = list(nodeclass.zones)
        wanted = set(self._pricing.table) | {r.instance_type for r in reservations}
        try:
            # every type offered in the zones, pages of 1000, filtered here: an EC2 filter takes a
            # limited number of values, and the priced types are several hundred
            offered = await self.api.collect(
                "ec2",
                "describe_instance_type_offerings",
                key="InstanceTypeOfferings",
                LocationType="availability-zone",
                Filters=[{"Name": "location", "Values": zones}],
                MaxResults=1000,
            )
            zones_of: dict[str, set[str]] = {}
            for row in offered:
                if str(row["InstanceType"]) in wanted:
                    zones_of.setdefault(str(row["InstanceType"]), set()).add(str(row["Location"]))
            names = sorted(zones_of)
            rows: list[Obj] = []
            spot_rows: list[Obj] = []
            for i in range(0, len(names), 100):
                batch = names[i : i + 100]
                rows += await self.api.collect(
                    "ec2", "describe_instance_types", key="InstanceTypes", InstanceTypes=batch
                )
                spot_rows += await self.api.collect(
                    "ec2",
                    "describe_spot_price_history",
                    key="SpotPriceHistory",
                    InstanceTypes=batch,
                    ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
                    StartTime=self._clock.now(),
                    Filters=[{"Name": "availability-zone", "Values": zones}],
                )
        except AWSError as err:
            if cached is not None:
                log.warning("aws.instance_types_not_refreshed", nodeclass=nodeclass.name, error=str(err))
                return cached
            raise NodeClassNotReadyError(f"cannot list EC2 instance types: {err}") from None
        spot = latest_spot_prices(spot_rows)
        root = self._root_volume_gib(nodeclass)
        types: list[InstanceType] = []
        arch: dict[str, str] = {}
        makers: dict[str, str] = {}
        pods: dict[str, int] = {}
        efa: dict[str, int] = {}
        for row in rows:
            name = str(row["InstanceType"])
            offerings = build_offerings(
                name=name,
                zones=zones_of.get(name, set()),
                capacity_types=(CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_RESERVED),
                on_demand=self._pricing.table,
                spot=spot,
                reservations=reservations,
            )
            if not offerings:
                continue
            it = build_instance_type(row, root_volume_gib=root, offerings=offerings, raid0=raid0)
            types.append(it)
            arch[name] = it.labels.get("kubernetes.io/arch", "amd64")
            makers[name] = it.labels.get("joiner.sh/gpu-manufacturer", "")
            pods[name] = max_pods(row)  # the same function the capacity's pods came from
            efa[name] = efa_interfaces(row)
        entry = _TypesCache(
            at=now, key=key, types=tuple(types), architectures=arch, gpu_makers=makers, max_pods=pods, efa=efa
        )
        self._types[nodeclass.name] = entry
        return entry

    # --- create ------------------------------------------------------------------------------

    async def create(self, nodeclaim: Obj) -> Instance:
        meta = nodeclaim["metadata"]
        name = str(meta["name"])
        nodeclass = self.nodeclass_for(nodeclaim)
        cache = await self._types_for(nodeclass)  # also what describes an instance found below
        existing = await self._tagged(name, uid=str(meta.get("uid") or ""))
        if existing is not None:
            log.info("aws.instance_found", nodeclaim=name, instance=existing["InstanceId"], reason="already launched")
            return self._instance(existing)
        unavailable = self._unavailable.current() if self._unavailable is not None else frozenset()
        fitting = compatible(nodeclaim=nodeclaim, catalog=cache.types)
        if not fitting:
            raise CreateError(
                f"no EC2 instance type offered in the zones of EC2NodeClass {nodeclass.name!r} fits NodeClaim "
                f"{name}'s requirements and requests",
                reason="NoCompatibleInstanceType",
            )
        candidates = [c for c in fitting if c.offering.available and c.key not in unavailable]
        if not candidates:
            raise InsufficientCapacityError(
                f"no available offering of NodeClaim {name}'s candidate instance types in the zones of "
                f"EC2NodeClass {nodeclass.name!r}",
                offerings=(),
            )
        by_type: dict[str, list[Candidate]] = {}
        for c in candidates:
            by_type.setdefault(c.offering.capacity_type, []).append(c)
        reservation: Reservation | None = None
        if CAPACITY_TYPE_RESERVED in by_type:
            first = sorted(by_type[CAPACITY_TYPE_RESERVED], key=lambda c: (c.offering.price, c.rank))[0]
            reservation = next(
                (
                    r
                    for r in self._reservations(nodeclass)
                    if r.instance_type == first.instance_type.name and r.zone == first.offering.zone and r.available > 0
                ),
                None,
            )
            if reservation is None:  # filled since the offerings were listed
                del by_type[CAPACITY_TYPE_RESERVED]
            else:
                by_type[CAPACITY_TYPE_RESERVED] = [first]
        if not by_type:
            raise InsufficientCapacityError(f"the capacity reservations for NodeClaim {name} are full", offerings=())
        capacity_type = next(
            ct for ct in (CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND) if ct in by_type
        )
        chosen = sorted(by_type[capacity_type], key=lambda c: (c.offering.price, c.rank))
        configs, tried = await self._launch_configs(
            nodeclaim=nodeclaim, nodeclass=nodeclass, candidates=chosen, cache=cache, reservation=reservation
        )
        request = fleet_request(
            cluster_name=self.cluster_name,
            nodeclaim=nodeclaim,
            nodeclass=nodeclass,
            configs=configs,
            capacity_type=capacity_type,
            reservation=reservation,
        )
        try:
            answer = await self.api.call("ec2", "create_fleet", **request)
        except AWSError as err:
            if err.code.startswith("InvalidLaunchTemplate"):
                self._templates.clear()  # deleted behind our back: create it again next time
            whole = [{"ErrorCode": err.code, "ErrorMessage": err.message}]
            refusal = refused_offerings(whole, nodeclass=nodeclass, capacity_type=capacity_type, tried=tried)
            if refusal.spot_refused or err.code in UNAVAILABLE_CODES:
                raise self._unavailable_error(
                    refusal, tried=tried, capacity_type=capacity_type, detail=f"{err.code}: {err.message}"
                ) from None
            raise CreateError(f"CreateFleet failed: {err.code}: {err.message}", reason=err.code) from None
        launched = [i for i in answer.get("Instances") or [] if i.get("InstanceIds")]
        errors = answer.get("Errors") or []
        refusal = refused_offerings(errors, nodeclass=nodeclass, capacity_type=capacity_type, tried=tried)
        ice = refusal.offerings
        if self._unavailable is not None:
            for key in ice:
                self._unavailable.mark(key)
        if not launched:
            codes = sorted({str(e.get("ErrorCode")) for e in errors}) or ["NoInstances"]
            if any(code.startswith("InvalidLaunchTemplate") for code in codes):
                self._templates.clear()
            detail = "; ".join(f"{e.get('ErrorCode')}: {e.get('ErrorMessage')}" for e in errors[:5])
            if errors and (refusal.spot_refused or all(code in UNAVAILABLE_CODES for code in codes)):
                raise self._unavailable_error(refusal, tried=tried, capacity_type=capacity_type, detail=detail)
            raise CreateError(f"CreateFleet launched nothing: {detail or 'no instances'}", reason=codes[0])
        first = launched[0]
        instance_id = str(first["InstanceIds"][0])
        subnet = str(((first.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}).get("SubnetId") or "")
        zone = next((str(s["zone"]) for s in nodeclass.subnets if s.get("id") == subnet), "")
        it_name = str(first.get("InstanceType"))
        if reservation is not None:
            self._reserved_used[reservation.id] = self._reserved_used.get(reservation.id, 0) + 1
        if subnet:  # its addresses are taken before DescribeSubnets shows it: count them meanwhile
            self._ips_in_flight[subnet] = self._ips_in_flight.get(subnet, 0) + cache.max_pods.get(it_name, 1) + 1
        it = next(c.instance_type for c in chosen if c.instance_type.name == it_name)
        offering = next(
            (o for o in it.offerings if o.zone == zone and o.capacity_type == capacity_type), chosen[0].offering
        )
        image = image_for(
            nodeclass, instance_type=it_name, architectures=cache.architectures, gpu_makers=cache.gpu_makers
        )
        labels = offering_labels(it, offering)
        labels[LABEL_REGION] = self.api.region
        log.info(
            "aws.instance_launched",
            nodeclaim=name,
            instance=instance_id,
            instance_type=it_name,
            zone=zone,
            capacity_type=capacity_type,
            price=offering.price,
            overrides=len(tried),
            reason="CreateFleet chose among the NodeClaim's candidates",
        )
        return Instance(
            refused=tuple(ice),
            provider_id=provider_id_of(zone=zone, instance_id=instance_id),
            nodeclaim=name,
            instance_type=it_name,
            zone=zone,
            capacity_type=capacity_type,
            image_id=image,
            price=offering.price,
            capacity=it.capacity.to_quantities(),
            allocatable=it.allocatable.to_quantities(),
            labels=labels,
            state="pending",
        )

    def _unavailable_error(
        self, refusal: Refusal, *, tried: Sequence[OfferingId], capacity_type: str, detail: str
    ) -> InsufficientCapacityError:
        """The error of a launch AWS refused as "not here": the offerings to avoid (all spot ones when
        the Spot service-linked role is missing), with the quota named when one was hit."""
        offerings = list(refusal.offerings or tried)
        if refusal.spot_refused:
            spot = {
                OfferingId(instance_type=it.name, zone=o.zone, capacity_type=CAPACITY_TYPE_SPOT)
                for cache in self._types.values()
                for it in cache.types
                for o in it.offerings
                if o.capacity_type == CAPACITY_TYPE_SPOT
            }
            if self._unavailable is not None:
                for key in spot:  # every spot offering, not only this claim's: the account refuses spot
                    self._unavailable.mark(key)
            offerings = [o for o in tried if o.capacity_type == CAPACITY_TYPE_SPOT] or offerings
            log.warning("aws.spot_refused", reason="SpotServiceLinkedRoleMissing", fix=SPOT_ROLE_FIX)
            return InsufficientCapacityError(
                f"{SPOT_ROLE_FIX} ({detail})", offerings=tuple(offerings), reason="SpotServiceLinkedRoleMissing"
            )
        if refusal.quota is not None:
            code, message = refusal.quota
            return InsufficientCapacityError(
                f"the account's {code} quota refused {capacity_type} capacity for {len(offerings)} offering(s): "
                f"{message}; raise the quota in Service Quotas (`joiner aws check` shows them)",
                offerings=tuple(offerings),
                reason=code,
                quota=True,
            )
        codes = sorted({d.split(":", 1)[0].strip() for d in detail.split("; ") if d})
        return InsufficientCapacityError(
            f"no capacity for {len(offerings)} of {len(tried)} offerings tried: {detail}",
            offerings=tuple(offerings),
            reason="InsufficientCapacity" if set(codes) <= ICE_CODES else codes[0],
        )

    async def _launch_template(self, nodeclass: ResolvedNodeClass, data: Obj, *, tags: Mapping[str, str]) -> str:
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
        name = f"joiner-{self.cluster_name}-{nodeclass.name}-{digest}"[:128]
        self._template_used[name] = self._clock.monotonic()
        if name in self._templates:
            return name
        try:
            await self.api.call("ec2", "describe_launch_templates", LaunchTemplateNames=[name])
        except AWSError as err:
            if not err.code.startswith("InvalidLaunchTemplateName"):
                raise
            try:
                await self.api.call(
                    "ec2",
                    "create_launch_template",
                    LaunchTemplateName=name,
                    LaunchTemplateData=data,
                    TagSpecifications=tag_specifications(("launch-template",), tags),
                )
                log.info("aws.launch_template_created", name=name, nodeclass=nodeclass.name, image=data["ImageId"])
            except AWSError as create_err:
                if "AlreadyExists" not in create_err.code:
                    raise
        self._templates[name] = name
        return name

    async def cluster_info(self) -> ClusterInfo:
        """How kubelets reach the cluster (see :mod:`controller.cloudprovider.aws.cluster`)."""
        return await self._cluster.get()

    async def _user_data(self, nodeclaim: Obj, nodeclass: ResolvedNodeClass, *, pods: int | None) -> str | None:
        """The EC2NodeClass's userData, with the bootstrap joiner writes for its image family
        (``pods``: the kubelet's maxPods)."""
        spec = nodeclass.model.spec
        alias = next((t.alias for t in spec.ami_selector_terms if t.alias), None)
        family = family_of(alias=alias, ami_family=spec.ami_family)
        if family not in FAMILIES_WITH_BOOTSTRAP:
            return spec.user_data
        claim_spec = nodeclaim.get("spec") or {}
        taints = [
            BootTaint(key=str(t.get("key")), effect=str(t.get("effect")), value=str(t.get("value") or ""))
            for t in [*(claim_spec.get("taints") or []), *(claim_spec.get("startupTaints") or [])]
            if isinstance(t, Mapping) and t.get("key") and t.get("effect")
        ]
        labels = {str(k): str(v) for k, v in ((nodeclaim.get("metadata") or {}).get("labels") or {}).items()}
        try:
            return user_data_for(
                family,
                await self.cluster_info(),
                labels=labels,
                taints=taints,
                user_data=spec.user_data,
                max_pods=pods,
                instance_store=spec.instance_store_policy,
            )
        except UserDataError as err:
            raise NodeClassNotReadyError(f"EC2NodeClass {nodeclass.name!r}: {err}") from None

    async def _zonal_subnets(self, nodeclass: ResolvedNodeClass) -> dict[str, tuple[str, int]]:
        """Per zone, the NodeClass's subnet with the most free addresses less those in flight (launched
        since the count was read: the instance's own and its pods'), and how many that leaves.
        DescribeSubnets is asked at most every SUBNET_CACHE_SECONDS; a fresh count replaces the
        in-flight guess. If it fails, the counts last read (or none) are used."""
        ids = sorted(str(s["id"]) for s in nodeclass.subnets)
        now = self._clock.monotonic()
        if any(i not in self._ips_free for i in ids) or now - self._ips_read_at.get(nodeclass.name, -1e18) >= (
            SUBNET_CACHE_SECONDS
        ):
            try:
                rows = await self.api.collect("ec2", "describe_subnets", key="Subnets", SubnetIds=ids)
            except AWSError as err:
                log.warning("aws.subnets_not_counted", nodeclass=nodeclass.name, error=str(err))
            else:
                self._ips_read_at[nodeclass.name] = now
                for row in rows:
                    sid, free = str(row["SubnetId"]), int(row.get("AvailableIpAddressCount") or 0)
                    if self._ips_free.get(sid) != free:
                        self._ips_free[sid] = free
                        self._ips_in_flight[sid] = 0
        best: dict[str, tuple[str, int]] = {}
        for sub in sorted(nodeclass.subnets, key=lambda x: str(x["id"])):
            sid, zone = str(sub["id"]), str(sub["zone"])
            left = self._ips_free.get(sid, UNKNOWN_FREE_IPS) - self._ips_in_flight.get(sid, 0)
            if zone not in best or left > best[zone][1]:
                best[zone] = (sid, left)
        return best

    async def _placement_group(self, nodeclass: ResolvedNodeClass, nodeclaim: Obj) -> str | None:
        """The placement group a NodeClaim launches into: the class's named one, or with ``perGang``
        its gang's own cluster group, created on the gang's first launch (None outside a gang)."""
        spec = nodeclass.model.spec.placement_group
        if spec is None:
            return None
        if spec.name:
            return spec.name
        gang = str(((nodeclaim.get("metadata") or {}).get("labels") or {}).get(TAG_GANG) or "")
        if not gang:
            return None
        name = gang_placement_group(cluster_name=self.cluster_name, gang=gang)
        self._groups_ensured[name] = self._clock.monotonic()
        try:
            await self.api.call(
                "ec2",
                "create_placement_group",
                GroupName=name,
                Strategy="cluster",
                TagSpecifications=tag_specifications(
                    ("placement-group",), {TAG_CLUSTER: self.cluster_name, TAG_GANG: gang}
                ),
            )
            log.info("aws.placement_group_created", name=name, gang=gang, reason="the gang's first launch")
        except AWSError as err:
            if err.code != "InvalidPlacementGroup.Duplicate":
                raise CreateError(
                    f"cannot create the placement group of gang {gang}: {err.code}: {err.message}", reason=err.code
                ) from None
        return name

    async def _launch_configs(
        self,
        *,
        nodeclaim: Obj,
        nodeclass: ResolvedNodeClass,
        candidates: Sequence[Candidate],
        cache: _TypesCache,
        reservation: Reservation | None,
    ) -> tuple[list[Obj], list[OfferingId]]:
        zonal = await self._zonal_subnets(nodeclass)
        subnets_by_zone = {zone: subnet for zone, (subnet, _) in zonal.items()}
        exhausted = {zone for zone, (_, left) in zonal.items() if left <= 0}
        candidates = sorted(candidates, key=lambda c: c.offering.zone in exhausted)  # stable: price order kept
        # one launch template per image, kubelet maxPods and EFA interfaces: the user data tells the
        # kubelet its pods, and a NodeClaim that requests EFA gets every EFA interface of its type
        wants_efa = _requests(nodeclaim, EFA_RESOURCE) > 0
        overrides_by_image: dict[tuple[str, int, int], list[Obj]] = {}
        tried: list[OfferingId] = []
        for c in candidates:
            subnet = subnets_by_zone.get(c.offering.zone)
            if subnet is None:
                continue
            image = image_for(
                nodeclass,
                instance_type=c.instance_type.name,
                architectures=cache.architectures,
                gpu_makers=cache.gpu_makers,
            )
            if not image:
                continue
            override: Obj = {"InstanceType": c.instance_type.name, "SubnetId": subnet}
            if c.offering.capacity_type == CAPACITY_TYPE_ON_DEMAND:
                override["Priority"] = float(len(tried))
            pods = cache.max_pods.get(c.instance_type.name, 0)
            efa = cache.efa.get(c.instance_type.name, 0) if wants_efa else 0
            overrides_by_image.setdefault((image, pods, efa), []).append(override)
            tried.append(c.key)
            if len(tried) >= MAX_OVERRIDES:
                break
        if not tried:
            raise CreateError(
                f"EC2NodeClass {nodeclass.name!r} has no subnet or image for any candidate of "
                f"{nodeclaim['metadata']['name']}",
                reason="NoCompatibleOffering",
            )
        configs = []
        tags = resource_tags(
            cluster_name=self.cluster_name,
            nodeclass=nodeclass,
            nodepool=str(((nodeclaim.get("metadata") or {}).get("labels") or {}).get(LABEL_NODEPOOL, "")),
        )
        group = await self._placement_group(nodeclass, nodeclaim)
        for (image, pods, efa), overrides in overrides_by_image.items():
            user_data = await self._user_data(nodeclaim, nodeclass, pods=pods or None)
            data = template_data(
                nodeclass,
                image=image,
                reservation=reservation,
                user_data=user_data,
                tags=tags,
                efa_interfaces=efa,
                placement_group=group,
            )
            template = await self._launch_template(nodeclass, data, tags=tags)
            configs.append(
                {
                    "LaunchTemplateSpecification": {"LaunchTemplateName": template, "Version": "$Latest"},
                    "Overrides": overrides,
                }
            )
        return configs, tried

    # --- delete / get / list -----------------------------------------------------------------

    async def _describe(self, *, instance_ids: list[str] | None = None, filters: list[Obj] | None = None) -> list[Obj]:
        params: Obj = {"Filters": [{"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster_name]}, *(filters or [])]}
        if instance_ids:
            params["InstanceIds"] = instance_ids
        try:
            reservations = await self.api.collect("ec2", "describe_instances", key="Reservations", **params)
        except AWSError as err:
            if err.code.startswith("InvalidInstanceID"):
                return []
            raise
        return [i for r in reservations for i in r.get("Instances") or []]

    async def _tagged(self, nodeclaim: str, *, uid: str = "") -> Obj | None:
        """A live instance launched for this NodeClaim (and, when ``uid`` is given, this very object)."""
        found = await self._describe(
            filters=[
                {"Name": f"tag:{TAG_NODECLAIM}", "Values": [nodeclaim]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        for raw in found:
            tags = {t["Key"]: t["Value"] for t in raw.get("Tags") or []}
            if not uid or tags.get(TAG_NODECLAIM_UID) in (None, uid):
                return raw
        return None

    async def _ended_reservations(self, raws: Iterable[Obj]) -> frozenset[str]:
        """Of the capacity reservations these instances were launched into, those EC2 says have ended.

        A reservation some EC2NodeClass's status lists is active (the status controller reads them
        with DescribeCapacityReservations ``state=active`` every minute). Any other is asked about by
        id, at most every RESERVATION_CHECK_SECONDS: expired, cancelled, failed or not found is ended,
        for good. When EC2 cannot be asked, nothing new counts as ended."""
        listed = {
            str(cr.get("id"))
            for obj in self._nodeclasses().values()
            for cr in (obj.get("status") or {}).get("capacityReservations") or []
        }
        now = self._clock.monotonic()
        for rid in sorted({r for raw in raws if (r := reservation_of(raw))} - listed - self._reservations_ended):
            if now - self._reservations_asked.get(rid, -1e18) < RESERVATION_CHECK_SECONDS:
                continue
            self._reservations_asked[rid] = now
            try:
                rows = await self.api.collect(
                    "ec2", "describe_capacity_reservations", key="CapacityReservations", CapacityReservationIds=[rid]
                )
            except AWSError as err:
                if err.code.startswith("InvalidCapacityReservationId"):
                    rows = []
                else:
                    log.warning("aws.reservation_not_checked", reservation=rid, code=err.code, error=err.message)
                    continue
            state = next((str(r.get("State")) for r in rows if r.get("CapacityReservationId") == rid), "gone")
            if state == "gone" or state in RESERVATION_ENDED_STATES:
                self._reservations_ended.add(rid)
                log.info(
                    "aws.reservation_ended",
                    reservation=rid,
                    state=state,
                    reason="its instances run on as on-demand capacity",
                )
        return frozenset(self._reservations_ended)

    def _instance(self, raw: Obj, *, ended: Collection[str] = ()) -> Instance:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags") or []}
        zone = str((raw.get("Placement") or {}).get("AvailabilityZone") or "")
        capacity_type = capacity_type_of(raw, ended=ended)
        state = str((raw.get("State") or {}).get("Name") or "")
        it_name = str(raw.get("InstanceType") or "")
        cached = next(
            (it for c in self._types.values() for it in c.types if it.name == it_name),
            None,
        )
        labels: dict[str, str] = {}
        price = 0.0
        if cached is not None:
            offering = next((o for o in cached.offerings if o.zone == zone and o.capacity_type == capacity_type), None)
            if offering is not None:
                labels = offering_labels(cached, offering)
                labels[LABEL_REGION] = self.api.region
                price = offering.price
        return Instance(
            provider_id=provider_id_of(zone=zone, instance_id=str(raw["InstanceId"])),
            nodeclaim=tags.get(TAG_NODECLAIM, ""),
            instance_type=it_name,
            zone=zone,
            capacity_type=capacity_type,
            image_id=str(raw.get("ImageId") or ""),
            price=price,
            capacity=cached.capacity.to_quantities() if cached else {},
            allocatable=cached.allocatable.to_quantities() if cached else {},
            labels=labels,
            state={"shutting-down": "terminating", "pending": "pending"}.get(state, state),
        )

    async def get(self, provider_id: str) -> Instance:
        instance_id = instance_id_of(provider_id)
        if instance_id is None:
            raise NodeClaimNotFoundError(f"{provider_id!r} is not an aws providerID")
        found = [i for i in await self._describe(instance_ids=[instance_id]) if _alive(i)]
        if not found:
            raise NodeClaimNotFoundError(f"no instance {instance_id} of cluster {self.cluster_name}")
        return self._instance(found[0], ended=await self._ended_reservations(found[:1]))

    async def list(self) -> list[Instance]:
        found = [
            i
            for i in await self._describe(filters=[{"Name": "instance-state-name", "Values": list(LIVE_STATES)}])
            if _alive(i)
        ]
        ended = await self._ended_reservations(found)
        return [self._instance(i, ended=ended) for i in found]

    async def delete(self, nodeclaim: Obj) -> None:
        name = str(nodeclaim["metadata"]["name"])
        instance_id = instance_id_of((nodeclaim.get("status") or {}).get("providerID"))
        if instance_id is None:
            tagged = await self._tagged(name)
            if tagged is None:
                raise NodeClaimNotFoundError(f"NodeClaim {name} has no aws instance")
            instance_id = str(tagged["InstanceId"])
        found = await self._describe(instance_ids=[instance_id])
        if not found or not _alive(found[0]):
            raise NodeClaimNotFoundError(f"instance {instance_id} of NodeClaim {name} is gone")
        if (found[0].get("State") or {}).get("Name") != "shutting-down":
            try:
                await self.api.call("ec2", "terminate_instances", InstanceIds=[instance_id])
            except AWSError as err:
                if err.code.startswith("InvalidInstanceID"):
                    raise NodeClaimNotFoundError(f"instance {instance_id} is gone") from None
                raise CreateError(f"TerminateInstances failed: {err.code}: {err.message}", reason=err.code) from None
        confirmed = await self._describe(instance_ids=[instance_id])
        state = (confirmed[0].get("State") or {}).get("Name") if confirmed else "terminated"
        log.info("aws.instance_terminating", nodeclaim=name, instance=instance_id, state=state)

    # --- drift -------------------------------------------------------------------------------

    async def _all_instances(self) -> Mapping[str, Obj]:
        """The cluster's live instances by id, described at most every DRIFT_CACHE_SECONDS: a
        disruption pass asks about every NodeClaim, and one call answers them all."""
        now = self._clock.monotonic()
        if self._described is None or now - self._described[0] >= DRIFT_CACHE_SECONDS:
            found = await self._describe(filters=[{"Name": "instance-state-name", "Values": list(LIVE_STATES)}])
            self._described = (now, {str(i["InstanceId"]): i for i in found if _alive(i)})
        return self._described[1]

    async def is_drifted(self, nodeclaim: Obj) -> str | None:
        instance_id = instance_id_of((nodeclaim.get("status") or {}).get("providerID"))
        if instance_id is None:
            return None
        try:
            nodeclass = self.nodeclass_for(nodeclaim)
        except NodeClassNotReadyError:
            return None  # a NodeClass being fixed is not a reason to replace machines
        raw = (await self._all_instances()).get(instance_id)
        if raw is None:
            return None
        launched_with = {t["Key"]: t["Value"] for t in raw.get("Tags") or []}.get(TAG_NODECLASS_HASH)
        if launched_with and launched_with != nodeclass_hash(nodeclass):
            return (
                f"NodeClassDrift: EC2NodeClass {nodeclass.name} changed since the instance launched (user data, "
                f"volumes, metadata options, role, tags or the like)"
            )
        expiring = self._capacity_block_ending(nodeclass, raw)
        if expiring is not None:
            return expiring
        amis = {str(a["id"]) for a in nodeclass.amis}
        if amis and raw.get("ImageId") not in amis:
            return f"AMIDrift: image {raw.get('ImageId')} is no longer selected by EC2NodeClass {nodeclass.name}"
        subnets = {str(s["id"]) for s in nodeclass.subnets}
        if subnets and raw.get("SubnetId") and raw.get("SubnetId") not in subnets:
            return f"SubnetDrift: subnet {raw.get('SubnetId')} is no longer selected by EC2NodeClass {nodeclass.name}"
        groups = {str(g.get("GroupId")) for g in raw.get("SecurityGroups") or []}
        if not groups:  # some answers list the groups only on the primary network interface
            for eni in raw.get("NetworkInterfaces") or []:
                if (eni.get("Attachment") or {}).get("DeviceIndex") == 0:
                    groups = {str(g.get("GroupId")) for g in eni.get("Groups") or []}
        if groups and groups != set(nodeclass.security_group_ids):
            return (
                f"SecurityGroupDrift: security groups {sorted(groups)} differ from "
                f"{sorted(nodeclass.security_group_ids)} of EC2NodeClass {nodeclass.name}"
            )
        return None

    def _capacity_block_ending(self, nodeclass: ResolvedNodeClass, raw: Obj) -> str | None:
        """Why an instance in a Capacity Block must be replaced now: the block ends within
        CAPACITY_BLOCK_DRAIN_SECONDS (EC2 reclaims the instances at the end; Karpenter starts 40
        minutes before). Replaced as drift is: the new node first, under the pool's budgets."""
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags") or []}
        rid = raw.get("CapacityReservationId") or tags.get(TAG_RESERVATION)
        block = next(
            (
                r
                for r in nodeclass.capacity_reservations
                if r.get("id") == rid and r.get("reservationType") == "capacity-block" and r.get("endTime")
            ),
            None,
        )
        if block is None:
            return None
        try:
            end = datetime.fromisoformat(str(block["endTime"]).replace("Z", "+00:00"))
        except ValueError:
            return None
        if end.tzinfo is None:
            end = end.replace(tzinfo=UTC)
        left = (end - self._clock.now()).total_seconds()
        if left > CAPACITY_BLOCK_DRAIN_SECONDS:
            return None
        return (
            f"CapacityBlockExpiring: Capacity Block {rid} ends at {end.isoformat()} ({max(0, int(left // 60))} min): "
            f"replaced before EC2 reclaims the instance"
        )


def reservation_of(raw: Obj) -> str | None:
    """The capacity reservation a described instance runs in: EC2's ``CapacityReservationId``, else
    the one joiner tagged it with at launch (None for an instance launched outside one)."""
    tags = {t["Key"]: t["Value"] for t in raw.get("Tags") or []}
    rid = raw.get("CapacityReservationId") or tags.get(TAG_RESERVATION)
    return str(rid) if rid else None


def capacity_type_of(raw: Obj, *, ended: Collection[str]) -> str:
    """How a described instance is bought now. Pure: ``ended`` are the reservations EC2 says ended;
    an instance in one of those runs on as on-demand."""
    if raw.get("InstanceLifecycle") == "spot":
        return CAPACITY_TYPE_SPOT
    rid = reservation_of(raw)
    if rid is not None and rid not in ended:
        return CAPACITY_TYPE_RESERVED
    return CAPACITY_TYPE_ON_DEMAND


def _requests(nodeclaim: Obj, resource: str) -> int:
    """How much of ``resource`` the NodeClaim requests (0 when none or unreadable)."""
    raw = (((nodeclaim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(resource)
    try:
        return int(str(raw or 0))
    except ValueError:
        return 0


def _alive(raw: Obj) -> bool:
    return (raw.get("State") or {}).get("Name") in LIVE_STATES
