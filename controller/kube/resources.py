"""Descriptors of the Kubernetes resources joiner reads and writes (pure data, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, *, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
PODTEMPLATES = Resource("", "v1", "podtemplates", "PodTemplate", namespaced=True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", namespaced=True)
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet", namespaced=True)
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet", namespaced=True)
JOBS = Resource("batch", "v1", "jobs", "Job", namespaced=True)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True)
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True)
PVS = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
STORAGECLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
NODEPOOLS = Resource("joiner.sh", "v1", "nodepools", "NodePool", namespaced=False)
NODECLAIMS = Resource("joiner.sh", "v1", "nodeclaims", "NodeClaim", namespaced=False)
KWOKNODECLASSES = Resource("joiner.sh", "v1", "kwoknodeclasses", "KWOKNodeClass", namespaced=False)
EC2NODECLASSES = Resource("joiner.sh", "v1", "ec2nodeclasses", "EC2NodeClass", namespaced=False)
PROVISIONING_REQUESTS = Resource(
    "autoscaling.x-k8s.io", "v1", "provisioningrequests", "ProvisioningRequest", namespaced=True
)
AKSNODECLASSES = Resource("joiner.sh", "v1", "aksnodeclasses", "AKSNodeClass", namespaced=False)
GCENODECLASSES = Resource("joiner.sh", "v1", "gcenodeclasses", "GCENodeClass", namespaced=False)


def key_of(obj: dict[str, object]) -> str:
    """The cache key of an object: `namespace/name`, or `name` when cluster-scoped."""
    meta = obj.get("metadata")
    assert isinstance(meta, dict)
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])
