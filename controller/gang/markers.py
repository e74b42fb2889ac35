"""How a pod says it belongs to a gang, and the names joiner writes on gang pods and NodeClaims.

Pure: no I/O. A gang is recognised from the markers users already write:

* joiner's own label ``joiner.sh/gang: <name>`` with the annotation ``joiner.sh/gang-size: <n>``;
* the coscheduling plugin's label ``scheduling.x-k8s.io/pod-group: <PodGroup>`` (size: the
  PodGroup's ``spec.minMember`` when that CRD is installed, else ``joiner.sh/gang-size``);
* Volcano's annotations ``scheduling.k8s.io/group-name`` / ``volcano.sh/group-name`` (likewise).

joiner only acts on gang pods that also carry the scheduling gate ``joiner.sh/gang``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from api.v1.labels import ANNOTATION_GANG_SIZE, LABEL_GANG, SCHEDULING_GATE_GANG
from api.v1.types import parse_duration

if TYPE_CHECKING:
    from controller.state.views import PodView

GangSource = Literal["joiner", "coscheduling", "volcano"]

LABEL_POD_GROUP: Final = "scheduling.x-k8s.io/pod-group"
"""The coscheduling (scheduler-plugins) label naming a pod's PodGroup."""
ANNOTATION_VOLCANO_GROUP: Final = "scheduling.k8s.io/group-name"
ANNOTATION_VOLCANO_GROUP_ALT: Final = "volcano.sh/group-name"

ANNOTATION_GANG_SAME_ZONE: Final = "joiner.sh/gang-same-zone"
"""On a gang pod: ``"true"``/``"false"`` overrides the NodePool's ``spec.gang.sameZone``."""
ANNOTATION_GANG_TIMEOUT: Final = "joiner.sh/gang-timeout"
"""On a gang pod: a duration (``20m``) overriding the NodePool's ``spec.gang.timeout``."""
ANNOTATION_GANG_MEMBER_LOSS: Final = "joiner.sh/gang-member-loss-policy"
"""On a gang pod: what happens when an admitted member's node is lost (:data:`MEMBER_LOSS_POLICIES`)."""
POLICY_RESTART_GANG: Final = "restart-gang"
POLICY_REPLACE_MEMBER: Final = "replace-member"
MEMBER_LOSS_POLICIES: Final = (POLICY_RESTART_GANG, POLICY_REPLACE_MEMBER)

ANNOTATION_GANG_STATE: Final = "joiner.sh/gang-state"
"""On a gang pod, written by joiner: the gang's durable provisioning record (JSON, see ``record``)."""
ANNOTATION_GANG_ATTEMPT: Final = "joiner.sh/gang-attempt"
"""On a gang NodeClaim, written by joiner: the id of the provisioning attempt that created it."""
ANNOTATION_GANG_OFFERING: Final = "joiner.sh/gang-offering"
"""On a gang NodeClaim, written by joiner: the offering planned for it (``type/zone/capacity-type``)."""
ANNOTATION_GANG_NAME: Final = "joiner.sh/gang-name"
"""On a gang NodeClaim, written by joiner: the gang as ``namespace/name``."""

TAINT_GANG: Final = LABEL_GANG
"""Taint key on a gang's nodes (value: the gang id); only that gang's pods tolerate it."""
POD_CONDITION_GANG: Final = "GangAdmitted"
"""Pod condition joiner sets on gang members: True once admitted, False with the reason before."""

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
MAX_LABEL_VALUE: Final = 63


