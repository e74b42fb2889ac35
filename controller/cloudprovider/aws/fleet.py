"""What one CreateFleet asks EC2 for, built from the EC2NodeClass and the NodeClaim: the image per
instance type, the launch template's data, the request with its tags and ClientToken, and the
offerings the answer's errors say have no capacity. Pure: the aws provider sends it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from api.v1.labels import CAPACITY_TYPE_SPOT, LABEL_NODEPOOL
from controller.cloudprovider.aws.instancetypes import Reservation
from controller.cloudprovider.aws.nodeclass import ResolvedNodeClass, variant_of
from controller.cloudprovider.types import OfferingId

Obj = dict[str, Any]

TAG_CLUSTER: Final = "joiner.sh/cluster"
TAG_NODEPOOL: Final = "joiner.sh/nodepool"
TAG_NODECLAIM: Final = "joiner.sh/nodeclaim"
TAG_NODECLASS: Final = "joiner.sh/ec2nodeclass"
TAG_NODECLAIM_UID: Final = "joiner.sh/nodeclaim-uid"
TAG_NODECLASS_HASH: Final = "joiner.sh/ec2nodeclass-hash"
TAG_RESERVATION: Final = "joiner.sh/capacity-reservation"  # the reservation an instance was launched into
# the parts of an EC2NodeClass's spec a running instance was launched with and cannot change: a
# different value is drift (the selectors drift by what they resolve to: image, subnet, groups)
HASHED_FIELDS: Final = (
    "amiFamily",
    "userData",
    "blockDeviceMappings",
    "metadataOptions",
    "role",
    "instanceProfile",
    "tags",
    "detailedMonitoring",
    "associatePublicIPAddress",
    "instanceStorePolicy",
    "placementGroup",
)
TAG_GANG: Final = "joiner.sh/gang"  # the gang an instance (and a per-gang placement group) belongs to
# what EKS and the AWS cloud controller know a cluster's machines by (Karpenter tags it too)
TAG_K8S_CLUSTER_PREFIX: Final = "kubernetes.io/cluster/"
# CreateFleet tags these directly; the rest of what it creates is tagged through the launch template
FLEET_TAGGED: Final = ("fleet", "instance", "volume")
TEMPLATE_TAGGED: Final = ("network-interface", "spot-instances-request")
ICE_CODES: Final = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "UnfulfillableCapacity",
        "MaxSpotInstanceCountExceeded",
        "ReservationCapacityExceeded",
        "InsufficientCapacityOnHost",
    }
)
# answers that mean "not here, try elsewhere": the offering is avoided for the unavailable-offering
# TTL like one without capacity, and the NodeClaim is replaced by one that avoids it
NOT_HERE_CODES: Final = frozenset(
    {
        "Unsupported",  # the type is not sold in that zone (or not with that option)
        "InsufficientFreeAddressesInSubnet",
    }
)
# account quotas: no other zone helps, so every offering the request tried under the quota is avoided
QUOTA_CODES: Final = frozenset({"VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "MaxFleetCountExceeded"})
# spot is refused for the whole account until the Spot service-linked role exists
SPOT_ROLE_CODES: Final = frozenset(
    {"AuthFailure.ServiceLinkedRoleCreationNotPermitted", "ServiceLinkedRoleCreationNotPermitted"}
)
UNAVAILABLE_CODES: Final = ICE_CODES | NOT_HERE_CODES | QUOTA_CODES | SPOT_ROLE_CODES
SPOT_ROLE_FIX: Final = (
    "the account has no Spot service-linked role and joiner may not create it: run "
    "`aws iam create-service-linked-role --aws-service-name spot.amazonaws.com` once; spot is avoided "
    "and on-demand used meanwhile"
)
MAX_OVERRIDES: Final = 150


def client_token(uid: str, request: Obj | None = None) -> str:
    """A CreateFleet ClientToken (at most 64 characters): the same for every try of the same request
    for a NodeClaim, so EC2 launches it once; a different one when the request changed (other
    overrides after a capacity error), which EC2 would otherwise refuse as a token reused with other
    parameters."""
    text = uid + "\n" + json.dumps(request or {}, sort_keys=True, default=str)
    return "joiner-" + hashlib.sha256(text.encode()).hexdigest()[:48]


def image_for(
    nodeclass: ResolvedNodeClass, *, instance_type: str, architectures: Mapping[str, str], gpu_makers: Mapping[str, str]
) -> str:
    """The NodeClass's image for this type: its architecture, and the NVIDIA variant for an NVIDIA GPU type."""
    arch = architectures.get(instance_type, "amd64")
    maker = gpu_makers.get(instance_type, "")
    wanted = "nvidia" if maker == "nvidia" else "standard"
    same_arch = [a for a in nodeclass.amis if a.get("architecture", "amd64") == arch]
    for ami in same_arch:
        if variant_of(str(ami.get("name") or "")) == wanted:
            return str(ami["id"])
    return str(same_arch[0]["id"]) if same_arch else ""


