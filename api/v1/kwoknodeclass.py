"""KWOKNodeClass: settings of the fake cloud provider, including failure injection for tests."""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field, WithJsonSchema

from api.v1.conditions import Condition
from api.v1.labels import API_VERSION, CapacityType
from api.v1.meta import ObjectMeta, SpecModel, StatusModel
from api.v1.types import Duration, LabelValue, ObjectRef

DEFAULT_REGISTRATION_DELAY: Final = "0s"
CATALOG_CONFIGMAP_KEY: Final = "catalog.json"
MAX_FAILURE_ENTRIES: Final = 100


class OfferingSelector(SpecModel):
    """Selects offerings (instance type x zone x capacity type). Unset fields match anything."""

    instance_type: LabelValue | None = None
    """Instance type name, e.g. ``p5.48xlarge``."""
    zone: LabelValue | None = None
    """Zone, e.g. ``us-east-1a``."""
    capacity_type: CapacityType | None = None
    """``spot``, ``on-demand`` or ``reserved``."""


class FailureInjection(SpecModel):
    """Failures the fake cloud produces on purpose, to test joiner's error handling."""

    omit_when_empty = frozenset({"insufficient_capacity", "never_register", "never_ready", "hide_gpus"})

    insufficient_capacity: list[OfferingSelector] = Field(default_factory=list, max_length=MAX_FAILURE_ENTRIES)
    """Launches of matching offerings fail with insufficient capacity. ``{}`` matches every offering."""
    never_register: list[LabelValue] = Field(default_factory=list, max_length=MAX_FAILURE_ENTRIES)
    """Instance types whose launches succeed but never produce a Node."""
    never_ready: list[LabelValue] = Field(default_factory=list, max_length=MAX_FAILURE_ENTRIES)
    """Instance types whose Nodes register but never become Ready."""
    hide_gpus: list[LabelValue] = Field(default_factory=list, max_length=MAX_FAILURE_ENTRIES, alias="hideGPUs")
    """Instance types whose Nodes never show ``nvidia.com/gpu`` in allocatable."""
    insufficient_capacity_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    """Share (0..1) of offerings that answer "no capacity", drawn per offering and minute: an offering
    drawn out of capacity refuses every launch in that minute, as a cloud's capacity pool stays dry
    for a while."""
    throttle_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    """Share (0..1) of launch calls that fail as throttled (the lifecycle retries them with backoff)."""
    launch_latency: Duration | None = None
    """Each launch takes up to this long (drawn per NodeClaim), e.g. ``3s``."""
    never_register_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    """Share (0..1) of launched machines whose Node never appears (drawn per NodeClaim)."""
    never_ready_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    """Share (0..1) of Nodes that never become Ready (drawn per NodeClaim)."""
    seed: int | None = Field(default=None, ge=0)
    """Seed of the draws above: the same seed and NodeClaims give the same faults."""


class KWOKNodeClassSpec(SpecModel):
    """How the fake cloud launches nodes."""

    omit_when_empty = frozenset({"failures"})

    registration_delay: Duration = DEFAULT_REGISTRATION_DELAY
    """Time between a launch and the Node object appearing, e.g. ``5s``."""
    catalog: ObjectRef | None = None
    """ConfigMap ``namespace/name`` holding the instance catalog as JSON under the key
    ``catalog.json``. Unset: the built-in catalog."""
    failures: FailureInjection = Field(default_factory=FailureInjection)
    """Failure injection for tests. Unset: nothing fails."""


class KWOKNodeClassStatus(StatusModel):
    """Observed state of the node class."""

    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """``Ready``: the catalog was loaded."""


class KWOKNodeClass(SpecModel):
    """A KWOKNodeClass: settings of the built-in fake (KWOK) cloud provider."""

    api_version: Annotated[Literal["joiner.sh/v1"], WithJsonSchema({"type": "string"})] = API_VERSION
    """``joiner.sh/v1``."""
    kind: Annotated[Literal["KWOKNodeClass"], WithJsonSchema({"type": "string"})] = "KWOKNodeClass"
    """``KWOKNodeClass``."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: KWOKNodeClassSpec = Field(default_factory=KWOKNodeClassSpec, json_schema_extra={"default": {}})
    """Fake cloud settings."""
    status: KWOKNodeClassStatus | None = None
    """Observed state, written by joiner."""

    @property
    def name(self) -> str:
        """``metadata.name`` (empty if unset)."""
        return self.metadata.name or ""
