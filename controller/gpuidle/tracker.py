"""Which nodes' GPUs have stayed idle long enough: pure bookkeeping over utilization samples.

Every poll hands the tracker one sample per node: the highest utilization (percent) any of the
node's GPUs reached since the previous poll. A node is *idle* once every sample for a whole
``window`` stayed below ``threshold``. A sample at or above the threshold, or a poll without a
sample for the node, starts its window again: a node is never called idle on missing data. When
the utilization source fails for longer than a window, everything is forgotten for the same reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

DEFAULT_THRESHOLD_PERCENT: Final = 20.0
DEFAULT_WINDOW: Final = timedelta(minutes=10)


class IdlePolicyError(ValueError):
    """Settings the tracker cannot work with."""


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """Below ``threshold_percent`` on every GPU for ``window`` makes a node idle."""

    threshold_percent: float = DEFAULT_THRESHOLD_PERCENT
    window: timedelta = DEFAULT_WINDOW

    def __post_init__(self) -> None:
        if not math.isfinite(self.threshold_percent) or not 0 < self.threshold_percent <= 100:
            raise IdlePolicyError(
                f"the idle GPU threshold must be a percentage in (0, 100], got {self.threshold_percent}"
            )
        if self.window <= timedelta(0):
            raise IdlePolicyError(f"the idle GPU window must be longer than zero, got {self.window}")


@dataclass(frozen=True, slots=True)
class IdleNode:
    """A node whose GPUs stayed below the threshold from ``since``; ``peak``: the highest sample since."""

    node: str
    since: datetime
    peak: float


@dataclass(slots=True)
class _Quiet:
    since: datetime
    peak: float


class IdleTracker:
    """Remembers, per node, since when its GPUs have stayed below the threshold."""

    def __init__(self, policy: IdlePolicy) -> None:
        self.policy = policy
        self._quiet: dict[str, _Quiet] = {}
        self._last_ok: datetime | None = None

    def observe(self, samples: Mapping[str, float], *, now: datetime) -> None:
        """One successful poll: ``samples`` maps node name to its GPUs' highest utilization (percent)."""
        self._last_ok = now
        for node in [n for n in self._quiet if n not in samples]:
            del self._quiet[node]
        for node, value in samples.items():
            if not math.isfinite(value) or value >= self.policy.threshold_percent:
                self._quiet.pop(node, None)
                continue
            quiet = self._quiet.get(node)
            if quiet is None:
                self._quiet[node] = _Quiet(since=now, peak=value)
            else:
                quiet.peak = max(quiet.peak, value)

    def failed(self, *, now: datetime) -> None:
        """A poll failed: keep what is known unless nothing was learnt for a whole window."""
        if self._last_ok is None or now - self._last_ok >= self.policy.window:
            self._quiet.clear()

    def idle(self, *, now: datetime) -> dict[str, IdleNode]:
        """The nodes idle at ``now``."""
        window = self.policy.window
        return {
            node: IdleNode(node=node, since=q.since, peak=q.peak)
            for node, q in self._quiet.items()
            if now - q.since >= window
        }

    def quiet_since(self, node: str) -> datetime | None:
        """Since when the node has stayed below the threshold (idle or not yet), or None."""
        quiet = self._quiet.get(node)
        return None if quiet is None else quiet.since
