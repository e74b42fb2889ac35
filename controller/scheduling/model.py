"""The solver's inputs and outputs: frozen value types, no Kubernetes client types.

Inputs: :class:`Pod` (pending pods, pods bound to existing nodes, daemonset pod templates),
:class:`ExistingNode` (registered nodes and in-flight NodeClaims), :class:`NodePoolTemplate`
(a NodePool with the instance types it may use), :class:`Gang`.

Output: :class:`Plan` with :class:`NewNodeClaim` entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.scheduling.frozen import EMPTY_LABELS, freeze
from controller.scheduling.instancetypes import InstanceType, Offering
from controller.scheduling.labels import LABEL_NODEPOOL
from controller.scheduling.requirements import EVERYTHING, Requirements
from controller.scheduling.resources import EMPTY, ONE_POD, Resources, sum_resources
from controller.scheduling.taints import Taint, Toleration

# --- pods -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A required pod (anti-)affinity term.

    ``selector`` selects pods by label (see :func:`requirements.label_selector`).
    ``namespaces`` are the namespaces whose pods count; ``all_namespaces`` overrides it (an empty
    ``namespaceSelector``).
    """

    topology_key: str
    selector: Requirements
    namespaces: frozenset[str] = frozenset()
    all_namespaces: bool = False

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if not self.all_namespaces and namespace not in self.namespaces:
            return False
        return self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class TopologySpread:
    """A ``whenUnsatisfiable: DoNotSchedule`` topology spread constraint.

    ``selector`` None means the constraint's labelSelector was unset: it counts no pods.
    ``honor_node_affinity``/``honor_node_taints`` are nodeAffinityPolicy/nodeTaintsPolicy
    (defaults Honor/Ignore, as in Kubernetes).
    """

    topology_key: str
    max_skew: int
    selector: Requirements | None
    min_domains: int | None = None
    honor_node_affinity: bool = True
    honor_node_taints: bool = False

    def selects(self, labels: Mapping[str, str]) -> bool:
        return self.selector is not None and self.selector.matches(labels)


BIND_ALL_HOST_IP = "0.0.0.0"
"""A host port on this address is taken on every address of the node (kube-scheduler's
``DefaultBindAllHostIP``; ``::`` is an address like any other to it)."""


@dataclass(frozen=True, slots=True)
class HostPort:
    """A port a pod takes on its node (a container port with ``hostPort``, or any container port of a
    ``hostNetwork`` pod). kube-scheduler's NodePorts filter lets no two pods take one port and
    protocol on one node, unless both name different addresses other than ``0.0.0.0``."""

    port: int
    protocol: str = "TCP"
    ip: str = BIND_ALL_HOST_IP

    def conflicts(self, other: HostPort) -> bool:
        return (
            self.port == other.port
            and self.protocol == other.protocol
            and (self.ip == other.ip or self.ip == BIND_ALL_HOST_IP or other.ip == BIND_ALL_HOST_IP)
        )

    def __str__(self) -> str:
        where = "" if self.ip == BIND_ALL_HOST_IP else f" on {self.ip}"
        return f"{self.protocol}/{self.port}{where}"


