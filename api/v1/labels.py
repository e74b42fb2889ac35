"""Well-known label, annotation, taint, finalizer and resource names.

Everything joiner writes on NodeClaims and Nodes, or reads from pods, is named here once.
Pods may select on any of the labels in :data:`WELL_KNOWN_LABELS`.
"""

from __future__ import annotations

from typing import Final, Literal

GROUP: Final = "joiner.sh"
VERSION: Final = "v1"
API_VERSION: Final = "joiner.sh/v1"

# --- labels -----------------------------------------------------------------------------------

LABEL_NODEPOOL: Final = "joiner.sh/nodepool"
"""The NodePool a NodeClaim (and its Node) was provisioned from. Set by joiner only."""

LABEL_CAPACITY_TYPE: Final = "joiner.sh/capacity-type"
"""How the machine is bought: one of :data:`CAPACITY_TYPES`."""

CAPACITY_TYPE_SPOT: Final = "spot"
CAPACITY_TYPE_ON_DEMAND: Final = "on-demand"
CAPACITY_TYPE_RESERVED: Final = "reserved"
CAPACITY_TYPES: Final = (CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED)
CapacityType = Literal["spot", "on-demand", "reserved"]

LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
LABEL_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_REGION: Final = "topology.kubernetes.io/region"
LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_OS: Final = "kubernetes.io/os"
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_WINDOWS_BUILD: Final = "node.kubernetes.io/windows-build"

LABEL_GPU_NAME: Final = "joiner.sh/gpu-name"
"""GPU model, e.g. ``H100``, ``H200``, ``A100``, ``L40S``, ``L4``, ``A10G``."""
LABEL_GPU_COUNT: Final = "joiner.sh/gpu-count"
"""Number of GPUs on the machine, as a decimal string (usable with ``Gt``/``Lt``)."""
LABEL_GPU_MEMORY: Final = "joiner.sh/gpu-memory"
"""Memory of one GPU in MiB, as a decimal string (usable with ``Gt``/``Lt``)."""
LABEL_GPU_MANUFACTURER: Final = "joiner.sh/gpu-manufacturer"
"""GPU vendor, e.g. ``nvidia``."""

LABEL_GANG: Final = "joiner.sh/gang"
"""Gang id: on pods, names the gang they belong to; on NodeClaims/Nodes, the gang they serve."""

WELL_KNOWN_LABELS: Final = frozenset(
    {
        LABEL_NODEPOOL,
        LABEL_CAPACITY_TYPE,
        LABEL_INSTANCE_TYPE,
        LABEL_ZONE,
        LABEL_REGION,
        LABEL_ARCH,
        LABEL_OS,
        LABEL_GPU_NAME,
        LABEL_GPU_COUNT,
        LABEL_GPU_MEMORY,
        LABEL_GPU_MANUFACTURER,
    }
)
"""Labels joiner puts on every NodeClaim and Node it creates; pods may select on any of them."""

# Label keys in the joiner.sh domain that a NodePool may use in requirements and template labels.
# joiner.sh/nodepool and joiner.sh/gang are set by joiner itself and are restricted there.
USER_SELECTABLE_JOINER_LABELS: Final = (
    LABEL_CAPACITY_TYPE,
    LABEL_GPU_NAME,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MANUFACTURER,
)

# Label keys in the kubernetes.io / k8s.io domains a NodePool or NodeClaim may constrain. Any
# other key in those domains (except node.kubernetes.io/* and node-restriction.kubernetes.io/*)
# belongs to Kubernetes and is restricted, like kubernetes.io/hostname.
ALLOWED_KUBERNETES_LABELS: Final = (
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    LABEL_REGION,
    LABEL_ARCH,
    LABEL_OS,
    LABEL_WINDOWS_BUILD,
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)

KARPENTER_LABEL_ALIASES: Final = {
    "karpenter.sh/capacity-type": LABEL_CAPACITY_TYPE,
    "karpenter.sh/nodepool": LABEL_NODEPOOL,
}
"""Karpenter label keys that mean the same as a joiner label (for converted NodePools)."""


def normalize_label_key(key: str) -> str:
    """Map a Karpenter label key to its joiner equivalent; other keys are returned unchanged."""
    return KARPENTER_LABEL_ALIASES.get(key, key)


# --- annotations ------------------------------------------------------------------------------

