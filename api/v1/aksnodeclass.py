"""AKSNodeClass: how the azure provider launches Azure virtual machines (Karpenter Azure's kind name,
its field names where they exist).

A NodePool points at one through ``spec.template.spec.nodeClassRef`` (``kind: AKSNodeClass``). Each
NodeClaim becomes one VM in ``resourceGroup``, named after the NodeClaim, in one of ``zones``, on the
subnet ``vnetSubnetID``, booting ``imageID`` (``gpuImageID`` for GPU sizes, when set): the AKS node
image from its community gallery so machines join an AKS cluster as AKS's agent nodes do, or your
own image with cloud-init ``customData`` for a self-managed cluster.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, Self

from pydantic import ConfigDict, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from api.v1.common import cel_rule
from api.v1.conditions import Condition
from api.v1.labels import API_VERSION
from api.v1.meta import ObjectMeta, SpecModel, StatusModel

ARM_ID_PATTERN: Final = r"^/(subscriptions|CommunityGalleries|SharedGalleries)/.+"
SUBNET_ID_PATTERN: Final = (
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+$"
)
MAX_TAGS: Final = 50

ArmId = Annotated[str, Field(pattern=ARM_ID_PATTERN, max_length=1024)]
Tags = Annotated[
    dict[str, str],
    Field(max_length=MAX_TAGS),
    WithJsonSchema({"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": MAX_TAGS}),
]


class AKSNodeClassSpec(SpecModel):
    """How Azure VMs are launched for NodePools that reference this class."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "!has(self.spotMaxPrice) || self.spotMaxPrice == -1.0 || self.spotMaxPrice > 0.0",
                    "spotMaxPrice is -1 (up to the pay-as-you-go price) or a price above 0",
                )
            ]
        }
    )
    omit_when_empty = frozenset({"zones", "managed_identities", "tags"})

    subscription_id: Annotated[str, Field(pattern=r"^[0-9a-fA-F-]{36}$")] = Field(alias="subscriptionID")
    """The subscription the VMs are created in."""
    resource_group: Annotated[str, Field(min_length=1, max_length=90)]
    """The resource group of the VMs (on AKS: the cluster's node resource group, ``MC_...``)."""
    location: Annotated[str, Field(pattern=r"^[a-z0-9]+$")]
    """The region, e.g. ``eastus``."""
    zones: list[Annotated[str, Field(pattern=r"^[1-9]$")]] = Field(default_factory=list, max_length=3)
    """Availability zones (``1``, ``2``, ``3``); default every zone a VM size is offered in."""
    vnet_subnet_id: Annotated[str, Field(pattern=SUBNET_ID_PATTERN)] = Field(alias="vnetSubnetID")
    """The subnet of the VMs' network interface (on AKS: the cluster's node subnet)."""
    image_id: ArmId = Field(alias="imageID")
    """The image: a gallery image version (community, shared or your own) or a managed image, e.g.
    ``/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/2204gen2containerd/versions/latest``."""
    gpu_image_id: ArmId | None = Field(default=None, alias="gpuImageID")
    """The image of GPU VM sizes; default ``imageID``."""
    custom_data: str | None = None
    """cloud-init for the VMs (joiner base64-encodes it): what joins the node to the cluster."""
    admin_username: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")] = "azureuser"
    """The Linux admin user (Azure requires one)."""
    ssh_public_key: Annotated[str, Field(min_length=16, max_length=8192)]
    """The admin user's SSH public key (password login is off)."""
    managed_identities: list[ArmId] = Field(default_factory=list, max_length=16)
    """User-assigned managed identities of the VMs (resource IDs), e.g. the AKS kubelet identity."""
    os_disk_size_gb: Annotated[int, Field(ge=30, le=4095)] = Field(default=128, alias="osDiskSizeGB")
    """OS disk size in GiB (GPU nodes pull large images: 256 or more); the nodes' ephemeral storage."""
    os_disk_type: Literal["Premium_LRS", "StandardSSD_LRS", "Standard_LRS"] = "Premium_LRS"
    """The OS disk's storage type."""
    spot_max_price: float = Field(default=-1.0, ge=-1.0)
    """The highest price per hour of Spot VMs; ``-1`` (default): up to the pay-as-you-go price, so a
    Spot VM is evicted only for capacity."""
    capacity_reservation_group_id: ArmId | None = Field(default=None, alias="capacityReservationGroupID")
    """A capacity reservation group: its reservations are offerings of capacity type ``reserved``, used
    first while they have room."""
    tags: Tags = Field(default_factory=dict)
    """Tags on the VMs (joiner's own, ``joiner-cluster``, ``joiner-nodeclaim``, ``joiner-nodepool``, win)."""

    @model_validator(mode="after")
    def _spot_price(self) -> Self:
        if self.spot_max_price != -1.0 and self.spot_max_price <= 0.0:
            raise PydanticCustomError(
                "aksnodeclass_spot_price", "spotMaxPrice is -1 (up to the pay-as-you-go price) or a price above 0"
            )
        return self


class AKSNodeClassStatus(StatusModel):
    """Observed state, written by joiner."""

    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """``Ready``: the VM sizes of the location were listed (and the reservation group read)."""


class AKSNodeClass(SpecModel):
    """An AKSNodeClass: settings of the azure cloud provider."""

    api_version: Annotated[Literal["joiner.sh/v1"], WithJsonSchema({"type": "string"})] = API_VERSION
    """``joiner.sh/v1``."""
    kind: Annotated[Literal["AKSNodeClass"], WithJsonSchema({"type": "string"})] = "AKSNodeClass"
    """``AKSNodeClass``."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: AKSNodeClassSpec
    """How VMs are launched."""
    status: AKSNodeClassStatus | None = None
    """Observed state, written by joiner."""

    @property
    def name(self) -> str:
        """``metadata.name`` (empty if unset)."""
        return self.metadata.name or ""
