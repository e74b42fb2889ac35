"""deploy/dashboards/joiner.json reads only metrics joiner serves and covers the areas operators ask for."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from controller.metrics_doc import load_all

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "dashboards" / "joiner.json"
SUFFIXES = ("_bucket", "_count", "_sum")


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def test_every_query_reads_metrics_joiner_declares() -> None:
    declared = set(load_all())
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            for name in re.findall(r"\bjoiner_[a-z_]+", target["expr"]):
                base = next(
                    (name[: -len(s)] for s in SUFFIXES if name.endswith(s) and name[: -len(s)] in declared), name
                )
                assert base in declared, f"{panel['title']}: {name} is not a metric joiner serves"


def test_the_areas_operators_ask_for_each_have_a_row_and_panels() -> None:
    panels = dashboard()["panels"]
    rows = [p["title"] for p in panels if p["type"] == "row"]
    assert rows == [
        "Capacity and cost",
        "Pending pods",
        "NodeClaim lifecycle",
        "Gangs",
        "Disruption",
        "Interruption",
        "Controller health",
    ]
    graphs = [p for p in panels if p["type"] != "row"]
    assert all(p["targets"] for p in graphs)
    assert len({p["id"] for p in panels}) == len(panels)
    assert all(p["datasource"]["uid"] == "${datasource}" for p in graphs)


def test_panels_do_not_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        g = panel["gridPos"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, panel["title"]
        taken |= cells
