"""User data that joins an instance to the cluster: what the kubelet is started with. Pure.

For the ``AL2023`` family (an ``al2023@...`` alias or ``amiFamily: AL2023``) joiner writes a nodeadm
``NodeConfig`` (MIME part ``application/node.eks.aws``) with the cluster's name, API endpoint,
certificate authority and service CIDR, and kubelet flags: ``--node-labels`` (the NodePool's labels)
and ``--register-with-taints`` (``joiner.sh/unregistered``, the NodePool's taints and startup
taints), and ``kubelet.config.maxPods`` (the instance type's ENI limit, what the solver packs
against). For ``Bottlerocket`` it writes ``settings.kubernetes`` with the same (``max-pods``). The
``userData`` of the EC2NodeClass is kept: on AL2023 as MIME parts before joiner's (nodeadm merges
every ``NodeConfig`` in order; shell scripts run as usual); on Bottlerocket it is parsed and
joiner's settings merged into it (:data:`BOTTLEROCKET_OWNED` are joiner's, labels and taints are
merged with joiner's keys winning, the rest is the user's), then written out as one document.
``Ubuntu``, ``Custom`` and images selected without a family get ``userData`` exactly as written.

Only what is the same for every node of the NodePool goes into the user data -- the launch template
is shared by them. A gang's label and taint (``joiner.sh/gang``) are put on the Node at registration,
while it still has the ``joiner.sh/unregistered`` taint. Labels the kubelet may not set on itself
(``kubernetes.io`` and ``k8s.io`` domains, except ``node.kubernetes.io`` and
``kubelet.kubernetes.io``) are left to registration too.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from api.v1.labels import TAINT_UNREGISTERED, TAINT_UNREGISTERED_EFFECT
from controller.cloudprovider.aws import toml

BOUNDARY: Final = "//JOINER-BOUNDARY"
FAMILIES_WITH_BOOTSTRAP: Final = frozenset({"al2023", "bottlerocket"})
_KUBELET_MAY_SET: Final = ("node.kubernetes.io/", "kubelet.kubernetes.io/")
_PER_NODECLAIM: Final = ("joiner.sh/gang",)


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """How a kubelet reaches the cluster."""

    name: str
    endpoint: str
    ca_bundle: str  # base64 PEM, as EKS gives it
    service_cidr: str


@dataclass(frozen=True, slots=True)
class BootTaint:
    key: str
    effect: str
    value: str = ""

    def flag(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def family_of(*, alias: str | None, ami_family: str | None) -> str:
    """``al2023``, ``bottlerocket``, ``ubuntu`` or ``custom`` (no family: user data as written)."""
    if alias:
        return alias.partition("@")[0].lower()
    return (ami_family or "Custom").lower()


def kubelet_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels a kubelet may register itself with, minus those that differ per NodeClaim."""
    out = {}
    for key, value in sorted(labels.items()):
        if key.startswith(_PER_NODECLAIM):
            continue
        domain = key.split("/", 1)[0] if "/" in key else ""
        restricted = domain.endswith(("kubernetes.io", "k8s.io"))
        if restricted and not key.startswith(_KUBELET_MAY_SET):
            continue
        out[key] = value
    return out


def boot_taints(taints: Iterable[BootTaint]) -> list[BootTaint]:
    """``joiner.sh/unregistered`` first, then the given ones (no duplicates, none per NodeClaim)."""
    out = [BootTaint(TAINT_UNREGISTERED, TAINT_UNREGISTERED_EFFECT, "true")]
    seen = {(TAINT_UNREGISTERED, TAINT_UNREGISTERED_EFFECT)}
    for t in taints:
        if t.key.startswith(_PER_NODECLAIM) or (t.key, t.effect) in seen:
            continue
        seen.add((t.key, t.effect))
        out.append(t)
    return out


def _yaml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _node_config(
    cluster: ClusterInfo,
    labels: Mapping[str, str],
    taints: list[BootTaint],
    max_pods: int | None,
    instance_store: str | None = None,
) -> str:
    flags = []
    if labels:
        flags.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
    flags.append("--register-with-taints=" + ",".join(t.flag() for t in taints))
    lines = [
        "apiVersion: node.eks.aws/v1alpha1",
        "kind: NodeConfig",
        "spec:",
        "  cluster:",
        f"    name: {_yaml_str(cluster.name)}",
        f"    apiServerEndpoint: {_yaml_str(cluster.endpoint)}",
        f"    certificateAuthority: {_yaml_str(cluster.ca_bundle)}",
        f"    cidr: {_yaml_str(cluster.service_cidr)}",
        *(["  instance:", "    localStorage:", f"      strategy: {instance_store}"] if instance_store else []),
        "  kubelet:",
        *(["    config:", f"      maxPods: {int(max_pods)}"] if max_pods else []),
        "    flags:",
        *(f"      - {_yaml_str(f)}" for f in flags),
    ]
    return "\n".join(lines) + "\n"


def _mime_parts(user_data: str) -> list[tuple[str, str]]:
    """(content type, body) of the user's user data: its MIME parts, or itself as one part."""
    text = user_data.strip("\n")
    if not text:
        return []
    if text.startswith("MIME-Version"):
        header, _, rest = text.partition("\n\n")
        marker = next(
            (p.split("=", 1)[1].strip().strip('"') for p in header.replace(";", "\n").splitlines() if "boundary=" in p),
            None,
        )
        if marker is None:
            return [("text/x-shellscript", text)]
        parts = []
        for chunk in rest.split(f"--{marker}"):
            chunk = chunk.strip("\n")
            if not chunk or chunk == "--":
                continue
            head, _, body = chunk.partition("\n\n")
            ctype = next(
                (
                    line.split(":", 1)[1].split(";")[0].strip()
                    for line in head.splitlines()
                    if line.lower().startswith("content-type")
                ),
                "text/x-shellscript",
            )
            parts.append((ctype, body.rstrip("\n").removesuffix("--").rstrip("\n")))
        return parts
    if text.startswith(("apiVersion: node.eks.aws", "---\napiVersion: node.eks.aws")):
        return [("application/node.eks.aws", text)]
    return [("text/x-shellscript", text)]


