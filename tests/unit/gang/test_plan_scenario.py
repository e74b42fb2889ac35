"""`joiner plan` shows gangs all or nothing (hack/scenarios/gangs.yaml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controller.cli import main

SCENARIO = Path(__file__).resolve().parents[3] / "hack" / "scenarios" / "gangs.yaml"


def test_a_gang_is_planned_whole_and_one_that_cannot_fit_gets_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(SCENARIO), "-o", "json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    claims = out["nodeClaims"]
    assert {c["gang"] for c in claims} == {"ml/pretrain"}
    assert sorted(p for c in claims for p in c["pods"]) == ["ml/pretrain-0", "ml/pretrain-1"]
    assert all(c["instanceType"] == "p5.48xlarge" for c in claims)
    assert len({c["zone"] for c in claims}) == 1
    unschedulable = {u["pod"]: u["reason"] for u in out["unschedulable"]}
    assert sorted(unschedulable) == [f"ml/sweep-{i}" for i in range(5)], "all of the gang, or nothing"
    assert all("gang 'ml/sweep'" in reason and "so none is" in reason for reason in unschedulable.values())
