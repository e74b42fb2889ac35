"""The joiner.sh/v1 API: NodePool, NodeClaim, KWOKNodeClass and EC2NodeClass as pydantic v2 models.

These models are the single source of truth for the CRDs (``python -m api.crdgen``). Nothing in
this package does I/O or reads a clock.

The names below are imported on first use (PEP 562 ``__getattr__``): a process that needs only
some of the models (``joiner plan`` validates NodePools) builds only those.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

from api.v1 import conditions, labels

if TYPE_CHECKING:
    from api.v1.common import (
        NODECLAIM_KEY_RULES,
        NODEPOOL_KEY_RULES,
        NodeClaimRequirement,
        NodeClassReference,
        NodePoolRequirement,
        RequirementBase,
        RequirementOperator,
        Taint,
        TaintEffect,
        restricted_key_messages,
    )
    from api.v1.conditions import (
        Condition,
        ConditionStatus,
        HasConditions,
        find_condition,
        get_condition,
        is_condition_true,
        remove_condition,
        set_condition,
        with_condition,
        without_condition,
    )
    from api.v1.ec2nodeclass import (
        AMISelectorTerm,
        BlockDeviceMapping,
        CapacityReservationSelectorTerm,
        EC2NodeClass,
        EC2NodeClassSpec,
        EC2NodeClassStatus,
        MetadataOptions,
        SecurityGroupSelectorTerm,
        SubnetSelectorTerm,
    )
    from api.v1.kwoknodeclass import (
        CATALOG_CONFIGMAP_KEY,
        FailureInjection,
        KWOKNodeClass,
        KWOKNodeClassSpec,
        KWOKNodeClassStatus,
        OfferingSelector,
    )
    from api.v1.labels import API_VERSION, GROUP, VERSION
    from api.v1.meta import ObjectMeta, OwnerReference, SpecModel, StatusModel
    from api.v1.nodeclaim import NodeClaim, NodeClaimSpec, NodeClaimStatus, ResourceRequirements
    from api.v1.nodepool import (
        DISRUPTION_REASONS,
        Budget,
        ConsolidationPolicy,
        Disruption,
        DisruptionReason,
        NodeClaimTemplate,
        NodeClaimTemplateMetadata,
        NodeClaimTemplateSpec,
        NodePool,
        NodePoolSpec,
        NodePoolStatus,
    )
    from api.v1.types import (
        NEVER,
        BudgetDuration,
        BudgetNodes,
        CronSchedule,
        Duration,
        LabelValue,
        NillableDuration,
        QualifiedName,
        Quantity,
        format_duration,
        parse_duration,
        parse_quantity,
    )
    from api.v1.validation import (
        KINDS,
        FieldError,
        InvalidObjectError,
        JoinerObject,
        field_errors,
        field_path,
        format_validation_error,
        parse_object,
        to_manifest,
        validate,
    )

_MODULES: Final[dict[str, tuple[str, ...]]] = {
    "api.v1.common": (
        "NODECLAIM_KEY_RULES",
        "NODEPOOL_KEY_RULES",
        "NodeClaimRequirement",
        "NodeClassReference",
        "NodePoolRequirement",
        "RequirementBase",
        "RequirementOperator",
        "Taint",
        "TaintEffect",
        "restricted_key_messages",
    ),
    "api.v1.conditions": (
        "Condition",
        "ConditionStatus",
        "HasConditions",
        "find_condition",
        "get_condition",
        "is_condition_true",
        "remove_condition",
        "set_condition",
        "with_condition",
        "without_condition",
    ),
    "api.v1.ec2nodeclass": (
        "AMISelectorTerm",
        "BlockDeviceMapping",
        "CapacityReservationSelectorTerm",
        "EC2NodeClass",
        "EC2NodeClassSpec",
        "EC2NodeClassStatus",
        "MetadataOptions",
        "SecurityGroupSelectorTerm",
        "SubnetSelectorTerm",
    ),
    "api.v1.kwoknodeclass": (
        "CATALOG_CONFIGMAP_KEY",
        "FailureInjection",
        "KWOKNodeClass",
        "KWOKNodeClassSpec",
        "KWOKNodeClassStatus",
        "OfferingSelector",
    ),
    "api.v1.labels": (
        "API_VERSION",
        "GROUP",
        "VERSION",
    ),
    "api.v1.meta": (
        "ObjectMeta",
        "OwnerReference",
        "SpecModel",
        "StatusModel",
    ),
    "api.v1.nodeclaim": (
        "NodeClaim",
        "NodeClaimSpec",
        "NodeClaimStatus",
        "ResourceRequirements",
    ),
    "api.v1.nodepool": (
        "DISRUPTION_REASONS",
        "Budget",
        "ConsolidationPolicy",
        "Disruption",
        "DisruptionReason",
        "NodeClaimTemplate",
        "NodeClaimTemplateMetadata",
        "NodeClaimTemplateSpec",
        "NodePool",
        "NodePoolSpec",
        "NodePoolStatus",
    ),
    "api.v1.types": (
        "NEVER",
        "BudgetDuration",
        "BudgetNodes",
        "CronSchedule",
        "Duration",
        "LabelValue",
        "NillableDuration",
        "QualifiedName",
        "Quantity",
        "format_duration",
        "parse_duration",
        "parse_quantity",
    ),
    "api.v1.validation": (
        "KINDS",
        "FieldError",
        "InvalidObjectError",
        "JoinerObject",
        "field_errors",
        "field_path",
        "format_validation_error",
        "parse_object",
        "to_manifest",
        "validate",
    ),
}
_WHERE: Final = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'api.v1' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "API_VERSION",
    "CATALOG_CONFIGMAP_KEY",
    "DISRUPTION_REASONS",
    "GROUP",
    "KINDS",
    "NEVER",
    "NODECLAIM_KEY_RULES",
    "NODEPOOL_KEY_RULES",
    "VERSION",
    "AMISelectorTerm",
    "BlockDeviceMapping",
    "Budget",
    "BudgetDuration",
    "BudgetNodes",
    "CapacityReservationSelectorTerm",
    "Condition",
    "ConditionStatus",
    "ConsolidationPolicy",
    "CronSchedule",
    "Disruption",
    "DisruptionReason",
    "Duration",
    "EC2NodeClass",
    "EC2NodeClassSpec",
    "EC2NodeClassStatus",
    "FailureInjection",
    "FieldError",
    "HasConditions",
    "InvalidObjectError",
    "JoinerObject",
    "KWOKNodeClass",
    "KWOKNodeClassSpec",
    "KWOKNodeClassStatus",
    "LabelValue",
    "MetadataOptions",
    "NillableDuration",
    "NodeClaim",
    "NodeClaimRequirement",
    "NodeClaimSpec",
    "NodeClaimStatus",
    "NodeClaimTemplate",
    "NodeClaimTemplateMetadata",
    "NodeClaimTemplateSpec",
    "NodeClassReference",
    "NodePool",
    "NodePoolRequirement",
    "NodePoolSpec",
    "NodePoolStatus",
    "ObjectMeta",
    "OfferingSelector",
    "OwnerReference",
    "QualifiedName",
    "Quantity",
    "RequirementBase",
    "RequirementOperator",
    "ResourceRequirements",
    "SecurityGroupSelectorTerm",
    "SpecModel",
    "StatusModel",
    "SubnetSelectorTerm",
    "Taint",
    "TaintEffect",
    "conditions",
    "field_errors",
    "field_path",
    "find_condition",
    "format_duration",
    "format_validation_error",
    "get_condition",
    "is_condition_true",
    "labels",
    "parse_duration",
    "parse_object",
    "parse_quantity",
    "remove_condition",
    "restricted_key_messages",
    "set_condition",
    "to_manifest",
    "validate",
    "with_condition",
    "without_condition",
]
