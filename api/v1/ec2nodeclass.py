"""EC2NodeClass: how the aws provider launches EC2 instances (Karpenter v1 field names).

A NodePool points at one through ``spec.template.spec.nodeClassRef`` (``kind: EC2NodeClass``).
Selector terms are OR-ed; the fields inside one term are AND-ed. The status lists what the
selectors resolved to and carries a ``Ready`` condition that says why not when they resolve to
nothing (no subnet matched, no AMI, neither role nor instance profile).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, Self

from pydantic import ConfigDict, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from api.v1.common import cel_rule
from api.v1.conditions import Condition
from api.v1.labels import API_VERSION
from api.v1.meta import ObjectMeta, SpecModel, StatusModel

MAX_SELECTOR_TERMS: Final = 30
MAX_TAGS: Final = 50
AMI_FAMILIES: Final = ("AL2023", "Bottlerocket", "Ubuntu", "Custom")
ALIAS_PATTERN: Final = r"^(al2023|bottlerocket|ubuntu)@(latest|v?[0-9][-0-9A-Za-z.]*)$"
"""``family@version``: ``al2023@latest``, ``bottlerocket@v1.20.3``."""
SUBNET_ID_PATTERN: Final = r"^subnet-[0-9a-z]+$"
SECURITY_GROUP_ID_PATTERN: Final = r"^sg-[0-9a-z]+$"
AMI_ID_PATTERN: Final = r"^ami-[0-9a-z]+$"
CAPACITY_RESERVATION_ID_PATTERN: Final = r"^cr-[0-9a-z]+$"

Tags = Annotated[
    dict[str, str],
    Field(max_length=MAX_TAGS),
    WithJsonSchema({"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": MAX_TAGS}),
]

_ONE_OF_TAGS_OR_ID = cel_rule("has(self.tags) != has(self.id)", "a selector term sets exactly one of 'tags' or 'id'")


def _one_of(term: object, fields: tuple[str, ...], *, what: str) -> None:
    set_fields = [f for f in fields if getattr(term, f) not in (None, {}, "")]
    if len(set_fields) != 1:
        raise PydanticCustomError("selector_term", f"{what}: set exactly one of {', '.join(fields)}")


class SubnetSelectorTerm(SpecModel):
    """Selects subnets by tags (all must match; ``*`` matches any value) or by id."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_ONE_OF_TAGS_OR_ID]})

    tags: Tags | None = None
    """Tags the subnet must carry, e.g. ``{karpenter.sh/discovery: my-cluster}``."""
    id: Annotated[str, Field(pattern=SUBNET_ID_PATTERN)] | None = None
    """A subnet id, e.g. ``subnet-0123abcd``."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        _one_of(self, ("tags", "id"), what="subnetSelectorTerms")
        return self


class SecurityGroupSelectorTerm(SpecModel):
    """Selects security groups by tags, id or name."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "[has(self.tags), has(self.id), has(self.name)].filter(x, x).size() == 1",
                    "a security group selector term sets exactly one of 'tags', 'id' or 'name'",
                )
            ]
        }
    )

    tags: Tags | None = None
    """Tags the security group must carry."""
    id: Annotated[str, Field(pattern=SECURITY_GROUP_ID_PATTERN)] | None = None
    """A security group id, e.g. ``sg-0123abcd``."""
    name: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    """A security group name (``group-name``)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        _one_of(self, ("tags", "id", "name"), what="securityGroupSelectorTerms")
        return self


class CapacityReservationSelectorTerm(SpecModel):
    """Selects On-Demand Capacity Reservations or Capacity Blocks by tags or id."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_ONE_OF_TAGS_OR_ID]})

    tags: Tags | None = None
    """Tags the reservation must carry."""
    id: Annotated[str, Field(pattern=CAPACITY_RESERVATION_ID_PATTERN)] | None = None
    """A reservation id, e.g. ``cr-0123abcd``."""
    owner_id: Annotated[str, Field(pattern=r"^[0-9]{12}$")] | None = Field(default=None, alias="ownerID")
    """The account that owns the reservation (shared reservations)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        _one_of(self, ("tags", "id"), what="capacityReservationSelectorTerms")
        return self


class AMISelectorTerm(SpecModel):
    """Selects AMIs by alias (a family and version), tags, id or name (with an optional owner)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "[has(self.alias), has(self.tags), has(self.id), has(self.name)].filter(x, x).size() == 1",
                    "an AMI selector term sets exactly one of 'alias', 'tags', 'id' or 'name'",
                )
            ]
        }
    )

    alias: Annotated[str, Field(pattern=ALIAS_PATTERN)] | None = None
    """``family@version`` of a published EKS-optimized AMI: ``al2023@latest``."""
    tags: Tags | None = None
    """Tags the image must carry."""
    id: Annotated[str, Field(pattern=AMI_ID_PATTERN)] | None = None
    """An image id, e.g. ``ami-0123abcd``."""
    name: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """An image name (wildcards ``*`` allowed)."""
    owner: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    """The image owner: an account id or ``self``/``amazon``; with ``name`` or ``tags``."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        _one_of(self, ("alias", "tags", "id", "name"), what="amiSelectorTerms")
        return self


class EBS(SpecModel):
    """An EBS volume."""

    volume_size: Annotated[str, Field(pattern=r"^[0-9]+(Gi|G|Ti|T)$")] | None = None
    """Size, e.g. ``200Gi`` (GPU nodes pull large images: give them room)."""
    volume_type: Literal["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"] | None = None
    """Volume type; default ``gp3``."""
    iops: Annotated[int, Field(ge=100, le=256000)] | None = None
    """Provisioned IOPS (io1, io2, gp3)."""
    throughput: Annotated[int, Field(ge=125, le=2000)] | None = None
    """Throughput in MiB/s (gp3)."""
    encrypted: bool | None = None
    """Encrypt the volume."""
    kms_key_id: str | None = Field(default=None, alias="kmsKeyID")
    """The KMS key for encryption."""
    delete_on_termination: bool | None = None
    """Delete the volume with the instance (default true)."""
    snapshot_id: str | None = Field(default=None, alias="snapshotID")
    """Create the volume from this snapshot."""


class BlockDeviceMapping(SpecModel):
    """A block device of the launched instances."""

    device_name: Annotated[str, Field(min_length=1, max_length=64)]
    """The device, e.g. ``/dev/xvda``."""
    ebs: EBS | None = None
    """The EBS volume behind the device."""
    root_volume: bool = False
    """This device is the root volume."""


class MetadataOptions(SpecModel):
    """Instance metadata service settings (IMDS)."""

    http_endpoint: Literal["enabled", "disabled"] = "enabled"
    """Whether IMDS is reachable."""
    http_protocol_i_pv6: Literal["enabled", "disabled"] = Field(default="disabled", alias="httpProtocolIPv6")
    """IMDS over IPv6."""
    http_put_response_hop_limit: Annotated[int, Field(ge=1, le=64)] = 1
    """Hops a PUT response may travel; 1 keeps pods from reaching IMDS credentials."""
    http_tokens: Literal["required", "optional"] = "required"
    """``required``: IMDSv2 only."""


class PlacementGroup(SpecModel):
    """A cluster placement group: the instances on one network spine, for collective communication."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "has(self.name) != (has(self.perGang) && self.perGang)",
                    "set exactly one of 'name' or 'perGang: true'",
                )
            ]
        }
    )

    name: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    """An existing placement group every instance of the class launches into."""
    per_gang: bool = False
    """``true``: joiner creates a cluster placement group per gang, launches the gang's NodeClaims into
    it, and deletes it when none of its instances is left. NodeClaims outside a gang get none."""

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.name is not None) == self.per_gang:
            raise PydanticCustomError("placement_group", "set exactly one of 'name' or 'perGang: true'")
        return self


