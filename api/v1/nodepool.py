"""NodePool: what joiner may buy, how, and when it may give it back."""

from __future__ import annotations

from typing import Annotated, Final, Literal, Self, get_args

from pydantic import ConfigDict, Field, WithJsonSchema, field_validator, model_validator
from pydantic_core import PydanticCustomError

from api.v1.capacity import NODES_LIMIT_RULE, BufferStatus, Capacity, check_nodes_limit
from api.v1.common import (
    MAX_LABELS,
    MAX_REQUIREMENTS,
    MAX_TAINTS,
    REQUIREMENTS_CONFLICT_RULES,
    TEMPLATE_LABELS_SCHEMA_EXTRA,
    UNIQUE_TAINTS_RULE,
    NodeClassReference,
    NodePoolRequirement,
    Taint,
    cel_rule,
    check_template_labels,
    duplicate_taint_messages,
    requirement_conflicts,
)
from api.v1.conditions import Condition
from api.v1.labels import API_VERSION
from api.v1.meta import ObjectMeta, SpecModel, StatusModel
from api.v1.types import (
    BudgetDuration,
    BudgetNodes,
    CronSchedule,
    NillableDuration,
    NillablePositiveDuration,
    PositiveDuration,
    Quantity,
)

DEFAULT_EXPIRE_AFTER: Final = "720h"
DEFAULT_CONSOLIDATE_AFTER: Final = "0s"
DEFAULT_BUDGET_NODES: Final = "10%"
MAX_BUDGETS: Final = 50

ConsolidationPolicy = Literal["WhenEmpty", "WhenEmptyOrUnderutilized"]
RebalancePolicy = Literal["Ignore", "Replace"]
DisruptionReason = Literal["Empty", "Underutilized", "Drifted", "Expired"]
DISRUPTION_REASONS: Final[tuple[str, ...]] = get_args(DisruptionReason)


class NodeClaimTemplateMetadata(SpecModel):
    """Labels and annotations copied onto every NodeClaim and Node of the pool."""

    omit_when_empty = frozenset({"labels", "annotations"})

    labels: Annotated[dict[str, str], WithJsonSchema({"type": "object", **TEMPLATE_LABELS_SCHEMA_EXTRA})] = Field(
        default_factory=dict
    )
    """Labels for the nodes (at most 100). They also act as ``In`` requirements. Keys owned by
    joiner or Kubernetes (``joiner.sh/nodepool``, ``kubernetes.io/hostname``, ...) are restricted."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Annotations for the nodes."""

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_LABELS:
            raise PydanticCustomError(
                "too_many_labels", "at most {max} labels, got {n}", {"max": MAX_LABELS, "n": len(value)}
            )
        check_template_labels(value)
        return value


class NodeClaimTemplateSpec(SpecModel):
    """The shape of the NodeClaims this pool creates."""

    omit_when_empty = frozenset({"requirements", "taints", "startup_taints"})

    node_class_ref: NodeClassReference
    """The node class (provider settings) for the nodes, e.g. ``{group: joiner.sh, kind:
    KWOKNodeClass, name: default}``."""
    requirements: list[NodePoolRequirement] = Field(
        default_factory=list,
        max_length=MAX_REQUIREMENTS,
        json_schema_extra={"x-kubernetes-validations": list(REQUIREMENTS_CONFLICT_RULES)},
    )
    """Constraints on the nodes' labels (instance type, zone, capacity type, GPU name, ...).
    Pods' own constraints are intersected with these. At most 100. Requirements on one key that
    no node could meet together (``In [a]`` with ``NotIn [a]``, ``Gt 8`` with ``Lt 2``) are refused."""
    taints: list[Taint] = Field(
        default_factory=list,
        max_length=MAX_TAINTS,
        json_schema_extra={"x-kubernetes-validations": [UNIQUE_TAINTS_RULE]},
    )
    """Taints every node of the pool carries; only pods that tolerate them land there. A key and
    effect may appear once."""
    startup_taints: list[Taint] = Field(
        default_factory=list,
        max_length=MAX_TAINTS,
        json_schema_extra={"x-kubernetes-validations": [UNIQUE_TAINTS_RULE]},
    )
    """Taints a node carries at first and that something else (e.g. a GPU operator) removes once
    the node is ready. Pods need not tolerate them to trigger provisioning. A key and effect may
    appear once."""
    expire_after: NillablePositiveDuration = DEFAULT_EXPIRE_AFTER
    """How long a node may live before joiner replaces it (e.g. ``720h``), or ``Never``. Not ``0s``."""
    termination_grace_period: PositiveDuration | None = None
    """How long draining a node may take before its pods are deleted regardless of PDBs and
    ``do-not-disrupt`` (longer than zero). Unset: wait indefinitely."""

    @field_validator("requirements")
    @classmethod
    def _requirements_can_be_met(cls, value: list[NodePoolRequirement]) -> list[NodePoolRequirement]:
        problems = requirement_conflicts(value)
        if problems:
            raise PydanticCustomError("requirements_conflict", "{problems}", {"problems": "; ".join(problems)})
        return value

    @field_validator("taints", "startup_taints")
    @classmethod
    def _taints_unique(cls, value: list[Taint]) -> list[Taint]:
        problems = duplicate_taint_messages(value)
        if problems:
            raise PydanticCustomError("duplicate_taints", "{problems}", {"problems": "; ".join(problems)})
        return value


