"""Parts shared by NodePools and NodeClaims: requirements, taints, node class references, and
the rules that keep users away from label keys joiner or Kubernetes own.

Every rule is written once as data (a CEL expression for the CRD, a Python predicate for the
models, and one message), so the apiserver and the controller reject the same input with the
same words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Final, Literal, Self

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from api.v1 import labels as wk
from api.v1.meta import SpecModel
from api.v1.types import (
    INTEGER_PATTERN,
    LABEL_VALUE_MAX_LENGTH,
    LABEL_VALUE_PATTERN,
    QUALIFIED_NAME_MAX_LENGTH,
    QUALIFIED_NAME_PATTERN,
    LabelValue,
    QualifiedName,
    check_qualified_name,
    is_integer_string,
)

MAX_REQUIREMENTS: Final = 100
MAX_LABELS: Final = 100
MAX_TAINTS: Final = 100
MIN_VALUES_MAX: Final = 50


def cel_rule(rule: str, message: str, *, field_path: str | None = None) -> dict[str, Any]:
    """One ``x-kubernetes-validations`` entry."""
    out: dict[str, Any] = {"rule": rule, "message": message}
    if field_path is not None:
        out["fieldPath"] = field_path
    return out


def _cel_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


# --- label key restrictions -------------------------------------------------------------------


@dataclass(frozen=True)
class KeyRule:
    """A restriction on label keys: ``cel`` is an expression over the identifier ``KEY``."""

    cel: str
    message: str
    allows: Callable[[str], bool]

    def cel_for(self, subject: str) -> str:
        return self.cel.replace("KEY", subject)


def _domain_re(domain: str) -> str:
    # The key's prefix is `domain` or a subdomain of it. RE2 and Python agree on this syntax;
    # `[.]` avoids backslashes, which would need escaping in CEL string literals.
    return "^([^/]*[.])?" + domain.replace(".", "[.]") + "/"


def _in_domain(key: str, domain: str) -> bool:
    return re.match(_domain_re(domain), key) is not None


_JOINER_SET_LABELS: Final = (wk.LABEL_NODEPOOL, wk.LABEL_GANG)
_JOINER_DOMAIN_ALLOWED: Final = (*wk.USER_SELECTABLE_JOINER_LABELS, *_JOINER_SET_LABELS)

_HOSTNAME_RULE: Final = KeyRule(
    cel=f"KEY != '{wk.LABEL_HOSTNAME}'",
    message=f'"{wk.LABEL_HOSTNAME}" is restricted: it differs on every node',
    allows=lambda key: key != wk.LABEL_HOSTNAME,
)
_JOINER_SET_RULE: Final = KeyRule(
    cel=f"!(KEY in {_cel_list(_JOINER_SET_LABELS)})",
    message=f'"{wk.LABEL_NODEPOOL}" and "{wk.LABEL_GANG}" are restricted: joiner sets them',
    allows=lambda key: key not in _JOINER_SET_LABELS,
)
_JOINER_DOMAIN_RULE: Final = KeyRule(
    cel=f"KEY in {_cel_list(_JOINER_DOMAIN_ALLOWED)} || !KEY.matches('{_domain_re(wk.GROUP)}')",
    message='label domain "joiner.sh" is restricted: only '
    + ", ".join(wk.USER_SELECTABLE_JOINER_LABELS)
    + " may be used",
    allows=lambda key: key in _JOINER_DOMAIN_ALLOWED or not _in_domain(key, wk.GROUP),
)
_KUBERNETES_DOMAIN_RULE: Final = KeyRule(
    cel=(
        f"KEY in {_cel_list(wk.ALLOWED_KUBERNETES_LABELS)}"
        f" || KEY.matches('{_domain_re('node.kubernetes.io')}')"
        f" || KEY.matches('{_domain_re('node-restriction.kubernetes.io')}')"
        f" || !KEY.matches('{_domain_re('kubernetes.io')}')"
    ),
    message='label domain "kubernetes.io" is restricted: only '
    + ", ".join(wk.ALLOWED_KUBERNETES_LABELS)
    + ", node.kubernetes.io/* and node-restriction.kubernetes.io/* may be used",
    allows=lambda key: (
        key in wk.ALLOWED_KUBERNETES_LABELS
        or _in_domain(key, "node.kubernetes.io")
        or _in_domain(key, "node-restriction.kubernetes.io")
        or not _in_domain(key, "kubernetes.io")
    ),
)
_K8S_IO_DOMAIN_RULE: Final = KeyRule(
    cel=f"KEY.matches('{_domain_re('kops.k8s.io')}') || !KEY.matches('{_domain_re('k8s.io')}')",
    message='label domain "k8s.io" is restricted (except kops.k8s.io/*)',
    allows=lambda key: _in_domain(key, "kops.k8s.io") or not _in_domain(key, "k8s.io"),
)

NODEPOOL_KEY_RULES: Final = (
    _HOSTNAME_RULE,
    _JOINER_SET_RULE,
    _JOINER_DOMAIN_RULE,
    _KUBERNETES_DOMAIN_RULE,
    _K8S_IO_DOMAIN_RULE,
)
"""Restrictions on requirement keys and template labels of a NodePool."""
NODECLAIM_KEY_RULES: Final = (
    _HOSTNAME_RULE,
    _JOINER_DOMAIN_RULE,
    _KUBERNETES_DOMAIN_RULE,
    _K8S_IO_DOMAIN_RULE,
)
"""Restrictions on requirement keys of a NodeClaim (joiner itself writes joiner.sh/nodepool)."""


def restricted_key_messages(key: str, rules: Iterable[KeyRule]) -> list[str]:
    """The messages of every rule ``key`` breaks (empty when the key may be used)."""
    return [rule.message for rule in rules if not rule.allows(key)]


def _key_checker(rules: tuple[KeyRule, ...], what: str) -> Callable[[str], str]:
    def check(key: str) -> str:
        check_qualified_name(key)
        broken = restricted_key_messages(key, rules)
        if broken:
            raise PydanticCustomError(
                "restricted_key",
                "{what} '{key}' may not be used: {reasons}",
                {"what": what, "key": key, "reasons": "; ".join(broken)},
            )
        return key

    return check


def _key_schema(rules: tuple[KeyRule, ...], what: str) -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": QUALIFIED_NAME_PATTERN,
        "maxLength": QUALIFIED_NAME_MAX_LENGTH,
        "x-kubernetes-validations": [cel_rule(rule.cel_for("self"), f"{what}: {rule.message}") for rule in rules],
    }


NodePoolRequirementKey = Annotated[
    str,
    AfterValidator(_key_checker(NODEPOOL_KEY_RULES, "key")),
    WithJsonSchema(_key_schema(NODEPOOL_KEY_RULES, "key")),
]
NodeClaimRequirementKey = Annotated[
    str,
    AfterValidator(_key_checker(NODECLAIM_KEY_RULES, "key")),
    WithJsonSchema(_key_schema(NODECLAIM_KEY_RULES, "key")),
]


def check_template_labels(labels: Mapping[str, str]) -> None:
    """Validate NodePool template label keys and values (raises ``PydanticCustomError``)."""
    problems: list[str] = []
    for key, value in labels.items():
        try:
            check_qualified_name(key)
        except PydanticCustomError:
            problems.append(f"label key '{key}' is not a qualified name such as 'example.com/name'")
            continue
        problems.extend(f"label '{key}': {msg}" for msg in restricted_key_messages(key, NODEPOOL_KEY_RULES))
        if len(value) > LABEL_VALUE_MAX_LENGTH or re.fullmatch(LABEL_VALUE_PATTERN, value) is None:
            problems.append(f"label '{key}' has an invalid value '{value}' (at most 63 alphanumerics, '-', '_', '.')")
    if problems:
        raise PydanticCustomError("template_labels", "{problems}", {"problems": "; ".join(problems)})


TEMPLATE_LABELS_SCHEMA_EXTRA: Final[dict[str, Any]] = {
    "maxProperties": MAX_LABELS,
    "additionalProperties": {
        "type": "string",
        "pattern": LABEL_VALUE_PATTERN,
        "maxLength": LABEL_VALUE_MAX_LENGTH,
    },
    "x-kubernetes-validations": [
        cel_rule(
            f"self.all(k, k.size() <= {QUALIFIED_NAME_MAX_LENGTH} && k.matches(r'{QUALIFIED_NAME_PATTERN}'))",
            "labels: every key must be a qualified name such as 'example.com/name'",
        ),
        *(cel_rule(f"self.all(k, {rule.cel_for('k')})", f"labels: {rule.message}") for rule in NODEPOOL_KEY_RULES),
    ],
}


# --- requirements -----------------------------------------------------------------------------

RequirementOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


@dataclass(frozen=True)
class _RequirementRule:
    cel: str
    message: str
    field_path: str
    allows: Callable[[RequirementBase], bool]


def _int_values_ok(req: RequirementBase) -> bool:
    return len(req.values) == 1 and is_integer_string(req.values[0])


REQUIREMENT_RULES: Final = (
    _RequirementRule(
        cel="self.operator != 'In' || (has(self.values) && size(self.values) > 0)",
        message="values: a requirement with operator In needs at least one value",
        field_path=".values",
        allows=lambda req: req.operator != "In" or len(req.values) > 0,
    ),
    _RequirementRule(
        cel=(
            "!(self.operator in ['Gt', 'Lt']) || (has(self.values) && size(self.values) == 1"
            f" && self.values[0].matches('{INTEGER_PATTERN}'))"
        ),
        message=("values: a requirement with operator Gt or Lt needs exactly one value, a non-negative integer"),
        field_path=".values",
        allows=lambda req: req.operator not in ("Gt", "Lt") or _int_values_ok(req),
    ),
    _RequirementRule(
        cel="!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0",
        message="values: a requirement with operator Exists or DoesNotExist must not have values",
        field_path=".values",
        allows=lambda req: req.operator not in ("Exists", "DoesNotExist") or len(req.values) == 0,
    ),
    _RequirementRule(
        cel=(
            "!has(self.minValues) || self.operator != 'In' || (has(self.values) && size(self.values) >= self.minValues)"
        ),
        message="minValues: a requirement with operator In must list at least minValues values",
        field_path=".minValues",
        allows=lambda req: req.min_values is None or req.operator != "In" or len(req.values) >= req.min_values,
    ),
)


class RequirementBase(SpecModel):
    """A node selector requirement with an optional minimum number of distinct values."""

    omit_when_empty = frozenset({"values"})

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(rule.cel, rule.message, field_path=rule.field_path) for rule in REQUIREMENT_RULES
            ]
        }
    )

    key: str
    """The label key the requirement applies to."""
    operator: RequirementOperator
    """How the key relates to the values: ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt``."""
    values: list[LabelValue] = Field(default_factory=list)
    """Label values. ``In`` needs at least one; ``Gt``/``Lt`` exactly one integer; ``Exists`` and
    ``DoesNotExist`` none."""
    min_values: int | None = Field(default=None, ge=1, le=MIN_VALUES_MAX)
    """Minimum number of distinct values of this key that the candidate instance types must span
    (flexibility for the cloud provider to fall back). With ``In``, at most ``len(values)``."""

    @model_validator(mode="after")
    def _check_operator_values(self) -> Self:
        broken = [rule.message for rule in REQUIREMENT_RULES if not rule.allows(self)]
        if broken:
            raise PydanticCustomError(
                "requirement",
                "requirement '{key}': {reasons}",
                {"key": self.key, "reasons": "; ".join(broken)},
            )
        return self


class NodePoolRequirement(RequirementBase):
    """A requirement in a NodePool template: joiner-owned label keys are restricted."""

    key: NodePoolRequirementKey
    """The label key the requirement applies to (see "Well-known labels")."""


class NodeClaimRequirement(RequirementBase):
    """A requirement on a NodeClaim (joiner writes these; ``joiner.sh/nodepool`` is allowed)."""

    key: NodeClaimRequirementKey
    """The label key the requirement applies to (see "Well-known labels")."""


# --- taints -----------------------------------------------------------------------------------

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Taint(SpecModel):
    """A taint put on the Node (the ``core/v1`` Taint shape)."""

    key: QualifiedName
    """Taint key, e.g. ``nvidia.com/gpu``."""
    value: LabelValue | None = None
    """Optional taint value."""
    effect: TaintEffect
    """``NoSchedule``, ``PreferNoSchedule`` or ``NoExecute``."""
    time_added: datetime | None = None
    """When a ``NoExecute`` taint was added (set by Kubernetes)."""


def duplicate_taint_messages(taints: Iterable[Taint]) -> list[str]:
    """One message per taint key and effect that appears more than once (Kubernetes keeps one)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for taint in taints:
        pair = (taint.key, taint.effect)
        if pair in seen:
            out.append(f"taint '{taint.key}:{taint.effect}' is listed twice (a key and effect may appear once)")
        seen.add(pair)
    return out