def al2023_user_data(
    cluster: ClusterInfo,
    *,
    labels: Mapping[str, str],
    taints: Iterable[BootTaint],
    user_data: str | None,
    max_pods: int | None = None,
    instance_store: str | None = None,
) -> str:
    """A MIME multi-part document: the user's parts, then joiner's NodeConfig (nodeadm merges them
    in order, so joiner's cluster, maxPods, labels and taints apply over the user's). With
    ``instance_store="RAID0"`` nodeadm makes the local NVMe drives one array for the kubelet and
    containerd (``instance.localStorage.strategy``)."""
    config = _node_config(cluster, kubelet_labels(labels), boot_taints(taints), max_pods, instance_store)
    parts = [*_mime_parts(user_data or ""), ("application/node.eks.aws", config)]
    out = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', ""]
    for ctype, body in parts:
        out += [f"--{BOUNDARY}", f'Content-Type: {ctype}; charset="us-ascii"', "", body.rstrip("\n"), ""]
    out.append(f"--{BOUNDARY}--")
    return "\n".join(out) + "\n"


class UserDataError(ValueError):
    """The EC2NodeClass's userData cannot be merged with joiner's (Bottlerocket TOML that does not parse)."""


# the Bottlerocket settings joiner must decide: how the node reaches the cluster, and the pod count
# the solver packed against. The user's values for them are replaced; node-labels and node-taints
# are merged (joiner's keys win); every other setting is the user's.
BOTTLEROCKET_OWNED: Final = ("cluster-name", "api-server", "cluster-certificate", "max-pods")
RAID0_COMMAND: Final = "000-joiner-instance-store-raid0"
RAID0_DIRS: Final = ("/var/lib/containerd", "/var/lib/kubelet", "/var/log/pods")


def bottlerocket_user_data(
    cluster: ClusterInfo,
    *,
    labels: Mapping[str, str],
    taints: Iterable[BootTaint],
    user_data: str | None,
    max_pods: int | None = None,
    instance_store: str | None = None,
) -> str:
    """Bottlerocket settings TOML: the user's document parsed, joiner's ``settings.kubernetes`` merged
    in (see ``BOTTLEROCKET_OWNED``), written out again as one valid document. With
    ``instance_store="RAID0"`` a bootstrap command makes the local NVMe drives one array and binds
    the kubelet's, containerd's and the pod logs' directories onto it."""
    try:
        document: dict[str, Any] = tomllib.loads(user_data or "")
    except tomllib.TOMLDecodeError as err:
        raise UserDataError(f"spec.userData is not valid TOML for Bottlerocket: {err}") from None
    settings = document.setdefault("settings", {})
    k8s = settings.setdefault("kubernetes", {}) if isinstance(settings, dict) else None
    if not isinstance(k8s, dict):
        raise UserDataError("spec.userData: `settings` and `settings.kubernetes` must be tables")
    k8s["cluster-name"] = cluster.name
    k8s["api-server"] = cluster.endpoint
    k8s["cluster-certificate"] = cluster.ca_bundle
    if max_pods:
        k8s["max-pods"] = int(max_pods)
    node_labels = k8s.get("node-labels")
    k8s["node-labels"] = {**(node_labels if isinstance(node_labels, dict) else {}), **kubelet_labels(labels)}
    grouped: dict[str, list[str]] = {}
    for t in boot_taints(taints):
        grouped.setdefault(t.key, []).append(f"{t.value}:{t.effect}" if t.value else f":{t.effect}")
    node_taints = k8s.get("node-taints")
    k8s["node-taints"] = {**(node_taints if isinstance(node_taints, dict) else {}), **grouped}
    if instance_store == "RAID0":
        commands = settings.setdefault("bootstrap-commands", {})
        if not isinstance(commands, dict):
            raise UserDataError("spec.userData: `settings.bootstrap-commands` must be a table")
        commands[RAID0_COMMAND] = {
            "commands": [
                ["apiclient", "ephemeral-storage", "init"],
                ["apiclient", "ephemeral-storage", "bind", "--dirs", *RAID0_DIRS],
            ],
            "mode": "always",
            "essential": True,
        }
    return toml.dumps(document)


def user_data_for(
    family: str,
    cluster: ClusterInfo | None,
    *,
    labels: Mapping[str, str],
    taints: Iterable[BootTaint],
    user_data: str | None,
    max_pods: int | None = None,
    instance_store: str | None = None,
) -> str | None:
    """The instance's user data for ``family`` (None: none at all). ``max_pods``: what the kubelet
    is told (the instance type's ENI limit, the pods the solver packs against). UserDataError when
    the user's part cannot be merged."""
    if family not in FAMILIES_WITH_BOOTSTRAP or cluster is None:
        return user_data or None
    if family == "al2023":
        return al2023_user_data(
            cluster, labels=labels, taints=taints, user_data=user_data, max_pods=max_pods, instance_store=instance_store
        )
    return bottlerocket_user_data(
        cluster, labels=labels, taints=taints, user_data=user_data, max_pods=max_pods, instance_store=instance_store
    )