class NodeClaimTemplate(SpecModel):
    """Template for the NodeClaims of a pool."""

    omit_when_empty = frozenset({"metadata"})

    metadata: NodeClaimTemplateMetadata = Field(default_factory=NodeClaimTemplateMetadata)
    """Labels and annotations for the nodes."""
    spec: NodeClaimTemplateSpec
    """The NodeClaim spec the pool's claims start from."""

    @model_validator(mode="after")
    def _labels_meet_requirements(self) -> Self:
        problems = requirement_conflicts(self.spec.requirements, self.metadata.labels) if self.metadata.labels else []
        if problems:
            raise PydanticCustomError(
                "template_labels", "labels act as In requirements: {problems}", {"problems": "; ".join(problems)}
            )
        return self


class Budget(SpecModel):
    """At most ``nodes`` nodes of the pool may be disrupted at once (while the budget is active)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "has(self.schedule) == has(self.duration)",
                    "budget: 'schedule' and 'duration' must be set together",
                )
            ]
        }
    )

    nodes: BudgetNodes = DEFAULT_BUDGET_NODES
    """Maximum nodes being disrupted at once: a count (``5``) or a percentage of the pool's nodes
    (``10%``, rounded up). ``0`` blocks disruption."""
    schedule: CronSchedule | None = None
    """Cron schedule (UTC) when the budget becomes active, e.g. ``0 9 * * 1-5``. Needs
    ``duration``. Unset: always active."""
    duration: BudgetDuration | None = None
    """How long the budget stays active after each ``schedule`` hit (hours and minutes, e.g.
    ``8h``). Needs ``schedule``."""
    reasons: list[DisruptionReason] | None = Field(default=None, max_length=len(DISRUPTION_REASONS))
    """Disruption reasons the budget applies to (``Empty``, ``Underutilized``, ``Drifted``,
    ``Expired``). Unset: all reasons."""

    @field_validator("reasons")
    @classmethod
    def _unique_reasons(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise PydanticCustomError("duplicate_reasons", "must not repeat a reason, got {value}", {"value": value})
        return value

    @model_validator(mode="after")
    def _schedule_with_duration(self) -> Self:
        if (self.schedule is None) != (self.duration is None):
            raise PydanticCustomError("budget_schedule", "budget: 'schedule' and 'duration' must be set together")
        return self


def _default_budgets() -> list[Budget]:
    return [Budget(nodes=DEFAULT_BUDGET_NODES)]


class Disruption(SpecModel):
    """When and how fast joiner may remove the pool's nodes."""

    consolidation_policy: ConsolidationPolicy = "WhenEmptyOrUnderutilized"
    """Which nodes consolidation may remove: ``WhenEmpty`` (only nodes with no workload pods) or
    ``WhenEmptyOrUnderutilized`` (also nodes whose pods fit elsewhere or on a cheaper node)."""
    consolidate_after: NillableDuration = DEFAULT_CONSOLIDATE_AFTER
    """How long after the last pod scheduled on or left a node it becomes a consolidation
    candidate (e.g. ``30s``, ``10m``), or ``Never`` to disable consolidation."""
    rebalance_recommendation: RebalancePolicy | None = None
    """What an EC2 rebalance recommendation (AWS sees an elevated risk of interrupting the spot
    instance) does to the pool's nodes: ``Ignore`` (also when unset) records it on the NodeClaim (annotation
    ``joiner.sh/rebalance-recommended``, Event, metric) and nothing more; ``Replace`` also makes the
    node drifted, so disruption replaces it -- the new node first -- under the pool's budgets."""
    budgets: list[Budget] = Field(
        default_factory=_default_budgets,
        max_length=MAX_BUDGETS,
        json_schema_extra={"default": [{"nodes": DEFAULT_BUDGET_NODES}]},
    )
    """Limits on how many nodes may be disrupted at once. When several are active the most
    restrictive wins. Default: one budget of ``10%``."""