UNIQUE_TAINTS_RULE: Final = cel_rule(
    "self.all(a, self.exists_one(b, b.key == a.key && b.effect == a.effect))",
    "a taint key and effect may appear once",
)


# --- contradictions between requirements ------------------------------------------------------


def _integer(value: str) -> int | None:
    return int(value) if is_integer_string(value) else None


def requirement_conflicts(requirements: Iterable[RequirementBase], labels: Mapping[str, str] = {}) -> list[str]:
    """Why no node could ever satisfy these requirements together (with ``labels`` read as ``In``),
    one message per key; empty when they can be met."""
    by_key: dict[str, list[tuple[str, list[str]]]] = {}
    for key, value in labels.items():
        by_key.setdefault(key, []).append(("In", [value]))
    for req in requirements:
        by_key.setdefault(req.key, []).append((req.operator, list(req.values)))
    out = []
    for key, reqs in by_key.items():
        problem = _conflict(reqs)
        if problem is not None:
            out.append(f"requirements on '{key}' contradict each other: {problem}")
    return out


def _conflict(reqs: list[tuple[str, list[str]]]) -> str | None:
    ops = {op for op, _ in reqs}
    if "DoesNotExist" in ops and ops & {"In", "Exists", "Gt", "Lt"}:
        other = sorted(ops & {"In", "Exists", "Gt", "Lt"})[0]
        return f"DoesNotExist with {other}"
    gts = [n for op, values in reqs if op == "Gt" for n in map(_integer, values) if n is not None]
    lts = [n for op, values in reqs if op == "Lt" for n in map(_integer, values) if n is not None]
    low = max(gts) if gts else None
    high = min(lts) if lts else None
    if low is not None and high is not None and high - low < 2:
        return f"no integer is greater than {low} and less than {high}"
    excluded = {v for op, values in reqs if op == "NotIn" for v in values}
    allowed: set[str] | None = None
    for op, values in reqs:
        if op == "In":
            allowed = set(values) if allowed is None else allowed & set(values)
    if allowed is None:
        return None
    left = {
        v
        for v in allowed - excluded
        if (low is None and high is None)
        or ((n := _integer(v)) is not None and (low is None or n > low) and (high is None or n < high))
    }
    if not left:
        return f"no value is allowed by every In, NotIn, Gt and Lt (In {sorted(allowed)}, NotIn {sorted(excluded)})"
    return None


