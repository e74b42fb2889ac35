#!/usr/bin/env python3
"""Renders the main panels of deploy/dashboards/joiner.json to a PNG, from a running Prometheus.

Each panel's queries run as range queries (Grafana's `$__rate_interval` and `$nodepool` filled in)
and are drawn with matplotlib, one subplot per panel; with `--marks`, the phases of a run are
numbered vertical lines on every panel, explained under the title (hack.dashboard_figure.py).
docs/dashboard.png is drawn by `make dashboard` (hack/dashboard_run.py: a run of about eight minutes
on the local KWOK cluster, with its real Prometheus). The e2e dashboard test runs it too, against
the Prometheus that scraped its own short run. Point it at any Prometheus that scrapes joiner:

    .venv/bin/python hack/render-dashboard.py --prometheus http://127.0.0.1:9090 --minutes 30 --out x.png
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
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
import matplotlib.transforms as mtransforms

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hack.dashboard_figure import (  # noqa: E402
    Mark,
    all_zero,
    caption,
    isolated,
    label_rows,
    parse_marks,
    with_gaps,
    within,
)

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
    "NodeClaims created, launched, initialized, terminated (per minute)",
    "Gangs by state",
    "Nodes disrupted by reason (per hour)",
    "Disruption candidates, blocked nodes, commands in progress",
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


def _time(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def render(
    *,
    prometheus: str,
    out: Path,
    start: float,
    end: float,
    titles: tuple[str, ...],
    rate_interval: str,
    marks: list[Mark] | None = None,
    title: str = "",
) -> int:
    """Draws the panels; returns how many series were drawn."""
    shown = within(marks or [], start, end)
    rows_of_marks = label_rows(shown, start=start, end=end)
    notes = caption(shown, start=start)
    by_title = {p["title"]: p for p in panels(json.loads(DASHBOARD.read_text()))}
    missing = [t for t in titles if t not in by_title]
    if missing:
        raise SystemExit(f"no such panels in {DASHBOARD}: {missing}")
    cols = 2
    rows = math.ceil(len(titles) / cols)
    head = 0.35 + 0.2 * len(notes)  # inches above the panels: the title and the marks' caption
    fig, axes = plt.subplots(rows, cols, figsize=(14, 3.2 * rows + head), squeeze=False)
    step = max(1.0, (end - start) / 240)
    drawn = 0
    for ax, panel_title in zip(axes.flat, titles, strict=False):
        panel = by_title[panel_title]
        zeros = series_drawn = 0
        lowest = 0.0
        for target in panel["targets"]:
            expr = fill(target["expr"], rate_interval=rate_interval)
            for series in query_range(prometheus, expr, start=start, end=end, step=step):
                points = with_gaps([(float(t), float(v)) for t, v in series["values"]], step=step)
                if all(math.isnan(v) for _, v in points):
                    continue
                name = legend(target.get("legendFormat", ""), series["metric"])
                if all_zero(points):  # drawn, but named only in the note: a legend of zeros says little
                    zeros += 1
                    name = "_" + name
                line = ax.plot([_time(t) for t, _ in points], [v for _, v in points], label=name, linewidth=1.2)[0]
                dots = isolated(points)
                if dots:
                    xs, ys = [_time(t) for t, _ in dots], [v for _, v in dots]
                    ax.plot(xs, ys, "o", markersize=3, color=line.get_color())
                lowest = min(lowest, *(v for _, v in points if not math.isnan(v)))
                series_drawn += 1
        drawn += series_drawn
        if series_drawn and zeros == series_drawn:
            ax.set_ylim(-0.05, 1)  # a flat 0 on the floor, not in the middle of a +-0.05 axis
        elif lowest >= 0:
            ax.set_ylim(bottom=0)
        if zeros:
            ax.text(0.99, 0.08, f"{zeros} series at 0 throughout", transform=ax.transAxes, fontsize=7, ha="right")
        on_panel = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
        for number, (mark, row) in enumerate(zip(shown, rows_of_marks, strict=True), start=1):
            x = datetime.fromtimestamp(mark.at, tz=UTC)
            ax.axvline(x, color="0.35", linestyle="--", linewidth=0.8, zorder=0)
            ax.text(x, 0.97 - 0.1 * row, f" {number}", transform=on_panel, fontsize=7, color="0.2", va="top")
        ax.set_xlim(datetime.fromtimestamp(start, tz=UTC), datetime.fromtimestamp(end, tz=UTC))
        ax.set_title(panel_title, fontsize=10)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))  # type: ignore[no-untyped-call]
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        handles = ax.get_legend_handles_labels()[0]
        if handles:
            ax.legend(fontsize=6, loc="best", ncol=1 + len(handles) // 8, framealpha=0.8)
    for ax in list(axes.flat)[len(titles) :]:
        ax.set_visible(False)
    height = fig.get_figheight()
    fig.suptitle(
        title or "joiner dashboard (deploy/dashboards/joiner.json), rendered by hack/render-dashboard.py",
        fontsize=11,
        y=1 - 0.08 / height,
        va="top",
    )
    for i, line in enumerate(notes):
        fig.text(0.01, 1 - (0.35 + 0.2 * i) / height, line, fontsize=8, va="top", family="monospace")
    fig.tight_layout(rect=(0, 0, 1, 1 - head / height))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return drawn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prometheus", required=True, help="base URL of a Prometheus that scrapes joiner")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument("--minutes", type=float, default=10.0, help="how far back to draw (without --start)")
    parser.add_argument("--start", type=float, help="the window's start, Unix seconds (instead of --minutes)")
    parser.add_argument("--end", type=float, help="the window's end, Unix seconds (default: now)")
    parser.add_argument("--rate-interval", default="1m", help="what $__rate_interval stands for")
    parser.add_argument("--marks", type=Path, help="JSON list of {at, label}: phases drawn as lines")
    parser.add_argument("--title", default="", help="the figure's title")
    args = parser.parse_args()
    end = args.end if args.end is not None else time.time()
    start = args.start if args.start is not None else end - args.minutes * 60
    if start >= end:
        parser.error(f"the window starts ({start}) after it ends ({end})")
    drawn = render(
        prometheus=args.prometheus.rstrip("/"),
        out=args.out,
        start=start,
        end=end,
        titles=MAIN_PANELS,
        rate_interval=args.rate_interval,
        marks=parse_marks(args.marks.read_text()) if args.marks else None,
        title=args.title,
    )
    print(f"{args.out}: {drawn} series")
    return 0 if drawn else 1


if __name__ == "__main__":
    raise SystemExit(main())