class GangDefaults(SpecModel):
    """How gangs (pods that must start together) are provisioned from this pool, unless the pods'
    annotations say otherwise."""

    timeout: PositiveDuration | None = None
    """How long every NodeClaim of a gang attempt may take to be Initialized before the attempt is
    rolled back (all of its NodeClaims deleted) and retried, e.g. ``20m``. Unset: the operator's
    default (15m). The pods' annotation ``joiner.sh/gang-timeout`` overrides it."""
    same_zone: bool = True
    """Put all nodes of a gang in one zone. ``false`` lets a gang that fits in no single zone spread
    over zones. The pods' annotation ``joiner.sh/gang-same-zone`` overrides it."""


class NodePoolSpec(SpecModel):
    """What the pool may launch and how its nodes are retired."""

    omit_when_empty = frozenset({"limits"})

    template: NodeClaimTemplate
    """The NodeClaims the pool creates."""
    disruption: Disruption = Field(default_factory=Disruption, json_schema_extra={"default": {}})
    """Consolidation policy, consolidation delay and disruption budgets."""
    limits: dict[str, Quantity] = Field(
        default_factory=dict, json_schema_extra={"x-kubernetes-validations": [NODES_LIMIT_RULE]}
    )
    """Upper bounds on the total resources of the pool's nodes (``cpu``, ``memory``,
    ``nvidia.com/gpu``, ...), and ``nodes``: the most nodes the pool may have. joiner launches
    nothing that would exceed them."""
    weight: int | None = Field(default=None, ge=1, le=100)
    """Priority among pools: higher weight is tried first (1..100). Unset: lowest."""
    gang: GangDefaults | None = None
    """Defaults for gangs provisioned from this pool: attempt timeout and same-zone placement."""
    capacity: Capacity | None = None
    """Capacity kept ahead of demand (warm buffer, schedules, forecast), the $/hour budget and the
    tier mix of spot, on-demand and reserved."""

    @field_validator("limits")
    @classmethod
    def _nodes_limit(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        check_nodes_limit(value)
        return value


class NodePoolStatus(StatusModel):
    """What the pool currently has."""

    resources: dict[str, Quantity] = Field(default_factory=dict)
    """Total capacity of the pool's nodes, per resource."""
    nodes: int = Field(default=0, ge=0)
    """Number of NodeClaims of the pool."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """``Ready``, ``ValidationSucceeded``, ``NodeClassReady``, ``LimitsReached``, ``BufferLimited``."""
    buffer: BufferStatus | None = None
    """The warm buffer: wanted now and ready (see ``spec.capacity``)."""
    reason: str | None = None
    """Ready, or why not in one word: ``Invalid``, ``NodeClassNotFound`` (the conditions
    ``ValidationSucceeded``, ``NodeClassReady``), ``LimitsReached`` (a limit, ``limits.nodes`` or
    the $/hour budget is used up). The ``Status`` column of ``kubectl get nodepools``."""
    price_per_hour: str | None = None
    """What the pool's NodeClaims cost, in $/hour (the launched offerings' prices, else the planned
    ones), e.g. ``"12.34"``."""
    most_used_limit: str | None = None
    """The limit closest to used up, as a percentage and its name, e.g. ``"75% nvidia.com/gpu"``
    (``nodes`` for ``limits.nodes``, ``budget`` for the $/hour budget); unset without limits."""


class NodePool(SpecModel):
    """A NodePool: the constraints and policies joiner provisions and disrupts nodes under."""

    api_version: Annotated[Literal["joiner.sh/v1"], WithJsonSchema({"type": "string"})] = API_VERSION
    """``joiner.sh/v1``."""
    kind: Annotated[Literal["NodePool"], WithJsonSchema({"type": "string"})] = "NodePool"
    """``NodePool``."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: NodePoolSpec
    """Desired behaviour of the pool."""
    status: NodePoolStatus | None = None
    """Observed state of the pool, written by joiner."""

    @property
    def name(self) -> str:
        """``metadata.name`` (empty if unset)."""
        return self.metadata.name or ""
