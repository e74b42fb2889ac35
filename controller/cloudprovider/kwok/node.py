"""The Node object the kwok provider creates for a launched NodeClaim. Pure: no I/O, no clock."""

from __future__ import annotations

from typing import Final

from api.v1.labels import (
    ANNOTATION_KWOK_NODE,
    API_VERSION,
    FINALIZER_TERMINATION,
    KWOK_NODE_FAKE,
    LABEL_ARCH,
    LABEL_HOSTNAME,
    LABEL_OS,
    RESOURCE_NVIDIA_GPU,
    TAINT_UNREGISTERED,
    TAINT_UNREGISTERED_EFFECT,
    normalize_label_key,
)
from controller.cloudprovider.kwok.nodeclass import KWOKNodeClassSpec
from controller.cloudprovider.kwok.offerings import offering_labels
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.instancetypes import Offering as CatalogOffering
from controller.state.views import NodeClaimView, NodeView, Obj, TaintRef

PROVIDER_ID_PREFIX = "kwok://"
# On every Node this provider creates: its instances are these Nodes, and garbage collection must
# never take a Node someone else made with a kwok:// providerID (kwok's own tooling, a test, a user).
ANNOTATION_LAUNCHED_BY: Final = "joiner.sh/launched-by"
LAUNCHED_BY_KWOK: Final = "kwok-provider"

# Label keys a requirement must never copy onto a Node: they belong to the kubelet or to joiner.
_NOT_FROM_REQUIREMENTS = frozenset({LABEL_HOSTNAME})

# The kubelet registers its Node with the deprecated beta os/arch labels beside the stable ones
# (kubeletapis.LabelOS/LabelArch). A Node without them gets them from kube-controller-manager's node
# lifecycle controller, one GET and one PATCH per Node (1,200 of each in a 10,000-pod burst): the
# kwok provider stands in for the kubelet, so it registers them as the kubelet does.
BETA_LABELS: Final = {LABEL_OS: "beta.kubernetes.io/os", LABEL_ARCH: "beta.kubernetes.io/arch"}


def provider_id_for(nodeclaim_name: str) -> str:
    return f"{PROVIDER_ID_PREFIX}{nodeclaim_name}"


def launched_here(node: NodeView) -> bool:
    """Whether this provider made the Node: a kwok:// providerID and the provider's own mark."""
    return is_kwok_provider_id(node.provider_id) and node.annotations.get(ANNOTATION_LAUNCHED_BY) == LAUNCHED_BY_KWOK


def is_kwok_provider_id(provider_id: str | None) -> bool:
    return bool(provider_id) and str(provider_id).startswith(PROVIDER_ID_PREFIX)


def _taints(nodeclaim: NodeClaimView) -> list[Obj]:
    out: list[Obj] = []
    seen: set[tuple[str, str]] = set()
    unregistered = TaintRef(key=TAINT_UNREGISTERED, effect=TAINT_UNREGISTERED_EFFECT)
    for taint in [*nodeclaim.taints, *nodeclaim.startup_taints, unregistered]:
        if taint.ident in seen:
            continue
        seen.add(taint.ident)
        out.append(taint.as_dict())
    return out


def node_labels(*, nodeclaim: NodeClaimView, instance_type: InstanceType, offering: CatalogOffering) -> dict[str, str]:
    """NodeClaim labels, single-valued `In` requirements, then the machine's own labels (which win),
    and the beta os/arch labels the kubelet registers beside the stable ones."""
    labels: dict[str, str] = {}
    for req in nodeclaim.requirements:
        key = normalize_label_key(str(req.get("key", "")))
        values = req.get("values") or []
        if req.get("operator") == "In" and len(values) == 1 and key not in _NOT_FROM_REQUIREMENTS:
            labels[key] = str(values[0])
    labels.update(nodeclaim.labels)
    labels.update(offering_labels(instance_type, offering))
    labels[LABEL_HOSTNAME] = nodeclaim.name
    for stable, beta in BETA_LABELS.items():
        if stable in labels:
            labels[beta] = labels[stable]
    return labels


def build_node(
    *,
    nodeclaim: NodeClaimView,
    instance_type: InstanceType,
    offering: CatalogOffering,
    nodeclass: KWOKNodeClassSpec,
) -> Obj:
    """The Node for a NodeClaim: named after it, carrying its providerID, labels, taints, resources.

    Failure injection: no kwok annotation for `neverReady` types (kwok then never makes it Ready);
    no `nvidia.com/gpu` in allocatable for `hideGPUs` types.
    """
    name = nodeclaim.name
    failures = nodeclass.failures
    labels = node_labels(nodeclaim=nodeclaim, instance_type=instance_type, offering=offering)
    annotations: dict[str, str] = {ANNOTATION_LAUNCHED_BY: LAUNCHED_BY_KWOK}
    if instance_type.name not in failures.never_ready and not failures.stuck(str(nodeclaim.uid or nodeclaim.name)):
        annotations[ANNOTATION_KWOK_NODE] = KWOK_NODE_FAKE
    allocatable = instance_type.allocatable.to_quantities()
    if instance_type.name in failures.hide_gpus:
        allocatable.pop(RESOURCE_NVIDIA_GPU, None)
    metadata: Obj = {
        "name": name,
        "labels": labels,
        "annotations": annotations,
        "finalizers": [FINALIZER_TERMINATION],
    }
    if nodeclaim.uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": "NodeClaim",
                "name": name,
                "uid": nodeclaim.uid,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": {"providerID": provider_id_for(name), "taints": _taints(nodeclaim)},
        "status": {
            "capacity": instance_type.capacity.to_quantities(),
            "allocatable": allocatable,
            "nodeInfo": {
                "architecture": labels.get(LABEL_ARCH, "amd64"),
                "operatingSystem": labels.get(LABEL_OS, "linux"),
                "kubeletVersion": "kwok",
            },
        },
    }
