"""A NodePool's demand history, kept for the forecast: one peak per hour, bounded, serializable. Pure.

Demand is what the pool's workload asks for: the GPUs (or, in a pool without GPUs, the CPUs)
requested by the pods running on its nodes and the pending pods planned onto its NodeClaims. Each
sample raises the peak of its hour. Only the last ``MAX_AGE`` (eight weeks, the longest lookback
that is honoured) is kept, so the stored form stays a few kilobytes per pool: a JSON object in a
ConfigMap, which survives restarts of the controller. Unreadable stored data is reported and
replaced by an empty history; it never stops the controller.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from controller.capacity.forecast import hour_of

MAX_AGE: Final = timedelta(weeks=8)
FORMAT: Final = 1


class HistoryError(ValueError):
    """Stored history that cannot be read."""


@dataclass(slots=True)
class History:
    """Peak demand per UTC hour; ``unit`` is ``gpu`` or ``cpu``."""

    unit: str = "gpu"
    peaks: dict[datetime, float] = field(default_factory=dict)

    def record(self, demand: float, *, at: datetime) -> None:
        if not math.isfinite(demand) or demand < 0:
            return
        hour = hour_of(at)
        self.peaks[hour] = max(demand, self.peaks.get(hour, 0.0))
        self.trim(now=at)

    def trim(self, *, now: datetime) -> None:
        oldest = hour_of(now) - MAX_AGE
        for hour in [h for h in self.peaks if h < oldest]:
            del self.peaks[hour]

    def to_json(self) -> str:
        base = min(self.peaks) if self.peaks else None
        body: dict[str, Any] = {"format": FORMAT, "unit": self.unit}
        if base is not None:
            body["start"] = base.strftime("%Y-%m-%dT%H:00:00Z")
            body["hours"] = {
                str(int((h - base) / timedelta(hours=1))): round(v, 3) for h, v in sorted(self.peaks.items())
            }
        return json.dumps(body, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> History:
        try:
            body = json.loads(text)
            if not isinstance(body, Mapping) or body.get("format") != FORMAT:
                raise HistoryError(
                    f"unknown history format {body.get('format') if isinstance(body, Mapping) else body!r}"
                )
            unit = str(body.get("unit") or "gpu")
            if unit not in ("gpu", "cpu"):
                raise HistoryError(f"unknown unit {unit!r}")
            out = History(unit=unit)
            if "start" in body:
                start = datetime.strptime(str(body["start"]), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
                for offset, value in dict(body.get("hours") or {}).items():
                    number = float(value)
                    if not math.isfinite(number) or number < 0:
                        raise HistoryError(f"hour {offset}: {value!r} is not a demand")
                    out.peaks[start + timedelta(hours=int(offset))] = number
            return out
        except HistoryError:
            raise
        except (ValueError, TypeError, AttributeError) as err:
            raise HistoryError(f"unreadable history: {err}") from err


def serialize(histories: Mapping[str, History]) -> dict[str, str]:
    """ConfigMap data: one key per NodePool."""
    return {pool: h.to_json() for pool, h in sorted(histories.items())}


def deserialize(data: Mapping[str, str]) -> tuple[dict[str, History], list[str]]:
    """The histories in a ConfigMap's data, and a problem per key that could not be read."""
    out: dict[str, History] = {}
    problems: list[str] = []
    for pool, text in data.items():
        try:
            out[pool] = History.from_json(text)
        except HistoryError as err:
            problems.append(f"NodePool {pool}: {err}")
    return out, problems
