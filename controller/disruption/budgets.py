"""Disruption budgets: how many of a NodePool's nodes may be disrupted at once. Pure: ``now`` is passed in.

A NodePool lists budgets (``spec.disruption.budgets``); a missing list means the default, one budget
of ``10%``; an explicit empty list means no budget at all, so nothing limits disruption (what
``docs/api.md`` promises). A budget is *active* when it has no ``schedule``, or when ``now`` falls
within ``duration`` after the latest time its cron ``schedule`` (UTC, read by croniter) fired. It
applies to the reasons it lists (all four when it lists none). The most restrictive active budget
that applies to a reason wins.

``nodes`` is a count (``5``) or a percentage of the pool's nodes (``10%``), rounded up, so ``10%``
of 3 nodes is 1. The nodes already being disrupted count against it: NodeClaims being deleted,
those a disruption command has picked, and Nodes that are not Ready.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from croniter import croniter

from api.v1.nodepool import DEFAULT_BUDGET_NODES, DISRUPTION_REASONS
from api.v1.types import format_duration, parse_duration

REASON_EMPTY: Final = "Empty"
REASON_UNDERUTILIZED: Final = "Underutilized"
REASON_DRIFTED: Final = "Drifted"
REASON_EXPIRED: Final = "Expired"
REASONS: Final[tuple[str, ...]] = DISRUPTION_REASONS


class BudgetError(ValueError):
    """A budget that cannot be read (bad count, percentage, cron expression or duration)."""


@dataclass(frozen=True, slots=True)
class Budget:
    """One entry of ``spec.disruption.budgets``, parsed."""

    nodes: str = DEFAULT_BUDGET_NODES
    schedule: str | None = None
    duration: timedelta | None = None
    reasons: frozenset[str] | None = None

    def __post_init__(self) -> None:
        node_limit(self.nodes, total=0)  # validates the count or percentage
        if (self.schedule is None) != (self.duration is None):
            raise BudgetError("budget: 'schedule' and 'duration' must be set together")
        if self.schedule is not None and not croniter.is_valid(self.schedule):
            raise BudgetError(f"budget: schedule {self.schedule!r} is not a valid cron expression")
        if self.reasons is not None:
            unknown = sorted(self.reasons - set(REASONS))
            if unknown:
                raise BudgetError(f"budget: unknown reasons {unknown} (expected some of {list(REASONS)})")

    def applies_to(self, reason: str) -> bool:
        return self.reasons is None or reason in self.reasons

    def active(self, now: datetime) -> bool:
        """Whether the budget is in force at ``now`` (always, without a schedule)."""
        window = self.window(now)
        return window is None or window[0] <= now < window[1]

    def window(self, now: datetime) -> tuple[datetime, datetime] | None:
        """The latest window ``[start, end)`` that started at or before ``now``; None without a schedule."""
        if self.schedule is None or self.duration is None:
            return None
        # croniter's get_prev is strictly before its start: nudge so a window opening at `now` counts
        start: datetime = croniter(self.schedule, now + timedelta(microseconds=1)).get_prev(datetime)
        return start, start + self.duration

    def describe(self) -> str:
        text = f"nodes={self.nodes}"
        if self.schedule is not None:
            text += f" schedule='{self.schedule}' duration={format_duration(self.duration)}"
        if self.reasons is not None:
            text += f" reasons={sorted(self.reasons)}"
        return text


def node_limit(nodes: str, *, total: int) -> int:
    """``nodes`` of a budget as a node count for a pool of ``total`` nodes (percentages round up)."""
    text = str(nodes).strip()
    try:
        if text.endswith("%"):
            percent = int(text[:-1])
            if not 0 <= percent <= 100:
                raise ValueError(text)
            return (total * percent + 99) // 100
        count = int(text)
    except ValueError:
        raise BudgetError(
            f"budget: nodes must be a count such as 5 or a percentage such as 10%, got {nodes!r}"
        ) from None
    if count < 0:
        raise BudgetError(f"budget: nodes must not be negative, got {nodes!r}")
    return count


DEFAULT_BUDGETS: Final = (Budget(),)
"""What a NodePool without ``spec.disruption.budgets`` gets: one budget of 10%."""


def parse_budgets(disruption: Mapping[str, Any] | None) -> tuple[Budget, ...]:
    """The budgets of a NodePool's ``spec.disruption`` (JSON). Raises :class:`BudgetError`."""
    raw = (disruption or {}).get("budgets")
    if raw is None:
        return DEFAULT_BUDGETS
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise BudgetError(f"budgets[{i}]: must be an object")
        duration = item.get("duration")
        reasons = item.get("reasons")
        try:
            out.append(
                Budget(
                    nodes=str(item.get("nodes", DEFAULT_BUDGET_NODES)),
                    schedule=item.get("schedule"),
                    duration=parse_duration(str(duration)) if duration is not None else None,
                    reasons=frozenset(str(r) for r in reasons) if reasons is not None else None,
                )
            )
        except (BudgetError, ValueError) as err:
            raise BudgetError(f"budgets[{i}]: {err}") from None
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Allowance:
    """How many more nodes of a pool may start being disrupted for a reason.

    ``allowed`` None means unlimited (no active budget applies). ``limit`` is the winning budget's
    node count, ``disrupting`` what already counts against it, ``budget`` the winning budget.
    """

    allowed: int | None
    limit: int | None
    disrupting: int
    total: int
    budget: Budget | None = None

    def permits(self, n: int = 1) -> bool:
        return self.allowed is None or self.allowed >= n

    def explain(self) -> str:
        if self.allowed is None:
            return "no disruption budget applies"
        assert self.budget is not None
        return (
            f"disruption budget ({self.budget.describe()}) allows {self.limit} of {self.total} nodes at once "
            f"and {self.disrupting} are already being disrupted or not Ready"
        )


def allowance(budgets: Sequence[Budget], *, reason: str, total: int, disrupting: int, now: datetime) -> Allowance:
    """The most restrictive active budget for ``reason``, applied to a pool of ``total`` nodes."""
    best: tuple[int, Budget] | None = None
    for budget in budgets:
        if not budget.applies_to(reason) or not budget.active(now):
            continue
        limit = node_limit(budget.nodes, total=total)
        if best is None or limit < best[0]:
            best = (limit, budget)
    if best is None:
        return Allowance(allowed=None, limit=None, disrupting=disrupting, total=total)
    limit, budget = best
    return Allowance(allowed=max(0, limit - disrupting), limit=limit, disrupting=disrupting, total=total, budget=budget)


@dataclass(frozen=True, slots=True)
class PoolCount:
    """The nodes a pool's budgets are computed over.

    ``total``: initialized nodes of the pool (NodeClaims still launching are not counted, so a
    replacement that is not up yet never inflates a percentage). ``disrupting``: of those, the ones
    being deleted, picked by a disruption command, or whose Node is not Ready.
    """

    total: int = 0
    disrupting: int = 0


def count_pool(nodes: Iterable[tuple[bool, bool]]) -> PoolCount:
    """Count ``(disrupting, not_ready)`` flags of a pool's initialized nodes."""
    total = disrupting = 0
    for is_disrupting, not_ready in nodes:
        total += 1
        if is_disrupting or not_ready:
            disrupting += 1
    return PoolCount(total=total, disrupting=disrupting)
