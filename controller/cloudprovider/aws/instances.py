"""The aws provider's reads of its instances: DescribeInstances of the cluster's tagged instances,
``get``, ``list`` and ``delete``, the capacity type a launched instance runs as now (reserved
while its capacity reservation is active), and drift (image, subnet, security groups, a Capacity
Block ending). :class:`InstanceReads` is the part of :class:`~controller.cloudprovider.aws.provider.AWSCloudProvider`
that reads what was launched; ``provider.py`` launches.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import UTC, datetime
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
from controller.cloudprovider.aws.fleet import (
    TAG_CLUSTER,
    TAG_NODECLAIM,
    TAG_NODECLAIM_UID,
    TAG_NODECLASS_HASH,
    TAG_RESERVATION,
    nodeclass_hash,
)
from controller.cloudprovider.aws.nodeclass import ResolvedNodeClass
from controller.cloudprovider.kwok.offerings import offering_labels
from controller.cloudprovider.types import (
    CreateError,
    Instance,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
)
from controller.scheduling.instancetypes import InstanceType

log = structlog.get_logger()
Obj = dict[str, Any]

PROVIDER_ID_PREFIX: Final = "aws:///"
LIVE_STATES: Final = ("pending", "running", "stopping", "stopped", "shutting-down")
DRIFT_CACHE_SECONDS: Final = 30.0
CAPACITY_BLOCK_DRAIN_SECONDS: Final = 40 * 60.0
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


class InstanceReads:
    """Describe, get, list, delete and drift over the instances tagged with the cluster's name."""

    api: AWSApi
    cluster_name: str
    _nodeclasses: Callable[[], Mapping[str, Obj]]
    _clock: Clock
    _described: tuple[float, dict[str, Obj]] | None
    _reservations_ended: set[str]
    _reservations_asked: dict[str, float]

    def nodeclass_for(self, nodeclaim: Obj) -> ResolvedNodeClass:
        raise NotImplementedError

    def _known_type(self, name: str) -> InstanceType | None:
        """The instance type ``name`` as the provider last listed it (None when it has not)."""
        raise NotImplementedError

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
        cached = self._known_type(it_name)
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


def _alive(raw: Obj) -> bool:
    return (raw.get("State") or {}).get("Name") in LIVE_STATES