REQUIREMENTS_CONFLICT_RULES: Final = (
    cel_rule(
        "self.all(a, a.operator != 'DoesNotExist'"
        " || !self.exists(b, b.key == a.key && b.operator in ['In', 'Exists', 'Gt', 'Lt']))",
        "requirements: DoesNotExist contradicts In, Exists, Gt or Lt on the same key",
    ),
    cel_rule(
        "self.all(a, a.operator != 'Gt' || !has(a.values) || size(a.values) != 1"
        " || !a.values[0].matches('^[0-9]{1,18}$')"
        " || !self.exists(b, b.key == a.key && b.operator == 'Lt' && has(b.values) && size(b.values) == 1"
        " && b.values[0].matches('^[0-9]{1,18}$') && int(b.values[0]) - int(a.values[0]) < 2))",
        "requirements: no integer is greater than the Gt value and less than the Lt value on the same key",
    ),
)
"""The contradictions the CRD can afford to check (CEL cost grows with every value compared): an
``In`` whose every value a ``NotIn`` excludes is caught by the models (and so by the controller's
``ValidationSucceeded`` condition) only."""


# --- node class reference ---------------------------------------------------------------------

NODE_CLASS_KIND_PATTERN: Final = r"^[A-Z][A-Za-z0-9]*$"
DNS_SUBDOMAIN_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _check_group(value: str) -> str:
    if value != wk.GROUP:
        raise PydanticCustomError(
            "node_class_group",
            "must be '{group}' (joiner's node classes, e.g. KWOKNodeClass), got '{value}'",
            {"group": wk.GROUP, "value": value},
        )
    return value


