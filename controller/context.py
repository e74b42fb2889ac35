"""What every controller is handed: the shared client, cache, clock, recorder, cloud, settings and
the one NodeClaim writer, and the warm buffers they share."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.clock import Clock
from controller.cloudprovider.types import CloudProvider
from controller.cloudprovider.unavailable import UnavailableOfferings
from controller.kube.client import KubeClient
from controller.kube.events import EventRecorder
from controller.settings import Settings
from controller.state.bookings import BookingBook
from controller.state.buffers import BufferBook
from controller.state.cluster import ClusterState
from controller.state.planned import PlannedPods
from controller.state.refusals import RefusalBook
from controller.state.writer import NodeClaimWriter


@dataclass(frozen=True, slots=True)
class Context:
    client: KubeClient
    cluster: ClusterState
    clock: Clock
    events: EventRecorder
    cloud: CloudProvider
    unavailable: UnavailableOfferings
    settings: Settings
    # creates every NodeClaim; its lock is held while deciding and writing them, and it remembers the
    # ones just created, so two decisions never count the same room under a NodePool's limits
    writer: NodeClaimWriter
    # the warm buffers: published by the capacity controller, planned by the provisioner, kept by disruption
    buffers: BufferBook = field(default_factory=BufferBook)
    # the pending pods the provisioner planned on each NodeClaim: the lifecycle opens a new Node reserved
    # to them (or, without reservations, keeps it closed to kube-scheduler until they are nominated)
    planned: PlannedPods = field(default_factory=PlannedPods)
    # why each NodePool refused the pods nobody could take: recorded by the provisioner, shown on the NodePool
    refusals: RefusalBook = field(default_factory=RefusalBook)
    # capacity booked for ProvisioningRequests: published by their controller, held by the provisioner,
    # kept by disruption
    bookings: BookingBook = field(default_factory=BookingBook)
