"""Scalar value types shared by the kinds: durations, quantities, label keys and values, cron.

Each type is an ``Annotated`` alias that carries both the pydantic check and the OpenAPI schema
the CRD generator emits for it, built from the same regular expression, so the controller and the
apiserver accept exactly the same strings. The expressions are written in the common subset of
Python ``re`` and RE2 (what the apiserver uses) and are matched with ``fullmatch``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from api.quantity import NON_NEGATIVE_QUANTITY_PATTERN, QuantityError, is_non_negative_quantity, parse_nano

# --- patterns ---------------------------------------------------------------------------------

DURATION_PATTERN: Final = r"^([0-9]+h([0-9]+m)?([0-9]+s)?|[0-9]+m([0-9]+s)?|[0-9]+s)$"
"""Hours, minutes, seconds in that order, each optional but at least one: 720h, 30m, 1h30m, 0s."""
NEVER: Final = "Never"
NILLABLE_DURATION_PATTERN: Final = r"^(Never|[0-9]+h([0-9]+m)?([0-9]+s)?|[0-9]+m([0-9]+s)?|[0-9]+s)$"
BUDGET_DURATION_PATTERN: Final = r"^([0-9]+h([0-9]+m)?|[0-9]+m)(0s)?$"
"""Budget windows are cron-aligned, so hours and minutes only (a trailing 0s is tolerated)."""
BUDGET_NODES_PATTERN: Final = r"^([0-9]+|(100|[1-9]?[0-9])%)$"
"""A node count (``5``) or a percentage from 0% to 100% (``10%``)."""
CRON_PATTERN: Final = (
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)"
    r"|[0-9A-Za-z*?/,-]+([ \t]+[0-9A-Za-z*?/,-]+){4})$"
)
"""Five cron fields (minute hour day-of-month month day-of-week) or an @-macro."""
QUANTITY_PATTERN: Final = NON_NEGATIVE_QUANTITY_PATTERN
"""A non-negative Kubernetes resource quantity: ``500m``, ``16Gi``, ``8``, ``1.5``, ``1e3``
(the grammar is :mod:`api.quantity`'s, shared with the solver)."""
QUALIFIED_NAME_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
"""A label key, taint key or condition type: an optional DNS-subdomain prefix and a name."""
QUALIFIED_NAME_MAX_LENGTH: Final = 316
LABEL_VALUE_PATTERN: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MAX_LENGTH: Final = 63
OBJECT_REF_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$"
"""A ``namespace/name`` reference to a namespaced object."""
CONDITION_REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
INTEGER_PATTERN: Final = r"^[0-9]+$"
MAX_QUANTITY: Final = 2**63 - 1
"""The largest quantity the models accept, in base units: what Kubernetes' ``Quantity.Value()``
holds in an int64 (8 EiB of memory, 9.2e18 GPUs). Larger values (``1e400``) are refused, not read."""
CRD_MAX_INTEGER_QUANTITY: Final = 2**63 - 1024
"""The CRD's ``maximum`` for integer quantities. The apiserver reads OpenAPI bounds as float64: 2^63-1
rounds up to 2^63, which overflows int64 and then rejects every value; this is the largest float64
below 2^63. (The models keep :data:`MAX_QUANTITY`; strings are bounded by the models alone.)"""
POSITIVE_DURATION_CEL: Final = "self.matches('[1-9]')"
"""A duration that matches :data:`DURATION_PATTERN` is positive exactly when it has a non-zero digit."""

_DURATION_RE: Final = re.compile(DURATION_PATTERN)
_NILLABLE_DURATION_RE: Final = re.compile(NILLABLE_DURATION_PATTERN)
_BUDGET_DURATION_RE: Final = re.compile(BUDGET_DURATION_PATTERN)
_BUDGET_NODES_RE: Final = re.compile(BUDGET_NODES_PATTERN)
_CRON_RE: Final = re.compile(CRON_PATTERN)
_QUALIFIED_NAME_RE: Final = re.compile(QUALIFIED_NAME_PATTERN)
_LABEL_VALUE_RE: Final = re.compile(LABEL_VALUE_PATTERN)
_OBJECT_REF_RE: Final = re.compile(OBJECT_REF_PATTERN)
_CONDITION_REASON_RE: Final = re.compile(CONDITION_REASON_PATTERN)
_INTEGER_RE: Final = re.compile(INTEGER_PATTERN)
_DURATION_PART_RE: Final = re.compile(r"([0-9]+)([hms])")


def is_integer_string(value: str) -> bool:
    """Whether ``value`` is a non-negative decimal integer (what ``Gt``/``Lt`` compare against)."""
    return _INTEGER_RE.fullmatch(value) is not None


# --- durations --------------------------------------------------------------------------------


def parse_duration(value: str) -> timedelta | None:
    """Parse ``720h``, ``30m``, ``1h30m``, ``0s`` (or ``Never``, which gives ``None``).

    Raises ``ValueError`` for anything else.
    """
    if value == NEVER:
        return None
    if _DURATION_RE.fullmatch(value) is None:
        raise ValueError(f"invalid duration '{value}': expected e.g. 720h, 30m, 1h30m, 45s")
    seconds = 0
    for amount, unit in _DURATION_PART_RE.findall(value):
        seconds += int(amount) * {"h": 3600, "m": 60, "s": 1}[unit]
    return timedelta(seconds=seconds)


def format_duration(value: timedelta | None) -> str:
    """The canonical string for a whole-second duration (``None`` gives ``Never``)."""
    if value is None:
        return NEVER
    total = int(value.total_seconds())
    if total < 0 or timedelta(seconds=total) != value:
        raise ValueError(f"duration '{value}' is not a non-negative whole number of seconds")
    if total == 0:
        return "0s"
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{hours}h"
    if minutes:
        out += f"{minutes}m"
    if seconds:
        out += f"{seconds}s"
    return out


# --- quantities -------------------------------------------------------------------------------


def parse_quantity(value: str | int) -> Decimal:
    """The exact numeric value of a Kubernetes quantity (``"500m"`` gives ``Decimal("0.5")``).

    As in Kubernetes, a non-zero value finer than a nano-unit rounds up to ``1n``.
    Raises ``ValueError`` for anything that is not a non-negative quantity.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"invalid quantity '{value}'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"invalid quantity '{value}': must not be negative")
        return Decimal(value)
    if not is_non_negative_quantity(value):
        raise ValueError(f"invalid quantity '{value}': expected e.g. 500m, 16Gi, 8")
    try:
        nano = parse_nano(value)
    except QuantityError as err:
        raise ValueError(f"invalid quantity '{value}': {err}") from err
    return Decimal(f"{nano}e-9")


# --- pydantic checks (each raises an error whose message says what is expected) ----------------


def _check_duration(value: str) -> str:
    if _DURATION_RE.fullmatch(value) is None:
        raise PydanticCustomError(
            "duration",
            "must be a duration of hours, minutes and seconds such as 720h, 30m or 1h30m, got '{value}'",
            {"value": value},
        )
    return value


def _check_nillable_duration(value: str) -> str:
    if _NILLABLE_DURATION_RE.fullmatch(value) is None:
        raise PydanticCustomError(
            "duration",
            "must be a duration of hours, minutes and seconds such as 720h, 30m or 1h30m, or Never, got '{value}'",
            {"value": value},
        )
    return value


def _check_budget_duration(value: str) -> str:
    if _BUDGET_DURATION_RE.fullmatch(value) is None:
        raise PydanticCustomError(
            "duration",
            "must be a duration in hours and minutes such as 8h, 30m or 1h30m, got '{value}'",
            {"value": value},
        )
    return value


def _check_budget_nodes(value: str) -> str:
    if _BUDGET_NODES_RE.fullmatch(value) is None:
        raise PydanticCustomError(
            "budget_nodes",
            "must be a node count such as 5 or a percentage from 0% to 100% such as 10%, got '{value}'",
            {"value": value},
        )
    return value


def _check_cron(value: str) -> str:
    from croniter import croniter  # only budgets and schedules have crons: imported when one is read

    if _CRON_RE.fullmatch(value) is None or not croniter.is_valid(value):
        raise PydanticCustomError(
            "cron",
            "must be a cron schedule of five fields (minute hour day-of-month month day-of-week) "
            "such as '0 9 * * 1-5', or one of @yearly, @annually, @monthly, @weekly, @daily, "
            "@midnight, @hourly, each field in range (minute 0-59, hour 0-23, day 1-31, month 1-12, "
            "day-of-week 0-7), got '{value}'",
            {"value": value},
        )
    return value


def _check_quantity(value: Any) -> Any:
    ok = False
    if isinstance(value, bool):
        ok = False
    elif isinstance(value, int):
        ok = value >= 0
    elif isinstance(value, str):
        ok = is_non_negative_quantity(value)
    if not ok:
        raise PydanticCustomError(
            "quantity",
            "must be a non-negative quantity such as 500m, 16Gi or 8, got '{value}'",
            {"value": value},
        )
    try:
        too_large = (
            value * NANO_PER_UNIT if isinstance(value, int) else parse_nano(value)
        ) > MAX_QUANTITY * NANO_PER_UNIT
    except QuantityError:
        too_large = True
    if too_large:
        raise PydanticCustomError(
            "quantity_range",
            "must be at most 2^63-1, about 9.2e18 (7Ei of memory), got '{value}'",
            {"value": value},
        )
    return value


NANO_PER_UNIT: Final = 10**9


def is_positive_duration(value: str) -> bool:
    """Whether a duration (already matching the pattern) is longer than zero (``0s``, ``0h0m`` are not)."""
    return re.search("[1-9]", value) is not None


def _check_positive_duration(value: str) -> str:
    _check_duration(value)
    if not is_positive_duration(value):
        raise PydanticCustomError(
            "duration_positive", "must be longer than zero, such as 30s, 20m or 720h, got '{value}'", {"value": value}
        )
    return value


def _check_nillable_positive_duration(value: str) -> str:
    _check_nillable_duration(value)
    if value != NEVER and not is_positive_duration(value):
        raise PydanticCustomError(
            "duration_positive",
            "must be longer than zero, such as 30s, 20m or 720h, or Never, got '{value}'",
            {"value": value},
        )
    return value


def check_qualified_name(value: str) -> str:
    """Validate a label key / taint key: ``[prefix/]name``, prefix a DNS subdomain."""
    prefix, _, name = value.rpartition("/")
    if (
        _QUALIFIED_NAME_RE.fullmatch(value) is None
        or len(value) > QUALIFIED_NAME_MAX_LENGTH
        or len(name) > 63
        or len(prefix) > 253
    ):
        raise PydanticCustomError(
            "qualified_name",
            "must be a qualified name such as 'example.com/name' (an optional DNS subdomain "
            "prefix and a name of at most 63 alphanumerics, '-', '_' or '.'), got '{value}'",
            {"value": value},
        )
    return value


def _check_label_value(value: str) -> str:
    if len(value) > LABEL_VALUE_MAX_LENGTH or _LABEL_VALUE_RE.fullmatch(value) is None:
        raise PydanticCustomError(
            "label_value",
            "must be a label value: at most 63 alphanumerics, '-', '_' or '.', starting and ending "
            "with an alphanumeric, got '{value}'",
            {"value": value},
        )
    return value


def _check_object_ref(value: str) -> str:
    if len(value) > 317 or _OBJECT_REF_RE.fullmatch(value) is None:
        raise PydanticCustomError(
            "object_ref",
            "must be 'namespace/name', got '{value}'",
            {"value": value},
        )
    return value


def _check_condition_reason(value: str) -> str:
    if len(value) > 1024 or _CONDITION_REASON_RE.fullmatch(value) is None:
        raise PydanticCustomError(
            "condition_reason",
            "must be a CamelCase reason such as 'NodeNotFound' (letters, digits, '_', ',' or ':'), got '{value}'",
            {"value": value},
        )
    return value


# --- annotated types --------------------------------------------------------------------------

Duration = Annotated[
    str,
    AfterValidator(_check_duration),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN, "maxLength": 64}),
]
"""A duration such as ``720h``, ``30m``, ``1h30m`` or ``0s``."""

NillableDuration = Annotated[
    str,
    AfterValidator(_check_nillable_duration),
    WithJsonSchema({"type": "string", "pattern": NILLABLE_DURATION_PATTERN, "maxLength": 64}),
]
"""A :data:`Duration` or ``Never``."""

PositiveDuration = Annotated[
    str,
    AfterValidator(_check_positive_duration),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": DURATION_PATTERN,
            "maxLength": 64,
            "x-kubernetes-validations": [
                {"rule": POSITIVE_DURATION_CEL, "message": "must be longer than zero, such as 30s, 20m or 720h"}
            ],
        }
    ),
]
"""A :data:`Duration` longer than zero (``0s`` is refused)."""

NillablePositiveDuration = Annotated[
    str,
    AfterValidator(_check_nillable_positive_duration),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": NILLABLE_DURATION_PATTERN,
            "maxLength": 64,
            "x-kubernetes-validations": [
                {
                    "rule": f"self == '{NEVER}' || {POSITIVE_DURATION_CEL}",
                    "message": "must be longer than zero, such as 30s, 20m or 720h, or Never",
                }
            ],
        }
    ),
]
"""A :data:`NillableDuration` longer than zero (``0s`` is refused, ``Never`` is fine)."""

BudgetDuration = Annotated[
    str,
    AfterValidator(_check_budget_duration),
    WithJsonSchema({"type": "string", "pattern": BUDGET_DURATION_PATTERN, "maxLength": 64}),
]

BudgetNodes = Annotated[
    str,
    AfterValidator(_check_budget_nodes),
    WithJsonSchema({"type": "string", "pattern": BUDGET_NODES_PATTERN, "maxLength": 16}),
]

CronSchedule = Annotated[
    str,
    AfterValidator(_check_cron),
    WithJsonSchema({"type": "string", "pattern": CRON_PATTERN, "maxLength": 256}),
]

Quantity = Annotated[
    str | int,
    BeforeValidator(_check_quantity),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "minimum": 0,
            "maximum": CRD_MAX_INTEGER_QUANTITY,
        }
    ),
]
"""A Kubernetes quantity: an integer, or a string such as ``500m``, ``16Gi``, ``1.5``."""

QualifiedName = Annotated[
    str,
    AfterValidator(check_qualified_name),
    WithJsonSchema({"type": "string", "pattern": QUALIFIED_NAME_PATTERN, "maxLength": QUALIFIED_NAME_MAX_LENGTH}),
]

LabelValue = Annotated[
    str,
    AfterValidator(_check_label_value),
    WithJsonSchema({"type": "string", "pattern": LABEL_VALUE_PATTERN, "maxLength": LABEL_VALUE_MAX_LENGTH}),
]

ObjectRef = Annotated[
    str,
    AfterValidator(_check_object_ref),
    WithJsonSchema({"type": "string", "pattern": OBJECT_REF_PATTERN, "maxLength": 317}),
]

ConditionReason = Annotated[
    str,
    AfterValidator(_check_condition_reason),
    WithJsonSchema({"type": "string", "pattern": CONDITION_REASON_PATTERN, "maxLength": 1024, "minLength": 1}),
]
