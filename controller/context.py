"""What every controller is handed: the shared client, cache, clock, recorder, cloud and settings."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from controller.clock import Clock
from controller.cloudprovider.types import CloudProvider
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.kube.client import KubeClient
from controller.kube.events import EventRecorder
from controller.settings import Settings
from controller.state.cluster import ClusterState
from controller.state.recent import RecentClaims


@dataclass(frozen=True, slots=True)
class Context:
    client: KubeClient
    cluster: ClusterState
    clock: Clock
    events: EventRecorder
    cloud: CloudProvider
    unavailable: UnavailableOfferings
    settings: Settings
    # Held while deciding and writing new NodeClaims (the provisioner's batches, a gang's attempt), so
    # two decisions never both count the same room under a NodePool's limits.
    provisioning_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # NodeClaims created by this process that the cache may not show yet, for the next decision
    recent_claims: RecentClaims = field(default_factory=RecentClaims)