def nodeclass_hash(nodeclass: ResolvedNodeClass) -> str:
    """A digest of the spec fields a launched instance keeps (``HASHED_FIELDS``)."""
    spec = nodeclass.model.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    kept = {k: spec.get(k) for k in HASHED_FIELDS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def gang_placement_group(*, cluster_name: str, gang: str) -> str:
    """The name of the cluster placement group joiner makes for a gang (at most 255 characters)."""
    digest = hashlib.sha256(f"{cluster_name}/{gang}".encode()).hexdigest()[:12]
    return f"joiner-{cluster_name}-gang-{digest}"[:255]


def resource_tags(*, cluster_name: str, nodeclass: ResolvedNodeClass, nodepool: str) -> dict[str, str]:
    """The tags of everything a launch creates: ``spec.tags``, then joiner's own (which win), the
    ``kubernetes.io/cluster/<name>: owned`` tag, and a Name."""
    tags = {**nodeclass.model.spec.tags}
    tags.update(
        {
            TAG_CLUSTER: cluster_name,
            TAG_K8S_CLUSTER_PREFIX + cluster_name: "owned",
            TAG_NODEPOOL: nodepool,
            TAG_NODECLASS: nodeclass.name,
        }
    )
    return tags


def tag_specifications(resource_types: Iterable[str], tags: Mapping[str, str]) -> list[Obj]:
    tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
    return [{"ResourceType": rt, "Tags": tag_list} for rt in resource_types]


def template_data(
    nodeclass: ResolvedNodeClass,
    *,
    image: str,
    reservation: Reservation | None,
    user_data: str | None,
    tags: Mapping[str, str] | None = None,
    efa_interfaces: int = 0,
    placement_group: str | None = None,
) -> Obj:
    """The launch template's data for the NodeClass, an image and a capacity reservation. ``tags`` go
    on the network interfaces and spot requests a launch from it creates (CreateFleet cannot tag those
    itself). ``efa_interfaces``: that many EFA interfaces, one per network card (the first is the
    primary interface), for NodeClaims that request ``vpc.amazonaws.com/efa``."""
    spec = nodeclass.model.spec
    data: Obj = {
        "ImageId": image,
        "MetadataOptions": {
            "HttpEndpoint": spec.metadata_options.http_endpoint,
            "HttpProtocolIpv6": spec.metadata_options.http_protocol_i_pv6,
            "HttpPutResponseHopLimit": spec.metadata_options.http_put_response_hop_limit,
            "HttpTokens": spec.metadata_options.http_tokens,
            # tags in the instance metadata refuse keys with "/", and every joiner tag has one
            "InstanceMetadataTags": "disabled",
        },
        "Monitoring": {"Enabled": spec.detailed_monitoring},
    }
    if efa_interfaces > 0:  # EC2 takes the groups on the interfaces then, not beside them
        data["NetworkInterfaces"] = [
            {
                "NetworkCardIndex": card,
                "DeviceIndex": 0 if card == 0 else 1,
                "InterfaceType": "efa",
                "Groups": list(nodeclass.security_group_ids),
                # EC2 gives no public address to an instance with several interfaces
                **(
                    {"AssociatePublicIpAddress": spec.associate_public_ip_address}
                    if efa_interfaces == 1 and spec.associate_public_ip_address is not None
                    else {}
                ),
            }
            for card in range(efa_interfaces)
        ]
    elif spec.associate_public_ip_address is None:
        data["SecurityGroupIds"] = list(nodeclass.security_group_ids)
    else:  # EC2 takes the groups on the interface then, not beside it
        data["NetworkInterfaces"] = [
            {
                "DeviceIndex": 0,
                "AssociatePublicIpAddress": spec.associate_public_ip_address,
                "Groups": list(nodeclass.security_group_ids),
            }
        ]
    if tags:
        data["TagSpecifications"] = tag_specifications(TEMPLATE_TAGGED, tags)
    if placement_group:
        data["Placement"] = {"GroupName": placement_group}
    if nodeclass.instance_profile:
        data["IamInstanceProfile"] = {"Name": nodeclass.instance_profile}
    if user_data:
        data["UserData"] = base64.b64encode(user_data.encode()).decode()
    mappings = []
    for m in spec.block_device_mappings:
        entry: Obj = {"DeviceName": m.device_name}
        if m.ebs is not None:
            ebs: Obj = {}
            if m.ebs.volume_size:
                size = int("".join(ch for ch in m.ebs.volume_size if ch.isdigit()))
                ebs["VolumeSize"] = size * 1024 if m.ebs.volume_size.endswith(("Ti", "T")) else size
            for key, value in (
                ("VolumeType", m.ebs.volume_type or "gp3"),
                ("Iops", m.ebs.iops),
                ("Throughput", m.ebs.throughput),
                ("Encrypted", m.ebs.encrypted),
                ("KmsKeyId", m.ebs.kms_key_id),
                (
                    "DeleteOnTermination",
                    True if m.ebs.delete_on_termination is None else m.ebs.delete_on_termination,
                ),
                ("SnapshotId", m.ebs.snapshot_id),
            ):
                if value is not None:
                    ebs[key] = value
            entry["Ebs"] = ebs
        mappings.append(entry)
    if mappings:
        data["BlockDeviceMappings"] = mappings
    if reservation is not None:
        data["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": reservation.id}
        }
        if reservation.capacity_block:
            data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return data


