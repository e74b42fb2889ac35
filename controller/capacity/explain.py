"""`joiner forecast`: the learned weekly profile of a NodePool, the next pre-warm decision and its
confidence, as text or JSON. Pure formatting; the command reads the history (cluster or file)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from api.v1.types import format_duration
from controller.capacity.forecast import ForecastConfig, Prewarm, decide, weekly_profile
from controller.capacity.history import History

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def explain(pool: str, history: History, *, now: datetime, current: float, config: ForecastConfig) -> dict[str, Any]:
    """Everything the command shows, as plain data."""
    decision: Prewarm = decide(history.peaks, now=now, current=current, config=config)
    hours = sorted(history.peaks)
    return {
        "nodepool": pool,
        "unit": history.unit,
        "now": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "history": {
            "hours": len(hours),
            "first": hours[0].strftime("%Y-%m-%dT%H:00:00Z") if hours else None,
            "last": hours[-1].strftime("%Y-%m-%dT%H:00:00Z") if hours else None,
        },
        "settings": {
            "lookback": format_duration(config.lookback),
            "leadTime": format_duration(config.lead_time),
            "confidence": config.confidence,
        },
        "profile": dict(zip(DAYS, weekly_profile(history.peaks, now=now, lookback=config.lookback), strict=True)),
        "decision": {
            "prewarm": decision.prewarm,
            "predicted": decision.predicted,
            "current": decision.current,
            "confidence": decision.confidence,
            "hour": decision.hour.strftime("%Y-%m-%dT%H:00:00Z") if decision.hour else None,
            "acted": decision.acted,
            "why": decision.why,
        },
    }


def to_text(data: dict[str, Any]) -> str:
    unit = "GPUs" if data["unit"] == "gpu" else "CPUs"
    hist = data["history"]
    lines = [
        f"NodePool {data['nodepool']}: demand in {unit}; {hist['hours']} hours of history"
        + (f" ({hist['first']} .. {hist['last']})" if hist["hours"] else ""),
        f"lookback {data['settings']['lookback']}, lead time {data['settings']['leadTime']}, "
        f"confidence threshold {data['settings']['confidence']:.2f}",
        "",
        f"expected demand for the coming week ({unit}, UTC hours):",
        "      " + " ".join(f"{h:>4}" for h in range(24)),
    ]
    for day, row in data["profile"].items():
        lines.append(f"{day:<5} " + " ".join(f"{v:>4g}" for v in row))
    d = data["decision"]
    verdict = f"pre-warm {d['prewarm']} {unit}" if d["acted"] else "nothing to pre-warm"
    lines += ["", f"next decision at {data['now']}: {verdict}, confidence {d['confidence']:.2f}: {d['why']}"]
    return "\n".join(lines)


def to_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True)