class EC2NodeClassSpec(SpecModel):
    """How EC2 instances are launched for NodePools that reference this class."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "has(self.role) != has(self.instanceProfile)",
                    "set exactly one of 'role' or 'instanceProfile'",
                ),
                cel_rule(
                    "has(self.amiSelectorTerms) || (has(self.amiFamily) && self.amiFamily != 'Custom')",
                    "set 'amiSelectorTerms' (or a non-Custom 'amiFamily')",
                ),
            ]
        }
    )
    omit_when_empty = frozenset(
        {"capacity_reservation_selector_terms", "ami_selector_terms", "block_device_mappings", "tags"}
    )

    subnet_selector_terms: list[SubnetSelectorTerm] = Field(min_length=1, max_length=MAX_SELECTOR_TERMS)
    """Subnets to launch into; their zones are the zones offered."""
    security_group_selector_terms: list[SecurityGroupSelectorTerm] = Field(min_length=1, max_length=MAX_SELECTOR_TERMS)
    """Security groups of the instances' network interface."""
    capacity_reservation_selector_terms: list[CapacityReservationSelectorTerm] = Field(
        default_factory=list, max_length=MAX_SELECTOR_TERMS
    )
    """Capacity reservations (offerings of capacity type ``reserved``, used first while they have room)."""
    ami_selector_terms: list[AMISelectorTerm] = Field(default_factory=list, max_length=MAX_SELECTOR_TERMS)
    """Images to boot; the newest match is used."""
    ami_family: Literal["AL2023", "Bottlerocket", "Ubuntu", "Custom"] | None = None
    """The image family (bootstrap format of ``userData``); implied by an alias."""
    role: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    """IAM role of the nodes (an instance profile is made for it)."""
    instance_profile: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """An existing IAM instance profile (instead of ``role``)."""
    block_device_mappings: list[BlockDeviceMapping] = Field(default_factory=list, max_length=50)
    """Volumes; unset: the image's default root volume."""
    user_data: str | None = None
    """User data for the instances; for AL2023 and Bottlerocket joiner adds the bootstrap after it."""
    metadata_options: MetadataOptions = Field(default_factory=MetadataOptions, json_schema_extra={"default": {}})
    """IMDS settings; default IMDSv2 only, hop limit 1."""
    tags: Tags = Field(default_factory=dict)
    """Tags added to instances, volumes and network interfaces (joiner's own tags win)."""
    detailed_monitoring: bool = False
    """Enable detailed CloudWatch monitoring."""
    associate_public_ip_address: bool | None = Field(default=None, alias="associatePublicIPAddress")
    """Give instances a public IPv4 address; unset: the subnet's default."""
    placement_group: PlacementGroup | None = None
    """A cluster placement group for the instances (an existing one, or one per gang)."""
    instance_store_policy: Literal["RAID0"] | None = None
    """``RAID0``: the instance's local NVMe drives become one RAID0 array holding the kubelet's and
    the container runtime's data (ephemeral storage is then the drives' size); AL2023 and
    Bottlerocket only. Unset: the drives are left alone."""

    @model_validator(mode="after")
    def _role_or_profile(self) -> Self:
        if (self.role is None) == (self.instance_profile is None):
            raise PydanticCustomError("ec2nodeclass_role", "set exactly one of 'role' or 'instanceProfile'")
        if not self.ami_selector_terms and self.ami_family in (None, "Custom"):
            raise PydanticCustomError("ec2nodeclass_ami", "set 'amiSelectorTerms' (or a non-Custom 'amiFamily')")
        return self


