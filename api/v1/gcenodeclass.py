"""GCENodeClass: how the gcp provider launches Compute Engine instances (Karpenter-style field names).

A NodePool points at one through ``spec.template.spec.nodeClassRef`` (``kind: GCENodeClass``).
The zones offered are the region's zones (``zones`` narrows them) where a selected subnetwork can
place an instance; the image is either a source image (or image family) or the instance template
of a GKE node pool, whose boot image, metadata (``kube-env``), service account and tags machines
then copy so they join the GKE cluster the way GKE's own nodes do.
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
GCE_NAME_PATTERN: Final = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
"""A Compute Engine resource name (RFC 1035, at most 63 characters)."""
GCE_LABEL_KEY_PATTERN: Final = r"^[a-z][-_a-z0-9]{0,62}$"
GCE_LABEL_VALUE_PATTERN: Final = r"^[-_a-z0-9]{0,63}$"
IMAGE_PATTERN: Final = (
    r"^(https://www\.googleapis\.com/compute/v1/)?projects/[-a-z0-9]+/global/images/(family/)?[-a-z0-9]+$"
)
"""``projects/<p>/global/images/<image>`` or ``projects/<p>/global/images/family/<family>``."""
DISK_CATEGORIES: Final = ("pd-standard", "pd-balanced", "pd-ssd", "pd-extreme", "hyperdisk-balanced", "local-ssd")
LOCAL_SSD_GIB: Final = 375

GCELabels = Annotated[
    dict[
        Annotated[str, Field(pattern=GCE_LABEL_KEY_PATTERN)],
        Annotated[str, Field(pattern=GCE_LABEL_VALUE_PATTERN)],
    ],
    Field(max_length=60),
    WithJsonSchema({"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 60}),
]
GCEName = Annotated[str, Field(pattern=GCE_NAME_PATTERN)]


class SubnetworkSelectorTerm(SpecModel):
    """Selects a subnetwork of the NodeClass's region by name (in ``project``, default the NodeClass's:
    a Shared VPC host project names its own)."""

    name: GCEName
    """The subnetwork's name, e.g. ``gpu-nodes``."""
    project: GCEName | None = None
    """The project owning the subnetwork (Shared VPC host); default the NodeClass's project."""


class GKENodePool(SpecModel):
    """A node pool of a GKE cluster, whose instance template new machines copy."""

    project: GCEName | None = None
    """The cluster's project; default the NodeClass's."""
    location: Annotated[str, Field(pattern=r"^[a-z]+-[a-z]+[0-9]+(-[a-z])?$")]
    """The cluster's region or zone, e.g. ``us-central1``."""
    cluster: GCEName
    """The cluster's name."""
    name: GCEName
    """The node pool's name."""


class ImageSelectorTerm(SpecModel):
    """The boot image: a source image or image family, an instance template to copy, or the GKE node
    pool whose instance template to copy."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "[has(self.image), has(self.instanceTemplate), has(self.gkeNodePool)].filter(x, x).size() == 1",
                    "an image selector term sets exactly one of 'image', 'instanceTemplate' or 'gkeNodePool'",
                )
            ]
        }
    )

    image: Annotated[str, Field(pattern=IMAGE_PATTERN)] | None = None
    """``projects/cos-cloud/global/images/family/cos-stable`` (a family resolves to its newest image)
    or a specific image."""
    instance_template: GCEName | None = None
    """The name of an instance template (global, in the NodeClass's project) to copy: the boot image,
    metadata, service account, network tags and labels of a GKE node pool's template. joiner's own
    settings (machine type, zone, provisioning model, labels, the fields set here) win."""
    gke_node_pool: GKENodePool | None = Field(default=None, alias="gkeNodePool")
    """A GKE node pool: joiner follows it to its instance group's template (and again when GKE makes a
    new one at an upgrade: the old machines then drift) and copies that as ``instanceTemplate`` does."""
    gpu: bool | None = None
    """Use this term only for GPU machines (true) or only for machines without GPUs (false); unset:
    for both."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if sum(x is not None for x in (self.image, self.instance_template, self.gke_node_pool)) != 1:
            raise PydanticCustomError(
                "image_selector_term", "imageSelectorTerms: set exactly one of image, instanceTemplate, gkeNodePool"
            )
        return self


class ReservationSelectorTerm(SpecModel):
    """A specific reservation (its zone and machine type come from the reservation); ``project``
    names the owner of a shared reservation."""

    name: GCEName
    """The reservation's name."""
    project: GCEName | None = None
    """The project that owns a shared reservation; default the NodeClass's project."""


class ServiceAccount(SpecModel):
    """The service account the instances run as."""

    email: Annotated[str, Field(min_length=3, max_length=254)]
    """The service account's email, e.g. ``gpu-nodes@my-project.iam.gserviceaccount.com``."""
    scopes: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: ["https://www.googleapis.com/auth/cloud-platform"], max_length=32
    )
    """OAuth scopes; default ``cloud-platform`` (IAM roles then decide what the nodes may do)."""


