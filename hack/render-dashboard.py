#!/usr/bin/env python3
"""Renders the main panels of deploy/dashboards/joiner.json to a PNG, from a running Prometheus.

Each panel's queries run as range queries (Grafana's `$__rate_interval` and `$nodepool` filled in)
and are drawn with matplotlib, one subplot per panel. The e2e dashboard test runs it against the
Prometheus that scraped its joiner; to regenerate docs/dashboard.png:

    JOINER_DASHBOARD_PNG=docs/dashboard.png .venv/bin/pytest tests/e2e/test_dashboard.py

or point it at any Prometheus that scrapes joiner:

    .venv/bin/python hack/render-dashboard.py --prometheus http://127.0.0.1:9090 --minutes 30 --out x.png
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "dashboards" / "joiner.json"
MAIN_PANELS = (
    "Spend by NodePool and capacity type ($/h)",
    "Nodes by NodePool and capacity type",
    "NodePool usage of its limits",
    "Spend against budget by NodePool ($/h)",
    "Warm buffer wanted and ready by NodePool",
    "Pods waiting for capacity",
    "Pod startup latency (creation to Running), p50 / p90",
    "NodeClaim startup p90 by step",
    "Gangs by state",
    "Nodes disrupted by reason (per hour)",
    "Interruption messages and actions (per hour)",
    "Reconcile errors and loop restarts (per minute)",
)


def fill(expr: str, *, rate_interval: str, nodepool: str = ".*") -> str:
    """A panel query with the dashboard's variables replaced, the way Grafana sends it."""
    return expr.replace("$__rate_interval", rate_interval).replace("$nodepool", nodepool)


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p.get("type") != "row"]


def legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip() or "value"


def query_range(url: str, expr: str, *, start: float, end: float, step: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=30) as resp:
        body = json.loads(resp.read())
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def render(*, prometheus: str, out: Path, start: float, end: float, titles: tuple[str, ...], rate_interval: str) -> int:
    """Draws the panels; returns how many series were drawn."""
    by_title = {p["title"]: p for p in panels(json.loads(DASHBOARD.read_text()))}
    missing = [t for t in titles if t not in by_title]
    if missing:
        raise SystemExit(f"no such panels in {DASHBOARD}: {missing}")
    cols = 2
    rows = math.ceil(len(titles) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(14, 3.2 * rows), squeeze=False)
    step = max(1.0, (end - start) / 240)
    drawn = 0
    for ax, title in zip(axes.flat, titles, strict=False):
        panel = by_title[title]
        for target in panel["targets"]:
            expr = fill(target["expr"], rate_interval=rate_interval)
            for series in query_range(prometheus, expr, start=start, end=end, step=step):
                points = [(float(t), float(v)) for t, v in series["values"] if not math.isnan(float(v))]
                if not points:
                    continue
                xs = [datetime.fromtimestamp(t, tz=UTC) for t, _ in points]
                ax.plot(xs, [v for _, v in points], label=legend(target.get("legendFormat", ""), series["metric"]))
                drawn += 1
        ax.set_title(title, fontsize=10)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))  # type: ignore[no-untyped-call]
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        handles = ax.get_legend_handles_labels()[0]
        if handles:
            ax.legend(fontsize=6, loc="upper left", ncol=1 + len(handles) // 8)
    for ax in list(axes.flat)[len(titles) :]:
        ax.set_visible(False)
    fig.suptitle("joiner dashboard (deploy/dashboards/joiner.json), rendered by hack/render-dashboard.py", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return drawn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prometheus", required=True, help="base URL of a Prometheus that scrapes joiner")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument("--minutes", type=float, default=10.0, help="how far back to draw")
    parser.add_argument("--rate-interval", default="1m", help="what $__rate_interval stands for")
    args = parser.parse_args()
    end = time.time()
    drawn = render(
        prometheus=args.prometheus.rstrip("/"),
        out=args.out,
        start=end - args.minutes * 60,
        end=end,
        titles=MAIN_PANELS,
        rate_interval=args.rate_interval,
    )
    print(f"{args.out}: {drawn} series")
    return 0 if drawn else 1


if __name__ == "__main__":
    raise SystemExit(main())