class SubnetStatus(StatusModel):
    """A resolved subnet."""

    id: str
    zone: str
    zone_id: str | None = Field(default=None, alias="zoneID")


class SecurityGroupStatus(StatusModel):
    """A resolved security group."""

    id: str
    name: str | None = None


class AMIStatus(StatusModel):
    """A resolved image."""

    id: str
    name: str | None = None
    architecture: str | None = None
    creation_date: str | None = None


class CapacityReservationStatus(StatusModel):
    """A resolved capacity reservation."""

    id: str
    instance_type: str
    availability_zone: str
    available_instance_count: int = 0
    total_instance_count: int = 0
    reservation_type: Literal["default", "capacity-block"] = "default"
    end_time: str | None = None


class EC2NodeClassStatus(StatusModel):
    """What the selectors resolved to, written by joiner."""

    subnets: list[SubnetStatus] = Field(default_factory=list)
    """Subnets matched by ``subnetSelectorTerms``."""
    security_groups: list[SecurityGroupStatus] = Field(default_factory=list)
    """Security groups matched by ``securityGroupSelectorTerms``."""
    amis: list[AMIStatus] = Field(default_factory=list)
    """Images matched by ``amiSelectorTerms`` (the newest is launched)."""
    capacity_reservations: list[CapacityReservationStatus] = Field(default_factory=list)
    """Capacity reservations matched by ``capacityReservationSelectorTerms``."""
    instance_profile: str | None = None
    """The instance profile the instances get."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """``Ready``: every selector matched, a role or profile is set and the preflight passed;
    otherwise the message says what is missing. ``ValidationSucceeded``: the launch requests sent
    with DryRun were allowed; when refused, the reason is the AWS error code and the message names
    the call and the permission or tag the controller's role lacks."""


class EC2NodeClass(SpecModel):
    """An EC2NodeClass: settings of the aws cloud provider."""

    api_version: Annotated[Literal["joiner.sh/v1"], WithJsonSchema({"type": "string"})] = API_VERSION
    """``joiner.sh/v1``."""
    kind: Annotated[Literal["EC2NodeClass"], WithJsonSchema({"type": "string"})] = "EC2NodeClass"
    """``EC2NodeClass``."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: EC2NodeClassSpec
    """How instances are launched."""
    status: EC2NodeClassStatus | None = None
    """Observed state, written by joiner."""

    @property
    def name(self) -> str:
        """``metadata.name`` (empty if unset)."""
        return self.metadata.name or ""
