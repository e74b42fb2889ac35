"""What every controller is handed: the shared client, cache, clock, recorder, cloud and settings."""

from __future__ import annotations

from dataclasses import dataclass

from controller.clock import Clock
from controller.cloudprovider.types import CloudProvider
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.kube.client import KubeClient
from controller.kube.events import EventRecorder
from controller.settings import Settings
from controller.state.cluster import ClusterState


@dataclass(frozen=True, slots=True)
class Context:
    client: KubeClient
    cluster: ClusterState
    clock: Clock
    events: EventRecorder
    cloud: CloudProvider
    unavailable: UnavailableOfferings
    settings: Settings