def fleet_request(
    *,
    cluster_name: str,
    nodeclaim: Obj,
    nodeclass: ResolvedNodeClass,
    configs: list[Obj],
    capacity_type: str,
    reservation: Reservation | None,
) -> Obj:
    """One instant CreateFleet for one machine of one capacity type, tagged for the cluster and
    the NodeClaim, with a ClientToken that repeats with the request."""
    meta = nodeclaim["metadata"]
    name = str(meta["name"])
    tags = resource_tags(
        cluster_name=cluster_name, nodeclass=nodeclass, nodepool=(meta.get("labels") or {}).get(LABEL_NODEPOOL, "")
    )
    tags.update(
        {
            TAG_NODECLAIM: name,
            TAG_NODECLAIM_UID: str(meta.get("uid") or ""),
            TAG_NODECLASS_HASH: nodeclass_hash(nodeclass),
            "Name": f"{cluster_name}/{name}",
        }
    )
    if reservation is not None:
        tags[TAG_RESERVATION] = reservation.id
    gang = (meta.get("labels") or {}).get(TAG_GANG)
    if gang:
        tags[TAG_GANG] = str(gang)
    if capacity_type == CAPACITY_TYPE_SPOT:
        default = "spot"
    elif reservation is not None and reservation.capacity_block:
        default = "capacity-block"
    else:
        default = "on-demand"
    request: Obj = {
        "Type": "instant",
        "LaunchTemplateConfigs": configs,
        "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": default},
        "TagSpecifications": tag_specifications(FLEET_TAGGED, tags),
    }
    if default == "spot":
        request["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
    elif reservation is not None and default == "on-demand":  # one override: the reservation's
        request["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
    elif default == "on-demand":  # a capacity block takes no allocation strategy: EC2 refuses one
        # the overrides' Priority is joiner's order (cheapest, then the planned zone, full zones
        # last); lowest-price would pick among equal prices -- one type in every zone -- at random
        request["OnDemandOptions"] = {"AllocationStrategy": "prioritized"}
    request["ClientToken"] = client_token(str(meta.get("uid") or name), request)
    return request


def is_spot_role_error(code: str, message: str = "") -> bool:
    """The account lacks the Spot service-linked role (AWSServiceRoleForEC2Spot) and the caller may
    not create it."""
    return code in SPOT_ROLE_CODES or (
        code.startswith("AuthFailure") and "service-linked role" in message.lower() and "spot" in message.lower()
    )


def ice_offerings(errors: Iterable[Obj], *, nodeclass: ResolvedNodeClass, capacity_type: str) -> list[OfferingId]:
    """The offerings CreateFleet said have no capacity (an override names a type and a subnet)."""
    return refused_offerings(errors, nodeclass=nodeclass, capacity_type=capacity_type, tried=()).offerings


def quota_group(instance_type: str) -> str:
    """The on-demand vCPU quota an instance type counts against: ``P``, ``G`` (G and VT), ``F``,
    ``X``, ``Inf``, ``DL``, ``Trn`` or ``Standard``."""
    family = instance_type.split(".", 1)[0].lower()
    for prefix, group in (("inf", "Inf"), ("trn", "Trn"), ("dl", "DL"), ("vt", "G"), ("p", "P"), ("g", "G")):
        if family.startswith(prefix):
            return group
    if family.startswith(("f", "x")):
        return family[0].upper()
    return "Standard"


@dataclass(frozen=True, slots=True)
class Refusal:
    """What a CreateFleet's errors say is not to be had here: the offerings to avoid, whether spot
    is refused for the whole account, and the quota that was hit (code and message), if any."""

    offerings: list[OfferingId]
    spot_refused: bool = False
    quota: tuple[str, str] | None = None


def refused_offerings(
    errors: Iterable[Obj], *, nodeclass: ResolvedNodeClass, capacity_type: str, tried: Sequence[OfferingId]
) -> Refusal:
    """The offerings CreateFleet's per-override errors say are not to be had here.

    Capacity, ``Unsupported`` and a subnet out of addresses name their override's offering. A quota
    (``VcpuLimitExceeded``, ``MaxSpotInstanceCountExceeded``, ``MaxFleetCountExceeded``) is not per
    zone: every tried offering under the same quota is refused (for vCPUs: the same quota group; for
    the spot count and the fleet count: all tried). A missing Spot service-linked role refuses spot."""
    zone_of = {str(s["id"]): str(s["zone"]) for s in nodeclass.subnets}
    out: list[OfferingId] = []
    spot_refused = False
    quota: tuple[str, str] | None = None

    def add(offering: OfferingId) -> None:
        if offering not in out:
            out.append(offering)

    for err in errors:
        code = str(err.get("ErrorCode") or "")
        message = str(err.get("ErrorMessage") or "")
        if is_spot_role_error(code, message):
            spot_refused = True
            continue
        if code not in UNAVAILABLE_CODES:
            continue
        override = (err.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        name = str(override.get("InstanceType") or "")
        zone = zone_of.get(str(override.get("SubnetId")))
        if code in QUOTA_CODES:
            quota = quota or (code, message)
            for t in tried:
                if code != "VcpuLimitExceeded" or not name or quota_group(t.instance_type) == quota_group(name):
                    add(t)
        if name and zone:
            add(OfferingId(instance_type=name, zone=zone, capacity_type=capacity_type))
    return Refusal(offerings=out, spot_refused=spot_refused, quota=quota)
