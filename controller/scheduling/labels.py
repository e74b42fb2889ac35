"""Label keys and taints the solver itself interprets.

These mirror :mod:`api.v1.labels` (the single source of the names; a unit test keeps the two in
step). They are repeated here so the pure solver does not import the pydantic API package.
"""

from __future__ import annotations

from typing import Final

LABEL_NODEPOOL: Final = "joiner.sh/nodepool"
LABEL_CAPACITY_TYPE: Final = "joiner.sh/capacity-type"
LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
LABEL_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_REGION: Final = "topology.kubernetes.io/region"
LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_OS: Final = "kubernetes.io/os"
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_GPU_NAME: Final = "joiner.sh/gpu-name"
LABEL_GPU_COUNT: Final = "joiner.sh/gpu-count"
LABEL_GPU_MEMORY: Final = "joiner.sh/gpu-memory"
LABEL_GPU_MANUFACTURER: Final = "joiner.sh/gpu-manufacturer"
LABEL_GANG: Final = "joiner.sh/gang"
LABEL_INSTANCE_FAMILY: Final = "joiner.sh/instance-family"
LABEL_INSTANCE_CPU: Final = "joiner.sh/instance-cpu"
LABEL_INSTANCE_MEMORY: Final = "joiner.sh/instance-memory"

INSTANCE_TYPE_KEYS: Final = frozenset(
    {
        LABEL_INSTANCE_TYPE,
        LABEL_ZONE,
        LABEL_CAPACITY_TYPE,
        LABEL_ARCH,
        LABEL_OS,
        LABEL_GPU_NAME,
        LABEL_GPU_COUNT,
        LABEL_GPU_MEMORY,
        LABEL_GPU_MANUFACTURER,
        LABEL_INSTANCE_FAMILY,
        LABEL_INSTANCE_CPU,
        LABEL_INSTANCE_MEMORY,
    }
)
"""Labels that describe the machine (set from the instance type and offering), not the NodePool:
a NodePool requirement on one of them filters instance types, and an instance type without the
label does not have it. Any other key a NodePool requires is a label the NodeClaim itself carries."""

KARPENTER_LABEL_ALIASES: Final = {
    "karpenter.sh/capacity-type": LABEL_CAPACITY_TYPE,
    "karpenter.sh/nodepool": LABEL_NODEPOOL,
}

TAINT_UNREGISTERED: Final = "joiner.sh/unregistered"
TAINT_PLANNED: Final = "joiner.sh/planned"
TAINT_DISRUPTED: Final = "joiner.sh/disrupted"

EPHEMERAL_TAINT_KEYS: Final = frozenset(
    {
        TAINT_UNREGISTERED,
        TAINT_PLANNED,
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
    }
)
"""Taints every new node carries for a while; pods need not tolerate them to count a node
that is still coming up as capacity."""
