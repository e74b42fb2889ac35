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
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import structlog

from api.v1.labels import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_REGION,
)
from controller.clock import Clock
from controller.cloudprovider.aws.api import AWSApi, AWSError
from controller.cloudprovider.aws.cluster import ClusterInfoSource, ClusterSettings
from controller.cloudprovider.aws.fleet import (
    ICE_CODES,
    SPOT_ROLE_FIX,
    TAG_GANG,
    TAG_NODECLASS,
    UNAVAILABLE_CODES,
    Refusal,
    fleet_request,
    image_for,
    refused_offerings,
)
from controller.cloudprovider.aws.gc import Collected
from controller.cloudprovider.aws.gc import collect as collect_garbage
from controller.cloudprovider.aws.instances import LIVE_STATES, InstanceReads, provider_id_of
from controller.cloudprovider.aws.instancetypes import (
    DEFAULT_ROOT_VOLUME_GIB,
    Reservation,
    TypesCache,
    build_instance_type,
    build_offerings,
    efa_interfaces,
    latest_spot_prices,
    max_pods,
    on_demand_prices,
)
from controller.cloudprovider.aws.launch import GROUP_GRACE_SECONDS, LaunchInputs
from controller.cloudprovider.aws.nodeclass import ResolvedNodeClass, instance_profile_name, resolved_view
from controller.cloudprovider.aws.pricing import OnDemandPrices
from controller.cloudprovider.kwok.offerings import Candidate, compatible, launch_order, offering_labels
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


DEFAULT_CACHE_TTL_SECONDS: Final = 300.0


class AWSCloudProvider(InstanceReads, LaunchInputs):
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
        self._types: dict[str, TypesCache] = {}
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

    def _known_type(self, name: str) -> InstanceType | None:
        return next((it for c in self._types.values() for it in c.types if it.name == name), None)

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

    async def _types_for(self, nodeclass: ResolvedNodeClass) -> TypesCache:
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
        entry = TypesCache(
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
            first = launch_order(by_type[CAPACITY_TYPE_RESERVED], nodeclaim=nodeclaim)[0]
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
        # cheapest first, the planned zone first among equal prices: on-demand CreateFleet follows
        # this order (prioritized); spot's price-capacity-optimized weighs EC2's capacity pools
        chosen = launch_order(by_type[capacity_type], nodeclaim=nodeclaim)
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
