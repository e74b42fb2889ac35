"""User data that joins an instance to the cluster: what the kubelet is started with. Pure.

For the ``AL2023`` family (an ``al2023@...`` alias or ``amiFamily: AL2023``) joiner writes a nodeadm
``NodeConfig`` (MIME part ``application/node.eks.aws``) with the cluster's name, API endpoint,
certificate authority and service CIDR, and kubelet flags: ``--node-labels`` (the NodePool's labels)
and ``--register-with-taints`` (``joiner.sh/unregistered``, the NodePool's taints and startup
taints). For ``Bottlerocket`` it writes the ``[settings.kubernetes]`` TOML with the same. The
``userData`` of the EC2NodeClass is kept: on AL2023 as MIME parts before joiner's (nodeadm merges
every ``NodeConfig``; shell scripts run as usual), on Bottlerocket as TOML before joiner's tables.
``Ubuntu``, ``Custom`` and images selected without a family get ``userData`` exactly as written.

Only what is the same for every node of the NodePool goes into the user data -- the launch template
is shared by them. A gang's label and taint (``joiner.sh/gang``) are put on the Node at registration,
while it still has the ``joiner.sh/unregistered`` taint. Labels the kubelet may not set on itself
(``kubernetes.io`` and ``k8s.io`` domains, except ``node.kubernetes.io`` and
``kubelet.kubernetes.io``) are left to registration too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from api.v1.labels import TAINT_UNREGISTERED, TAINT_UNREGISTERED_EFFECT

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


def _node_config(cluster: ClusterInfo, labels: Mapping[str, str], taints: list[BootTaint]) -> str:
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
        "  kubelet:",
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
    cluster: ClusterInfo, *, labels: Mapping[str, str], taints: Iterable[BootTaint], user_data: str | None
) -> str:
    """A MIME multi-part document: the user's parts, then joiner's NodeConfig."""
    parts = [
        *_mime_parts(user_data or ""),
        ("application/node.eks.aws", _node_config(cluster, kubelet_labels(labels), boot_taints(taints))),
    ]
    out = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', ""]
    for ctype, body in parts:
        out += [f"--{BOUNDARY}", f'Content-Type: {ctype}; charset="us-ascii"', "", body.rstrip("\n"), ""]
    out.append(f"--{BOUNDARY}--")
    return "\n".join(out) + "\n"


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def bottlerocket_user_data(
    cluster: ClusterInfo, *, labels: Mapping[str, str], taints: Iterable[BootTaint], user_data: str | None
) -> str:
    """Bottlerocket settings TOML: the user's settings, then joiner's ``settings.kubernetes`` tables."""
    lines = [(user_data or "").rstrip("\n")] if (user_data or "").strip() else []
    lines += [
        "[settings.kubernetes]",
        f"cluster-name = {_toml_str(cluster.name)}",
        f"api-server = {_toml_str(cluster.endpoint)}",
        f"cluster-certificate = {_toml_str(cluster.ca_bundle)}",
        "",
        "[settings.kubernetes.node-labels]",
        *(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in kubelet_labels(labels).items()),
        "",
        "[settings.kubernetes.node-taints]",
    ]
    grouped: dict[str, list[str]] = {}
    for t in boot_taints(taints):
        grouped.setdefault(t.key, []).append(f"{t.value}:{t.effect}" if t.value else f":{t.effect}")
    lines += [f"{_toml_str(k)} = [{', '.join(_toml_str(v) for v in vs)}]" for k, vs in grouped.items()]
    return "\n".join(lines) + "\n"


def user_data_for(
    family: str,
    cluster: ClusterInfo | None,
    *,
    labels: Mapping[str, str],
    taints: Iterable[BootTaint],
    user_data: str | None,
) -> str | None:
    """The instance's user data for ``family`` (None: none at all)."""
    if family not in FAMILIES_WITH_BOOTSTRAP or cluster is None:
        return user_data or None
    if family == "al2023":
        return al2023_user_data(cluster, labels=labels, taints=taints, user_data=user_data)
    return bottlerocket_user_data(cluster, labels=labels, taints=taints, user_data=user_data)
