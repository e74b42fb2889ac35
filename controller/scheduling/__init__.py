"""The pure solver: requirements, resources, taints, instance offerings, and ``solve``.

Nothing here does I/O, reads a clock, logs, or imports Kubernetes client types (an
import-linter contract enforces it). Inputs and outputs are this package's frozen dataclasses;
Kubernetes objects come in as plain JSON dicts through :mod:`controller.scheduling.kubeconv`.
"""

from controller.scheduling.frozen import FrozenLabels
from controller.scheduling.instancetypes import (
    CatalogError,
    InstanceType,
    Offering,
    catalog_to_dict,
    parse_catalog,
    parse_instance_type,
)
from controller.scheduling.model import (
    ExistingNode,
    Gang,
    HostPort,
    InstanceCandidate,
    InstanceChoice,
    NewNodeClaim,
    NodePoolTemplate,
    OfferingKey,
    Plan,
    Pod,
    PodAffinityTerm,
    PreferredTerm,
    TopologySpread,
)
from controller.scheduling.quantity import QuantityError, format_quantity, format_resource, parse_quantity
from controller.scheduling.requirements import Requirement, RequirementError, Requirements, label_selector
from controller.scheduling.resources import Resources
from controller.scheduling.solver import SolveCache, solve
from controller.scheduling.taints import Taint, Toleration, first_untolerated, tolerates

__all__ = [
    "CatalogError",
    "ExistingNode",
    "FrozenLabels",
    "Gang",
    "HostPort",
    "InstanceCandidate",
    "InstanceChoice",
    "InstanceType",
    "NewNodeClaim",
    "NodePoolTemplate",
    "Offering",
    "OfferingKey",
    "Plan",
    "Pod",
    "PodAffinityTerm",
    "PreferredTerm",
    "QuantityError",
    "Requirement",
    "RequirementError",
    "Requirements",
    "Resources",
    "SolveCache",
    "Taint",
    "Toleration",
    "TopologySpread",
    "catalog_to_dict",
    "first_untolerated",
    "format_quantity",
    "format_resource",
    "label_selector",
    "parse_catalog",
    "parse_instance_type",
    "parse_quantity",
    "solve",
    "tolerates",
]