ANNOTATION_DO_NOT_DISRUPT: Final = "joiner.sh/do-not-disrupt"
"""On a pod or Node: ``"true"`` forbids voluntary disruption (consolidation, drift, expiry)."""
ANNOTATION_EVICTION_PRIORITY: Final = "joiner.sh/eviction-priority"
"""On a pod: ``low``, ``medium`` (the default) or ``high``. A draining node evicts its ``low`` pods
first, its ``medium`` pods once those are gone, its ``high`` pods last."""
EVICTION_PRIORITIES: Final = ("low", "medium", "high")
ANNOTATION_REBALANCE_RECOMMENDED: Final = "joiner.sh/rebalance-recommended"
"""On a NodeClaim: when EC2 recommended rebalancing its spot instance (RFC 3339). Acted on only where
the NodePool's ``spec.disruption.rebalanceRecommendation`` is ``Replace``."""
ANNOTATION_IDLE_GPU_RECLAIM: Final = "joiner.sh/idle-gpu-reclaim"
"""On a pod: ``"true"`` lets consolidation evict it for good from a node whose GPUs are idle (the
NodeClaim's ``GPUIdle`` condition), even when no controller would recreate it."""
ANNOTATION_GANG_SIZE: Final = "joiner.sh/gang-size"
"""On a gang pod: the number of pods in the gang (decimal string)."""
ANNOTATION_GANG_CLAIMS: Final = "joiner.sh/gang-claims"
"""On a gang's NodeClaim: every new NodeClaim of its attempt and NodePool with its planned offering
(``name=type/zone/capacity-type,...``), so a provider can launch them in one request."""
ANNOTATION_KWOK_NODE: Final = "kwok.x-k8s.io/node"
"""On a Node: ``fake`` tells the KWOK controller to manage it (make it Ready, run its pods)."""
KWOK_NODE_FAKE: Final = "fake"
ANNOTATION_PLANNED_INSTANCE_TYPE: Final = "joiner.sh/planned-instance-type"
"""On a NodeClaim, written when it is created: the instance type the plan chose for it."""
ANNOTATION_PLANNED_ZONE: Final = "joiner.sh/planned-zone"
"""On a NodeClaim, written when it is created: the zone the plan chose for it. The requirements still
allow every zone of its candidates (a fallback when that zone has no capacity); among offerings of
equal price a provider takes this zone first, so equal prices spread over the zones as planned."""
ANNOTATION_PLANNED_PRICE: Final = "joiner.sh/planned-price"
"""On a NodeClaim, written when it is created: the planned price per hour (decimal string). Rewritten
to the on-demand price when a ``reserved`` NodeClaim's reservation ends and its machine runs on."""
ANNOTATION_REFUSED_OFFERINGS: Final = "joiner.sh/refused-offerings"
"""On a NodeClaim, written at launch when cheaper offerings answered "no capacity" first: JSON
``{"at": time, "offerings": ["type/zone/capacity-type", ...]}``, so a restarted controller keeps them
unavailable for the rest of the unavailable-offering TTL."""
ANNOTATION_NODEPOOL_HASH: Final = "joiner.sh/nodepool-hash"
"""On a NodeClaim, written when it is created: the hash of its NodePool's template (drift detection)."""

# --- taints, finalizers, scheduling gates, resources ------------------------------------------

TAINT_UNREGISTERED: Final = "joiner.sh/unregistered"
# NoSchedule, not NoExecute: kube-controller-manager's taint-eviction controller may see a pod bound
# a moment after the taint's removal before it sees the removal, and deletes the pod at once
# (kubernetes/kubernetes#119862). Keeping pods off the node is all this taint is for.
TAINT_UNREGISTERED_EFFECT: Final = "NoSchedule"
"""Carried by a Node from creation until joiner has registered it with its NodeClaim."""
TAINT_PLANNED: Final = "joiner.sh/planned"
TAINT_PLANNED_EFFECT: Final = "NoSchedule"
"""Carried by a Node bought for pending pods, with the NodeClaim's name as its value, from the moment
it opens until every pod planned there has bound (or left the plan): only the pods the plan put
there, which joiner gives the matching toleration, may take its room."""
TAINT_DISRUPTED: Final = "joiner.sh/disrupted"
TAINT_DISRUPTED_EFFECT: Final = "NoSchedule"
"""Put on a Node while joiner removes it, so nothing new schedules there."""

FINALIZER_TERMINATION: Final = "joiner.sh/termination"
"""On NodeClaims and Nodes: removed once the instance is gone and the Node drained."""

SCHEDULING_GATE_GANG: Final = "joiner.sh/gang"
"""Scheduling gate joiner keeps on gang pods until every member's node is Initialized."""

RESOURCE_NVIDIA_GPU: Final = "nvidia.com/gpu"
RESOURCE_CPU: Final = "cpu"
RESOURCE_MEMORY: Final = "memory"
RESOURCE_PODS: Final = "pods"
RESOURCE_EPHEMERAL_STORAGE: Final = "ephemeral-storage"