class Disk(SpecModel):
    """A disk of the launched instances: the boot disk, or extra persistent or local SSD disks."""

    category: Literal["pd-standard", "pd-balanced", "pd-ssd", "pd-extreme", "hyperdisk-balanced", "local-ssd"] = (
        "pd-balanced"
    )
    """The disk type; ``local-ssd`` disks are 375 GiB NVMe each (A3 machines come with theirs)."""
    size_gib: Annotated[int, Field(ge=10, le=65536)] | None = Field(default=None, alias="sizeGiB")
    """Size in GiB; default 100 for the boot disk, 375 for a local SSD."""
    boot: bool = False
    """This is the boot disk (at most one)."""
    count: Annotated[int, Field(ge=1, le=24)] = 1
    """How many such disks (local SSDs: the machine type decides which counts are allowed)."""


class GCENodeClassSpec(SpecModel):
    """How Compute Engine instances are launched for NodePools that reference this class."""

    omit_when_empty = frozenset(
        {"zones", "reservation_selector_terms", "disks", "labels", "network_tags", "metadata", "startup_script"}
    )

    project: GCEName
    """The project instances are created in."""
    region: Annotated[str, Field(pattern=r"^[a-z]+-[a-z]+[0-9]+$")]
    """The region, e.g. ``us-central1``."""
    zones: list[Annotated[str, Field(pattern=r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")]] = Field(
        default_factory=list, max_length=16
    )
    """Zones of the region to use; default every zone of the region that is UP."""
    subnetwork_selector_terms: list[SubnetworkSelectorTerm] = Field(min_length=1, max_length=MAX_SELECTOR_TERMS)
    """Subnetworks of the region; the first one is used (a subnetwork spans the region's zones)."""
    image_selector_terms: list[ImageSelectorTerm] = Field(min_length=1, max_length=MAX_SELECTOR_TERMS)
    """Boot images: the first term that applies to the machine (GPU or not) is used."""
    service_account: ServiceAccount | None = None
    """The instances' service account; unset: the instance template's, or none."""
    disks: list[Disk] = Field(default_factory=list, max_length=32)
    """Disks; unset: a 100 GiB pd-balanced boot disk (GPU images want 200 GiB or more)."""
    reservation_selector_terms: list[ReservationSelectorTerm] = Field(
        default_factory=list, max_length=MAX_SELECTOR_TERMS
    )
    """Reservations (offerings of capacity type ``reserved``, used first while they have room)."""
    labels: GCELabels = Field(default_factory=dict)
    """Labels added to the instances (joiner's own labels win)."""
    network_tags: list[GCEName] = Field(default_factory=list, max_length=64)
    """Network tags (firewall rules select instances by them)."""
    metadata: dict[str, str] = Field(default_factory=dict, max_length=64)
    """Instance metadata items (``kube-env``, ``cluster-name``, ...)."""
    startup_script: str | None = None
    """A startup script (self-managed clusters: install and start the kubelet); the metadata item
    ``startup-script``."""

    @model_validator(mode="after")
    def _one_boot_disk(self) -> Self:
        if sum(1 for d in self.disks if d.boot) > 1:
            raise PydanticCustomError("gcenodeclass_disks", "disks: at most one boot disk")
        if any(d.boot and d.category == "local-ssd" for d in self.disks):
            raise PydanticCustomError("gcenodeclass_disks", "disks: the boot disk cannot be a local SSD")
        return self


class ImageStatus(StatusModel):
    """A resolved boot image."""

    image: str
    gpu: bool | None = None
    instance_template: str | None = None
    """The template copied (``projects/<p>/global|regions/<r>/instanceTemplates/<name>``)."""


class ReservationStatus(StatusModel):
    """A resolved specific reservation."""

    name: str
    project: str
    zone: str
    instance_type: str
    available: int = 0


class GCENodeClassStatus(StatusModel):
    """What the NodeClass resolved to, written by joiner."""

    zones: list[str] = Field(default_factory=list)
    """The zones offered."""
    subnetwork: str | None = None
    """The subnetwork instances are placed in (``projects/<p>/regions/<r>/subnetworks/<name>``)."""
    images: list[ImageStatus] = Field(default_factory=list)
    """The boot images, resolved (a family to its newest image, a template to its boot image)."""
    reservations: list[ReservationStatus] = Field(default_factory=list)
    """The reservations found, with the machines they still have room for."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """``Ready``: the region, a subnetwork and every image resolved; otherwise the message says what did not."""


class GCENodeClass(SpecModel):
    """A GCENodeClass: settings of the gcp cloud provider."""

    api_version: Annotated[Literal["joiner.sh/v1"], WithJsonSchema({"type": "string"})] = API_VERSION
    """``joiner.sh/v1``."""
    kind: Annotated[Literal["GCENodeClass"], WithJsonSchema({"type": "string"})] = "GCENodeClass"
    """``GCENodeClass``."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: GCENodeClassSpec
    """How instances are launched."""
    status: GCENodeClassStatus | None = None
    """Observed state, written by joiner."""

    @property
    def name(self) -> str:
        """``metadata.name`` (empty if unset)."""
        return self.metadata.name or ""