def _check_kind(value: str) -> str:
    if len(value) > 63 or re.fullmatch(NODE_CLASS_KIND_PATTERN, value) is None:
        raise PydanticCustomError(
            "node_class_kind",
            "must be a kind in CamelCase such as KWOKNodeClass, got '{value}'",
            {"value": value},
        )
    return value


def _check_name(value: str) -> str:
    if len(value) > 253 or re.fullmatch(DNS_SUBDOMAIN_PATTERN, value) is None:
        raise PydanticCustomError(
            "node_class_name",
            "must be an object name (lowercase alphanumerics, '-' and '.'), got '{value}'",
            {"value": value},
        )
    return value


class NodeClassReference(SpecModel):
    """Which node class (provider-specific settings) to launch nodes with."""

    group: Annotated[str, AfterValidator(_check_group), WithJsonSchema({"type": "string", "enum": [wk.GROUP]})]
    """API group of the node class: ``joiner.sh``."""
    kind: Annotated[
        str,
        AfterValidator(_check_kind),
        WithJsonSchema({"type": "string", "pattern": NODE_CLASS_KIND_PATTERN, "maxLength": 63}),
    ]
    """Kind of the node class, e.g. ``KWOKNodeClass``."""
    name: Annotated[
        str,
        AfterValidator(_check_name),
        WithJsonSchema({"type": "string", "pattern": DNS_SUBDOMAIN_PATTERN, "maxLength": 253}),
    ]
    """Name of the node class object."""
