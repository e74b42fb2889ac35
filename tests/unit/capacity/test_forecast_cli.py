"""`joiner forecast` offline, on a saved history ConfigMap: the profile, the decision, the errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from controller.capacity.history import History, serialize
from controller.cli import main

NOW = datetime(2026, 11, 23, 8, 40, tzinfo=UTC)  # a Monday


def saved(tmp_path: Path) -> Path:
    history = History(unit="gpu")
    t = NOW - timedelta(days=7)
    while t < NOW:
        history.record(16.0 if t.weekday() < 5 and 9 <= t.hour < 18 else 0.0, at=t)
        t += timedelta(hours=1)
    path = tmp_path / "history.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "data": serialize({"h100": history})}))
    return path


def test_the_profile_and_the_next_decision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = saved(tmp_path)
    assert main(["forecast", "--nodepool", "h100", "--history", str(path), "--at", "2026-11-23T08:40:00Z"]) == 0
    out = capsys.readouterr().out
    assert "NodePool h100: demand in GPUs; 168 hours of history" in out
    assert "pre-warm 16 GPUs, confidence 1.00" in out
    monday = next(line for line in out.splitlines() if line.startswith("Mon"))
    assert monday.split()[1:][9] == "16"  # 09:00
    assert monday.split()[1:][3] == "0"


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = saved(tmp_path)
    args = ["forecast", "--nodepool", "h100", "--history", str(path), "--at", "2026-11-23T08:40:00Z"]
    assert main([*args, "--current", "10", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decision"]["prewarm"] == 6
    assert data["decision"]["hour"] == "2026-11-23T09:00:00Z"
    assert data["profile"]["Sat"][10] == 0


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--nodepool", "other"], 1, "has no history for NodePool other"),
        (["--at", "tomorrow"], 2, "is not an ISO 8601 time"),
        (["--lead-time", "0s"], 1, "lead time must be longer than zero"),
    ],
)
def test_errors_say_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], code: int, message: str
) -> None:
    path = saved(tmp_path)
    args = ["forecast", "--nodepool", "h100", "--history", str(path), "--at", "2026-11-23T08:40:00Z"]
    for i in range(0, len(extra), 2):
        key = extra[i]
        if key in args:
            args[args.index(key) + 1] = extra[i + 1]
        else:
            args += extra[i : i + 2]
    assert main(args) == code
    assert message in capsys.readouterr().err


def test_a_corrupt_history_file_is_an_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"data": {"h100": '{"format": 1, "unit": "tpu"}'}}))
    assert main(["forecast", "--nodepool", "h100", "--history", str(path)]) == 1
    assert "unknown unit 'tpu'" in capsys.readouterr().err
