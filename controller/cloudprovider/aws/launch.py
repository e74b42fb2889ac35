"""What one aws launch is made of, besides the fleet request itself: the launch template per
NodeClass, image, kubelet maxPods and EFA interfaces (created once, then cached), the user data, the
subnet of each zone with free addresses, the gang's placement group, and the CreateFleet launch
configurations over the NodeClaim's candidates. :class:`LaunchInputs` is that part of
:class:`~controller.cloudprovider.aws.provider.AWSCloudProvider`; ``provider.py`` decides and buys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import structlog

from api.v1.labels import (
    CAPACITY_TYPE_ON_DEMAND,
    LABEL_NODEPOOL,
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
from controller.cloudprovider.aws.cluster import ClusterInfoSource
from controller.cloudprovider.aws.fleet import (
    MAX_OVERRIDES,
    TAG_CLUSTER,
    TAG_GANG,
    gang_placement_group,
    image_for,
    resource_tags,
    tag_specifications,
    template_data,
)
from controller.cloudprovider.aws.instancetypes import (
    EFA_RESOURCE,
    Reservation,
    TypesCache,
)
from controller.cloudprovider.aws.nodeclass import ResolvedNodeClass
from controller.cloudprovider.kwok.offerings import Candidate
from controller.cloudprovider.types import (
    CreateError,
    NodeClassNotReadyError,
    OfferingId,
)

log = structlog.get_logger()
Obj = dict[str, Any]

SUBNET_CACHE_SECONDS: Final = 60.0
GROUP_GRACE_SECONDS: Final = 600.0  # a per-gang placement group a launch just used is not collected
UNKNOWN_FREE_IPS: Final = 1 << 20  # a subnet DescribeSubnets did not count is not taken for full


class LaunchInputs:
    """The launch template, user data, subnets, placement group and launch configurations."""

    api: AWSApi
    cluster_name: str
    _clock: Clock
    _cluster: ClusterInfoSource
    _templates: dict[str, str]
    _template_used: dict[str, float]
    _groups_ensured: dict[str, float]
    _ips_free: dict[str, int]
    _ips_in_flight: dict[str, int]
    _ips_read_at: dict[str, float]

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
        cache: TypesCache,
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


def _requests(nodeclaim: Obj, resource: str) -> int:
    """How much of ``resource`` the NodeClaim requests (0 when none or unreadable)."""
    raw = (((nodeclaim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(resource)
    try:
        return int(str(raw or 0))
    except ValueError:
        return 0