def ports_conflict(a: tuple[HostPort, ...], b: tuple[HostPort, ...]) -> HostPort | None:
    """The first port of ``a`` that one of ``b`` takes on the same node, or None."""
    for mine in a:
        for theirs in b:
            if mine.conflicts(theirs):
                return mine
    return None


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    requirements: Requirements


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as the solver sees it.

    ``requests`` are the effective requests (max of init containers vs sum of containers, plus
    overhead) *without* the pod slot; the solver adds ``pods: 1``.
    ``node_requirements`` are the OR-ed required terms, each already intersected with the
    nodeSelector; empty means unconstrained. ``host_ports`` are the ports it takes on its node.
    """

    name: str
    namespace: str = "default"
    requests: Resources = EMPTY
    labels: Mapping[str, str] = EMPTY_LABELS
    node_requirements: tuple[Requirements, ...] = ()
    preferred: tuple[PreferredTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    spread: tuple[TopologySpread, ...] = ()
    affinity: tuple[PodAffinityTerm, ...] = ()
    anti_affinity: tuple[PodAffinityTerm, ...] = ()
    owner: str | None = None
    gang: str | None = None
    uid: str = ""
    host_ports: tuple[HostPort, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", freeze(self.labels))

    @property
    def key(self) -> str:
        """``namespace/name``: how the plan refers to the pod."""
        return f"{self.namespace}/{self.name}"

    def scheduling_key(self) -> tuple[Any, ...]:
        """Everything that decides where the pod may go; equal keys mean interchangeable pods."""
        return (
            self.namespace,
            self.requests,
            self.labels,
            self.node_requirements,
            self.preferred,
            self.tolerations,
            self.spread,
            self.affinity,
            self.anti_affinity,
            self.gang,
            self.host_ports,
        )


# --- nodes and pools --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExistingNode:
    """A registered node, or an in-flight NodeClaim (``in_flight=True``) not yet a usable node.

    ``taints`` are the taints pods must tolerate: leave out startup taints and the ephemeral
    taints of a node that is still coming up (``kubeconv_nodes.node_from_dict`` does).
    ``pods`` are the pods bound to it (daemonset pods included), with their requests.
    ``capacity`` counts towards its NodePool's limits (defaults to ``allocatable``).
    """

    name: str
    allocatable: Resources
    labels: Mapping[str, str] = EMPTY_LABELS
    taints: tuple[Taint, ...] = ()
    pods: tuple[Pod, ...] = ()
    unschedulable: bool = False
    in_flight: bool = False
    capacity: Resources | None = None
    node_pool: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", freeze(self.labels))
        if self.node_pool is None and LABEL_NODEPOOL in self.labels:
            object.__setattr__(self, "node_pool", self.labels[LABEL_NODEPOOL])

    def requested(self) -> Resources:
        """What the pods on it request, each with its pod slot."""
        return sum_resources(p.requests + ONE_POD for p in self.pods)


@dataclass(frozen=True, slots=True)
class NodePoolTemplate:
    """A NodePool, converted: what new NodeClaims from it look like and what it may still buy.

    ``limits``: resources the pool's nodes may total (by capacity); a resource not listed is
    unlimited. ``usage``: capacity of the pool's current nodes (registered and in flight).
    ``zero_limits``: the resources limited to 0, and ``over_limit`` the instance types taken out of
    ``instance_types`` because they have some of one (only the why-not text reads them).
    """

    name: str
    instance_types: tuple[InstanceType, ...]
    weight: int = 0
    requirements: Requirements = EVERYTHING
    labels: Mapping[str, str] = EMPTY_LABELS
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    limits: Resources = EMPTY
    usage: Resources = EMPTY
    node_class: str | None = None
    zero_limits: tuple[str, ...] = ()
    over_limit: tuple[InstanceType, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", freeze(self.labels))


@dataclass(frozen=True, slots=True)
class Gang:
    """Pods with ``Pod.gang == id`` are placed all together or not at all.

    ``same_zone``: all of the gang's nodes (new and existing) must be in one zone.
    """

    id: str
    same_zone: bool = False


OfferingKey = tuple[str, str, str]
"""(instance type, zone, capacity type): an offering the solver must avoid."""


# --- output -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InstanceChoice:
    instance_type: str
    zone: str
    capacity_type: str
    price: float


@dataclass(frozen=True, slots=True)
class InstanceCandidate:
    """An instance type that can host a NodeClaim's pods, with the offerings that may be used
    (available, not marked unavailable, compatible with the requirements), cheapest first."""

    instance_type: str
    price: float
    offerings: tuple[Offering, ...]


@dataclass(frozen=True, slots=True)
class NewNodeClaim:
    """A machine the plan buys.

    ``name`` is stable within one plan (``<nodepool>-<n>``); ``requests`` is what the machine
    must offer (pods + daemonset overhead, including the ``pods`` count); ``requirements`` is
    NodePool ∩ pods ∩ chosen zone/capacity constraints, with the candidate instance types;
    ``candidates`` are all instance types that fit, cheapest first; ``choice`` is the cheapest.
    """

    name: str
    index: int
    node_pool: str
    pods: tuple[str, ...]
    requests: Resources
    requirements: Requirements
    candidates: tuple[InstanceCandidate, ...]
    choice: InstanceChoice
    labels: Mapping[str, str] = EMPTY_LABELS
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    gang: str | None = None

    @property
    def price(self) -> float:
        return self.choice.price


@dataclass(frozen=True, slots=True)
class Plan:
    """What to buy and where pending pods will go.

    ``existing_placements``: node name -> pods expected to land there (existing or in-flight).
    ``unschedulable``: pod -> a sentence saying why no NodePool or node can take it.
    """

    new_nodes: tuple[NewNodeClaim, ...] = ()
    existing_placements: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unschedulable: Mapping[str, str] = field(default_factory=dict)
    total_price: float = 0.0

    def node_of(self, pod_key: str) -> str | None:
        """Where a pod goes: a new NodeClaim's name, an existing node's name, or None."""
        for node in self.new_nodes:
            if pod_key in node.pods:
                return node.name
        for name, pods in self.existing_placements.items():
            if pod_key in pods:
                return name
        return None
