"""The requirements algebra: sets of ``key op values`` over node labels.

A :class:`Requirement` describes which states of one label key are acceptable. A label can be
absent or present with a value, so a requirement is a pair (does it allow absence?, which values
does it allow?). The six Kubernetes operators map onto that pair:

==============  ==============  ===============================================
operator        absent allowed  values allowed
==============  ==============  ===============================================
In [a, b]       no              a, b
NotIn [a, b]    yes             everything but a, b
Exists          no              everything
DoesNotExist    yes             nothing
Gt n            no              integers greater than n
Lt n            no              integers less than n
==============  ==============  ===============================================

Intersection is then plain set intersection on both parts, and a requirement is unsatisfiable
when it allows neither absence nor any value.

:class:`Requirements` is a conjunction over keys. Two readings exist, as in Karpenter:

* **pod side** (``Requirements.matches``, ``intersect``): a key that is not mentioned allows
  anything, absence included.
* **node side** (``compatible_with_node``): a key the node's template does not mention will not
  be on the node, i.e. it reads as ``DoesNotExist`` -- except ``kubernetes.io/hostname``, which
  every node gets with a value nobody can know in advance.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final, Literal

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
OPERATORS: Final[tuple[str, ...]] = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")

HOSTNAME: Final = "kubernetes.io/hostname"


class RequirementError(ValueError):
    """A requirement is malformed (unknown operator, non-integer Gt/Lt value, ...)."""


def _int_or_none(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


@lru_cache(maxsize=4096)
def _sorted_values(values: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(values))


def _sorted(values: frozenset[str]) -> list[str]:
    """``sorted(values)``; a large set (the instance types a node may be) is sorted once, not for
    every node and every output."""
    return list(_sorted_values(values)) if len(values) > 8 else sorted(values)


@dataclass(frozen=True, slots=True)
class Requirement:
    """Acceptable states of one label key.

    ``complement`` False: the allowed values are exactly ``values``. ``complement`` True: every
    value except ``values`` is allowed. ``gt``/``lt`` further restrict values to integers in the
    open interval. ``allow_absent`` says whether a node without the label is acceptable.
    ``min_values`` (NodePools only) asks for at least that many distinct values of this key
    among a NodeClaim's candidate instance types.
    """

    key: str
    complement: bool
    values: frozenset[str] = frozenset()
    allow_absent: bool = False
    gt: int | None = None
    lt: int | None = None
    min_values: int | None = None
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = hash((self.key, self.complement, self.values, self.allow_absent, self.gt, self.lt, self.min_values))
            object.__setattr__(self, "_hash", h or 1)
        return h or 1

    # --- construction ---------------------------------------------------------------------

    @staticmethod
    def new(key: str, operator: str, values: Iterable[str] = (), *, min_values: int | None = None) -> Requirement:
        """From a Kubernetes node selector requirement."""
        vals = frozenset(str(v) for v in values)
        if operator == "In":
            return Requirement(key, False, vals, False, min_values=min_values)
        if operator == "NotIn":
            return Requirement(key, True, vals, True, min_values=min_values)
        if operator == "Exists":
            return Requirement(key, True, frozenset(), False, min_values=min_values)
        if operator == "DoesNotExist":
            return Requirement(key, False, frozenset(), True, min_values=min_values)
        if operator in ("Gt", "Lt"):
            if len(vals) != 1:
                raise RequirementError(f"{key} {operator}: needs exactly one integer value, got {sorted(vals)}")
            bound = _int_or_none(next(iter(vals)))
            if bound is None:
                raise RequirementError(f"{key} {operator}: value {next(iter(vals))!r} is not an integer")
            if operator == "Gt":
                return Requirement(key, True, frozenset(), False, gt=bound, min_values=min_values)
            return Requirement(key, True, frozenset(), False, lt=bound, min_values=min_values)
        raise RequirementError(f"{key}: unknown operator {operator!r} (expected one of {', '.join(OPERATORS)})")

    @staticmethod
    def in_(key: str, *values: str) -> Requirement:
        return Requirement(key, False, frozenset(values), False)

    @staticmethod
    def any(key: str) -> Requirement:
        """No constraint at all (absent or any value)."""
        return Requirement(key, True, frozenset(), True)

    # --- reading --------------------------------------------------------------------------

    def _value_ok(self, value: str) -> bool:
        if (value in self.values) == self.complement:
            return False
        if self.gt is not None or self.lt is not None:
            number = _int_or_none(value)
            if number is None:
                return False
            if self.gt is not None and number <= self.gt:
                return False
            if self.lt is not None and number >= self.lt:
                return False
        return True

    def allows(self, value: str | None) -> bool:
        """Whether a node whose label is ``value`` (None: absent) is acceptable."""
        if value is None:
            return self.allow_absent
        return self._value_ok(value)

    def has_values(self) -> bool:
        """Some value (not just absence) is acceptable."""
        if not self.complement:
            return bool(self.values)
        if self.gt is not None and self.lt is not None:
            return self.lt - self.gt > 1
        return True

    def is_empty(self) -> bool:
        """Nothing is acceptable: the requirement can never be met."""
        return not self.allow_absent and not self.has_values()

    def is_unconstrained(self) -> bool:
        return self.complement and not self.values and self.allow_absent and self.gt is None and self.lt is None

    def allows_fresh_value(self) -> bool:
        """Whether an unknown, never-seen value is acceptable (used for a new node's hostname)."""
        return self.complement and self.gt is None and self.lt is None

    def single_value(self) -> str | None:
        """The only acceptable value when exactly one value (and not absence) is acceptable."""
        if not self.complement and len(self.values) == 1 and not self.allow_absent:
            return next(iter(self.values))
        return None

    def allowed_among(self, candidates: Iterable[str]) -> list[str]:
        return [value for value in candidates if self._value_ok(value)]

    # --- algebra --------------------------------------------------------------------------

    def intersect(self, other: Requirement) -> Requirement:
        if self.key != other.key:
            raise RequirementError(f"cannot intersect requirements on {self.key!r} and {other.key!r}")
        if other.is_unconstrained() and other.min_values is None:
            return self
        if self.is_unconstrained() and self.min_values is None:
            return other
        gt = self.gt if other.gt is None else other.gt if self.gt is None else max(self.gt, other.gt)
        lt = self.lt if other.lt is None else other.lt if self.lt is None else min(self.lt, other.lt)
        if not self.complement and not other.complement:
            complement, values = False, self.values & other.values
        elif not self.complement:
            complement, values = False, self.values - other.values
        elif not other.complement:
            complement, values = False, other.values - self.values
        else:
            complement, values = True, self.values | other.values
        if not complement and (gt is not None or lt is not None):
            probe = Requirement(self.key, True, frozenset(), False, gt=gt, lt=lt)
            values = frozenset(v for v in values if probe._value_ok(v))
            gt = lt = None
        if self.min_values is None:
            min_values = other.min_values
        elif other.min_values is None:
            min_values = self.min_values
        else:
            min_values = max(self.min_values, other.min_values)
        return Requirement(
            self.key,
            complement,
            values,
            self.allow_absent and other.allow_absent,
            gt=gt,
            lt=lt,
            min_values=min_values,
        )

    # --- output ---------------------------------------------------------------------------

    def to_expressions(self) -> list[dict[str, Any]]:
        """As Kubernetes node selector requirements (a key may need two: ``Exists`` + ``NotIn``)."""
        out: list[dict[str, Any]] = []
        extra: dict[str, Any] = {} if self.min_values is None else {"minValues": self.min_values}
        if not self.complement:
            if self.values:
                out.append({"key": self.key, "operator": "In", "values": _sorted(self.values), **extra})
            elif self.allow_absent:
                out.append({"key": self.key, "operator": "DoesNotExist", **extra})
            else:
                out.append({"key": self.key, "operator": "In", "values": [], **extra})
            return out
        if self.allow_absent:
            if self.values:
                out.append({"key": self.key, "operator": "NotIn", "values": _sorted(self.values), **extra})
            elif extra:
                out.append({"key": self.key, "operator": "NotIn", "values": [], **extra})
            return out
        if self.gt is not None:
            out.append({"key": self.key, "operator": "Gt", "values": [str(self.gt)], **extra})
        if self.lt is not None:
            out.append({"key": self.key, "operator": "Lt", "values": [str(self.lt)], **extra})
        if self.values:
            out.append({"key": self.key, "operator": "NotIn", "values": _sorted(self.values)})
        if not out:
            out.append({"key": self.key, "operator": "Exists", **extra})
        elif self.values and self.gt is None and self.lt is None:
            out.insert(0, {"key": self.key, "operator": "Exists", **extra})
        return out

    def __str__(self) -> str:
        parts = []
        for expr in self.to_expressions():
            op = expr["operator"]
            if op in ("Exists", "DoesNotExist"):
                parts.append(f"{self.key} {op}")
            elif op in ("Gt", "Lt"):
                parts.append(f"{self.key} {op} {expr['values'][0]}")
            else:
                parts.append(f"{self.key} {op} [{', '.join(expr['values'])}]")
        return " and ".join(parts) if parts else f"{self.key} (any)"


@dataclass(frozen=True, slots=True)
class Requirements:
    """A conjunction of requirements, at most one per key (duplicates are intersected)."""

    items: tuple[Requirement, ...] = ()
    _by_key: dict[str, Requirement] = field(default_factory=dict, init=False, repr=False, compare=False)
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __init__(self, items: Iterable[Requirement] = ()) -> None:
        by_key: dict[str, Requirement] = {}
        for req in items:
            prev = by_key.get(req.key)
            by_key[req.key] = req if prev is None else prev.intersect(req)
        ordered = tuple(by_key[k] for k in sorted(by_key))
        object.__setattr__(self, "items", ordered)
        object.__setattr__(self, "_by_key", {r.key: r for r in ordered})
        object.__setattr__(self, "_hash", hash(ordered))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Requirements):
            return NotImplemented
        return self._hash == other._hash and self.items == other.items

    @staticmethod
    def from_labels(labels: Mapping[str, str]) -> Requirements:
        return Requirements(Requirement.in_(key, value) for key, value in labels.items())

    @staticmethod
    def from_expressions(
        expressions: Iterable[Mapping[str, Any]], *, aliases: Mapping[str, str] | None = None
    ) -> Requirements:
        """From ``[{key, operator, values, minValues}]`` (node selector requirement dicts).

        ``aliases`` renames keys (e.g. Karpenter's label keys to joiner's). Raises
        :class:`RequirementError` for a malformed expression.
        """
        reqs = []
        for expr in expressions:
            min_values = expr.get("minValues")
            key = str(expr["key"])
            reqs.append(
                Requirement.new(
                    aliases.get(key, key) if aliases else key,
                    str(expr.get("operator", "")),
                    expr.get("values") or (),
                    min_values=int(min_values) if min_values is not None else None,
                )
            )
        return Requirements(reqs)

    # --- reading --------------------------------------------------------------------------

    def get(self, key: str) -> Requirement | None:
        return self._by_key.get(key)

    def keys(self) -> tuple[str, ...]:
        return tuple(r.key for r in self.items)

    def __iter__(self) -> Iterator[Requirement]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def is_satisfiable(self) -> bool:
        return all(not req.is_empty() for req in self.items)

    def first_empty(self) -> Requirement | None:
        for req in self.items:
            if req.is_empty():
                return req
        return None

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether concrete labels (an existing node, a pod for a label selector) satisfy all."""
        return all(req.allows(labels.get(req.key)) for req in self.items)

    def first_mismatch(self, labels: Mapping[str, str]) -> Requirement | None:
        for req in self.items:
            if not req.allows(labels.get(req.key)):
                return req
        return None

    def compatible_with_node(self, node: Requirements) -> Requirement | None:
        """Check these (pod-side) requirements against a node template (node side).

        Returns the first pod requirement that cannot be met, or None when compatible. A key the
        node side does not mention reads as absent, except the hostname (a fresh value).
        """
        for req in self.items:
            other = node._by_key.get(req.key)
            if other is None:
                if req.key == HOSTNAME:
                    if not req.allows_fresh_value():
                        return req
                elif not req.allow_absent:
                    return req
            elif req.intersect(other).is_empty():
                return req
        return None

    # --- algebra --------------------------------------------------------------------------

    def intersect(self, other: Requirements) -> Requirements:
        if not other.items:
            return self
        if not self.items:
            return other
        return Requirements((*self.items, *other.items))

    def with_(self, *reqs: Requirement) -> Requirements:
        return Requirements((*self.items, *reqs))

    def without(self, *keys: str) -> Requirements:
        drop = set(keys)
        return Requirements(r for r in self.items if r.key not in drop)

    def only(self, keys: Iterable[str]) -> Requirements:
        """The requirements on ``keys``; the others are dropped."""
        keep = set(keys)
        return Requirements(r for r in self.items if r.key in keep)

    # --- output ---------------------------------------------------------------------------

    def to_expressions(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for req in self.items:
            out.extend(req.to_expressions())
        return out

    def __str__(self) -> str:
        return ", ".join(str(r) for r in self.items) or "(none)"


EVERYTHING: Final = Requirements()


def label_selector(
    match_labels: Mapping[str, str] | None = None, match_expressions: Sequence[Mapping[str, Any]] = ()
) -> Requirements:
    """A Kubernetes label selector as requirements (matched with :meth:`Requirements.matches`)."""
    reqs = [Requirement.in_(k, v) for k, v in (match_labels or {}).items()]
    for expr in match_expressions:
        reqs.append(Requirement.new(str(expr["key"]), str(expr["operator"]), expr.get("values") or ()))
    return Requirements(reqs)
