"""Status conditions: the ``metav1.Condition`` shape, the condition types joiner uses, and
pure helpers to read and set them.

The helpers never read a clock: the caller passes ``now`` (from its injected clock).
``lastTransitionTime`` changes only when a condition's status changes, as Kubernetes expects.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Final, Literal, Protocol

from pydantic import AfterValidator, Field, WithJsonSchema

from api.v1.meta import StatusModel
from api.v1.types import (
    QUALIFIED_NAME_MAX_LENGTH,
    QUALIFIED_NAME_PATTERN,
    ConditionReason,
    check_qualified_name,
)

# --- condition types --------------------------------------------------------------------------

READY: Final = "Ready"
"""Every kind: the object is usable. On a NodeClaim: its Node is Ready and Initialized."""

# NodePool
VALIDATION_SUCCEEDED: Final = "ValidationSucceeded"
"""NodePool: the spec passed the controller's validation (the same rules as the CRD)."""
NODE_CLASS_READY: Final = "NodeClassReady"
"""NodePool: the referenced node class exists and is Ready."""

# NodeClaim
LAUNCHED: Final = "Launched"
"""NodeClaim: the cloud provider created the instance."""
REGISTERED: Final = "Registered"
"""NodeClaim: a Node carrying the NodeClaim's providerID joined the cluster."""
INITIALIZED: Final = "Initialized"
"""NodeClaim: the Node is Ready, startup taints are gone, and extended resources (GPUs) show."""
CONSOLIDATABLE: Final = "Consolidatable"
"""NodeClaim: no pod event for consolidateAfter; a consolidation candidate."""
DRIFTED: Final = "Drifted"
"""NodeClaim: it no longer matches its NodePool or node class and will be replaced."""
DRAINED: Final = "Drained"
"""NodeClaim: every evictable pod has left the Node during termination."""
GANG_ADMITTED: Final = "GangAdmitted"
"""NodeClaim: every NodeClaim of its gang is Initialized and the gang's pods were released."""
GPU_IDLE: Final = "GPUIdle"
"""NodeClaim: every GPU of its Node stayed below the idle threshold for the idle window (needs
``--prometheus-url``); consolidation may then remove pods that opted in with
``joiner.sh/idle-gpu-reclaim``."""

NODEPOOL_CONDITION_TYPES: Final = (READY, VALIDATION_SUCCEEDED, NODE_CLASS_READY)
NODECLAIM_CONDITION_TYPES: Final = (
    LAUNCHED,
    REGISTERED,
    INITIALIZED,
    READY,
    CONSOLIDATABLE,
    DRIFTED,
    DRAINED,
    GANG_ADMITTED,
    GPU_IDLE,
)
NODECLASS_CONDITION_TYPES: Final = (READY,)

ConditionStatus = Literal["True", "False", "Unknown"]
TRUE: Final = "True"
FALSE: Final = "False"
UNKNOWN: Final = "Unknown"

ConditionType = Annotated[
    str,
    AfterValidator(check_qualified_name),
    WithJsonSchema({"type": "string", "pattern": QUALIFIED_NAME_PATTERN, "maxLength": QUALIFIED_NAME_MAX_LENGTH}),
]


class Condition(StatusModel):
    """One aspect of an object's current state (the standard ``metav1.Condition`` shape)."""

    type: ConditionType
    """Condition type in CamelCase, e.g. ``Ready``."""
    status: ConditionStatus
    """``True``, ``False`` or ``Unknown``."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The ``metadata.generation`` the condition was computed from."""
    last_transition_time: datetime
    """When the status last changed."""
    reason: ConditionReason
    """Machine-readable CamelCase reason for the last transition."""
    message: str = Field(default="", max_length=32768)
    """Human-readable details, in words the user can act on."""


class HasConditions(Protocol):
    """Anything with a ``conditions`` list: the status models of every kind."""

    conditions: list[Condition]


def find_condition(conditions: Sequence[Condition], type: str) -> Condition | None:
    """The condition of this type, or ``None``."""
    for condition in conditions:
        if condition.type == type:
            return condition
    return None


def with_condition(
    conditions: Sequence[Condition],
    *,
    type: str,
    status: ConditionStatus | bool,
    reason: str,
    now: datetime,
    message: str = "",
    observed_generation: int | None = None,
) -> list[Condition]:
    """A copy of ``conditions`` with the condition of this type set (added or replaced).

    ``lastTransitionTime`` is ``now`` when the condition is new or its status changes, and is
    kept otherwise. The order of existing conditions is preserved; new ones are appended.
    """
    status_text: ConditionStatus = ("True" if status else "False") if isinstance(status, bool) else status
    previous = find_condition(conditions, type)
    transition = now if previous is None or previous.status != status_text else previous.last_transition_time
    updated = Condition(
        type=type,
        status=status_text,
        reason=reason,
        message=message,
        last_transition_time=transition,
        observed_generation=observed_generation,
    )
    if previous is None:
        return [*conditions, updated]
    return [updated if condition.type == type else condition for condition in conditions]


def without_condition(conditions: Sequence[Condition], type: str) -> list[Condition]:
    """A copy of ``conditions`` without the condition of this type."""
    return [condition for condition in conditions if condition.type != type]


def get_condition(status: HasConditions | None, type: str) -> Condition | None:
    """The condition of this type on a status (``None`` status means no conditions)."""
    return None if status is None else find_condition(status.conditions, type)


def is_condition_true(status: HasConditions | None, type: str) -> bool:
    """Whether the status has the condition and it is ``True``."""
    condition = get_condition(status, type)
    return condition is not None and condition.status == TRUE


def set_condition(
    status: HasConditions,
    *,
    type: str,
    value: ConditionStatus | bool,
    reason: str,
    now: datetime,
    message: str = "",
    observed_generation: int | None = None,
) -> bool:
    """Set a condition on ``status`` in place; return whether anything changed.

    Use the return value to skip a status write when nothing changed.
    """
    updated = with_condition(
        status.conditions,
        type=type,
        status=value,
        reason=reason,
        now=now,
        message=message,
        observed_generation=observed_generation,
    )
    if updated == status.conditions:
        return False
    status.conditions = updated
    return True


def remove_condition(status: HasConditions, type: str) -> bool:
    """Remove a condition from ``status`` in place; return whether it was there."""
    remaining = without_condition(status.conditions, type)
    if len(remaining) == len(status.conditions):
        return False
    status.conditions = remaining
    return True
