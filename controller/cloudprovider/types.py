"""The CloudProvider seam: what the lifecycle and termination controllers ask of a cloud.

Only the project's own types cross it: NodeClaims as the Kubernetes JSON joiner keeps in its cache,
`Instance` for what the cloud launched, and the solver's `InstanceType` for the catalog. No SDK type
(boto3, kubernetes_asyncio) appears here. Failures are typed, so callers can react to each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.scheduling.instancetypes import InstanceType

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class OfferingId:
    """One offering by identity: what a launch tried, what had no capacity, what is avoided for a
    while. The priced offering of a catalog is `controller.scheduling.instancetypes.Offering`."""

    instance_type: str
    zone: str
    capacity_type: str


@dataclass(frozen=True, slots=True)
class Instance:
    """A machine the provider launched for a NodeClaim."""

    provider_id: str
    nodeclaim: str
    instance_type: str
    zone: str
    capacity_type: str
    image_id: str = ""
    price: float = 0.0
    capacity: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    state: str = "running"
    # offerings that answered "no capacity" to this launch before it succeeded on this one
    refused: tuple[OfferingId, ...] = ()


class CloudProviderError(Exception):
    """Base of every typed provider failure."""


class InsufficientCapacityError(CloudProviderError):
    """None of the offerings tried had capacity; they are marked unavailable for a while.

    ``reason`` is the cloud's word for it (``InsufficientCapacity`` by default); ``quota`` says it
    was an account quota (the user must raise it), which the NodePool's status and Events show."""

    def __init__(
        self,
        message: str,
        offerings: tuple[OfferingId, ...] = (),
        *,
        reason: str = "InsufficientCapacity",
        quota: bool = False,
    ) -> None:
        super().__init__(message)
        self.offerings = offerings
        self.reason = reason
        self.quota = quota


class NodeClaimNotFoundError(CloudProviderError):
    """The instance behind a NodeClaim does not exist (any more)."""


class NodeClassNotReadyError(CloudProviderError):
    """The NodeClaim's NodeClass is missing or not Ready; the user must fix it."""


class CreateError(CloudProviderError):
    """Launching failed for a reason that is neither capacity nor the NodeClass."""

    def __init__(self, message: str, *, reason: str = "LaunchFailed") -> None:
        super().__init__(message)
        self.reason = reason


class CloudProvider(Protocol):
    @property
    def name(self) -> str:
        """The provider's name, as metrics and logs show it (`kwok`, `aws`)."""

    async def create(self, nodeclaim: Obj) -> Instance:
        """Launch the cheapest available offering among the NodeClaim's candidate instance types.

        Idempotent per NodeClaim: its ``metadata.uid`` is the idempotency key. Called again for the
        same NodeClaim (a retry after a timeout, a restart between the launch and the status write),
        it returns the instance already launched and buys nothing more (kwok: the launch record and
        the Node named after the NodeClaim; aws: a CreateFleet client token derived from the uid, and
        instances tagged with it)."""

    async def delete(self, nodeclaim: Obj) -> None:
        """Terminate the NodeClaim's instance; NodeClaimNotFoundError when it is already gone."""

    async def get(self, provider_id: str) -> Instance:
        """The instance with this providerID; NodeClaimNotFoundError when there is none."""

    async def list(self) -> list[Instance]:
        """Every instance this provider launched for this cluster (for garbage collection)."""

    async def is_drifted(self, nodeclaim: Obj) -> str | None:
        """The reason the instance no longer matches its NodeClass, or None."""

    async def instance_types(self, nodepool: Obj) -> Sequence[InstanceType]:
        """The instance types (with offerings and prices) this NodePool's NodeClass can launch."""