@dataclass(frozen=True, slots=True)
class GangMarker:
    """The gang a pod names, and which convention named it."""

    namespace: str
    name: str
    source: GangSource

    @property
    def key(self) -> str:
        """``namespace/name``: how logs, Events and the work queue refer to the gang."""
        return f"{self.namespace}/{self.name}"

    @property
    def id(self) -> str:
        """A label value for the gang: on its NodeClaims, Nodes, taint and the pods' node selector."""
        return gang_id(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class GangOptions:
    """What the members' annotations say (None: not set, so NodePool or operator defaults apply)."""

    size: int | None = None
    same_zone: bool | None = None
    timeout_seconds: float | None = None
    member_loss_policy: str = POLICY_RESTART_GANG
    problems: tuple[str, ...] = ()


def gang_id(namespace: str, name: str) -> str:
    """``namespace.name`` when that is a valid label value, else a shortened form with a hash."""
    raw = f"{namespace}.{name}"
    if len(raw) <= MAX_LABEL_VALUE and _LABEL_VALUE.match(raw):
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", raw)[: MAX_LABEL_VALUE - len(digest) - 1].strip("-_.")
    return f"{cleaned}-{digest}" if cleaned else f"gang-{digest}"


def gang_marker(pod: PodView) -> GangMarker | None:
    """The gang a pod belongs to, or None. The same precedence as the solver's ``kubeconv.gang_of``."""
    namespace, labels, annotations = pod.namespace, pod.labels, pod.annotations
    if labels.get(LABEL_GANG):
        return GangMarker(namespace, str(labels[LABEL_GANG]), "joiner")
    if labels.get(LABEL_POD_GROUP):
        return GangMarker(namespace, str(labels[LABEL_POD_GROUP]), "coscheduling")
    for key in (ANNOTATION_VOLCANO_GROUP, ANNOTATION_VOLCANO_GROUP_ALT):
        if annotations.get(key):
            return GangMarker(namespace, str(annotations[key]), "volcano")
    return None


def has_gate(pod: PodView) -> bool:
    """Whether the pod still carries joiner's scheduling gate."""
    return SCHEDULING_GATE_GANG in pod.scheduling_gates


def gate_index(pod: PodView) -> int | None:
    """Where joiner's gate is in the pod's list of scheduling gates (for a JSON patch), or None."""
    for i, gate in enumerate(pod.scheduling_gates):
        if gate == SCHEDULING_GATE_GANG:
            return i
    return None


def is_active(pod: PodView) -> bool:
    """Not finished and not being deleted: the pod still needs (or holds) its node."""
    return not pod.deleting and not pod.is_terminal


def _bool(value: str) -> bool | None:
    lowered = value.strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    return None


def gang_options(pods: Iterable[PodView]) -> GangOptions:
    """Read the gang annotations from the members (the first member, by name, that sets each wins).

    Malformed values are reported in ``problems`` (in words the user can act on) and ignored.
    """
    size: int | None = None
    same_zone: bool | None = None
    timeout: float | None = None
    policy: str | None = None
    problems: list[str] = []
    for pod in sorted(pods, key=lambda p: p.name):
        name = pod.name
        ann = pod.annotations
        raw = ann.get(ANNOTATION_GANG_SIZE)
        if size is None and raw is not None:
            try:
                size = int(str(raw).strip())
                if size < 1:
                    raise ValueError
            except ValueError:
                size = None
                problems.append(f"pod {name}: {ANNOTATION_GANG_SIZE}={raw!r} is not a positive whole number")
        raw = ann.get(ANNOTATION_GANG_SAME_ZONE)
        if same_zone is None and raw is not None:
            same_zone = _bool(str(raw))
            if same_zone is None:
                problems.append(f"pod {name}: {ANNOTATION_GANG_SAME_ZONE}={raw!r} must be true or false")
        raw = ann.get(ANNOTATION_GANG_TIMEOUT)
        if timeout is None and raw is not None:
            try:
                parsed = parse_duration(str(raw))
                if parsed is None or parsed.total_seconds() <= 0:
                    raise ValueError("must be positive")
                timeout = parsed.total_seconds()
            except ValueError:
                problems.append(f"pod {name}: {ANNOTATION_GANG_TIMEOUT}={raw!r} is not a duration such as 20m")
        raw = ann.get(ANNOTATION_GANG_MEMBER_LOSS)
        if policy is None and raw is not None:
            if raw in MEMBER_LOSS_POLICIES:
                policy = str(raw)
            else:
                problems.append(
                    f"pod {name}: {ANNOTATION_GANG_MEMBER_LOSS}={raw!r} must be one of "
                    + ", ".join(MEMBER_LOSS_POLICIES)
                )
    return GangOptions(
        size=size,
        same_zone=same_zone,
        timeout_seconds=timeout,
        member_loss_policy=policy or POLICY_RESTART_GANG,
        problems=tuple(problems),
    )
