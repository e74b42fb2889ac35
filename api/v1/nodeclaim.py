"""NodeClaim: joiner's durable record of one machine it decided to buy."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal

from pydantic import ConfigDict, Field, WithJsonSchema

from api.v1.common import (
    MAX_REQUIREMENTS,
    MAX_TAINTS,
    NodeClaimRequirement,
    NodeClassReference,
    Taint,
    cel_rule,
)
from api.v1.conditions import Condition
from api.v1.labels import API_VERSION
from api.v1.meta import ObjectMeta, SpecModel, StatusModel
from api.v1.nodepool import DEFAULT_EXPIRE_AFTER
from api.v1.types import Duration, NillableDuration, Quantity

SPEC_IMMUTABLE_MESSAGE: Final = "spec is immutable: delete the NodeClaim and create a new one instead"


class ResourceRequirements(SpecModel):
    """Resources the NodeClaim must provide."""

    omit_when_empty = frozenset({"requests"})

    requests: dict[str, Quantity] = Field(default_factory=dict)
    """Minimum resources the node must have for the pods it was bought for (``cpu``, ``memory``,
    ``nvidia.com/gpu``, ``pods``, ...), daemonset overhead included."""


class NodeClaimSpec(SpecModel):
    """What machine to launch. Immutable once created."""

    omit_when_empty = frozenset({"requirements", "taints", "startup_taints", "resources"})

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [cel_rule("self == oldSelf", SPEC_IMMUTABLE_MESSAGE)]}
    )

    requirements: list[NodeClaimRequirement] = Field(default_factory=list, max_length=MAX_REQUIREMENTS)
    """Constraints on the node's labels. The candidate instance types, cheapest first, are the
    ``node.kubernetes.io/instance-type In [...]`` requirement; the provider picks one it can get."""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """Resources the node must provide."""
    taints: list[Taint] = Field(default_factory=list, max_length=MAX_TAINTS)
    """Taints for the node."""
    startup_taints: list[Taint] = Field(default_factory=list, max_length=MAX_TAINTS)
    """Taints the node starts with and that something else removes when it is ready."""
    node_class_ref: NodeClassReference
    """The node class (provider settings) to launch with."""
    expire_after: NillableDuration = DEFAULT_EXPIRE_AFTER
    """How long the node may live before it is replaced, or ``Never``."""
    termination_grace_period: Duration | None = None
    """Maximum time draining may take before pods are deleted regardless of PDBs."""


class NodeClaimStatus(StatusModel):
    """What was launched and how far it got."""

    provider_id: str | None = Field(default=None, alias="providerID")
    """The cloud provider's id of the instance (also the Node's ``spec.providerID``)."""
    node_name: str | None = None
    """Name of the Node that registered for this NodeClaim."""
    image_id: str | None = Field(default=None, alias="imageID")
    """Image the instance booted from."""
    capacity: dict[str, Quantity] = Field(default_factory=dict)
    """Resources of the launched instance."""
    allocatable: dict[str, Quantity] = Field(default_factory=dict)
    """Resources available to pods (capacity minus system overhead)."""
    last_pod_event_time: datetime | None = None
    """Last time a pod was bound to or removed from the node (consolidation waits
    ``consolidateAfter`` from here); moved at most once a minute while pods keep arriving."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """``Launched``, ``Registered``, ``Initialized``, ``Ready``, ``Consolidatable``, ``Drifted``,
    ``Drained``, ``GangAdmitted``."""
    reason: str | None = None
    """Why the NodeClaim is not Ready, in one word, as ``kubectl get pods`` shows a pod's STATUS:
    the reason of the first of ``Launched``, ``Registered``, ``Initialized``, ``Ready`` that is not
    True (``Launching``, ``Registering``, ``Initializing``, ``NotReady`` before it is set);
    ``Deleting`` once it is being deleted; ``Drifted`` when Ready but drifted; else ``Ready``.
    Written with the conditions (the ``Status`` column of ``kubectl get nodeclaims``)."""


class NodeClaim(SpecModel):
    """A NodeClaim: one machine joiner decided to buy, and its progress to a Ready node."""

    api_version: Annotated[Literal["joiner.sh/v1"], WithJsonSchema({"type": "string"})] = API_VERSION
    """``joiner.sh/v1``."""
    kind: Annotated[Literal["NodeClaim"], WithJsonSchema({"type": "string"})] = "NodeClaim"
    """``NodeClaim``."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata; labels carry the well-known labels of the node."""
    spec: NodeClaimSpec
    """What to launch. Immutable."""
    status: NodeClaimStatus | None = None
    """Observed state, written by joiner."""

    @property
    def name(self) -> str:
        """``metadata.name`` (empty if unset)."""
        return self.metadata.name or ""
