"""`joiner run` settings from the environment: each variable, Go durations, precedence, clear errors,
and the reference in docs/settings.md generated from the flags."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.cli import build_parser, main
from controller.envsettings import SettingsError, from_environment, markdown_table, parse_seconds, settings_model

ROOT = Path(__file__).resolve().parents[3]


def run_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = build_parser()
    run = parser.get_default("run_parser")
    assert isinstance(run, argparse.ArgumentParser)
    return parser, run


def parse(env: dict[str, str], *flags: str) -> argparse.Namespace:
    parser, run = run_parser()
    run.set_defaults(**from_environment(run, env))
    return parser.parse_args(["run", *flags])


@pytest.mark.parametrize(
    ("env", "dest", "value"),
    [
        ({"BATCH_MAX_DURATION": "15s"}, "batch_max_duration", 15.0),
        ({"BATCH_IDLE_DURATION": "500ms"}, "batch_idle_duration", 0.5),
        ({"GANG_TIMEOUT": "1h30m"}, "gang_timeout", 5400.0),
        ({"LAUNCH_TIMEOUT": "120"}, "launch_timeout", 120.0),
        ({"CLUSTER_NAME": "gpu-prod"}, "cluster_name", "gpu-prod"),
        ({"INTERRUPTION_QUEUE": "https://sqs.example/q"}, "interruption_queue", "https://sqs.example/q"),
        ({"LOG_LEVEL": "debug"}, "log_level", "debug"),
        ({"METRICS_PORT": "9090"}, "metrics_port", 9090),
        ({"HEALTH_PROBE_PORT": "9091"}, "health_port", 9091),
        ({"LEADER_ELECT": "false"}, "leader_elect", False),
        ({"NOMINATE": "no"}, "nominate", False),
        ({"RESERVE": "false"}, "reserve", False),
        ({"PROVIDER": "aws"}, "provider", "aws"),
        ({"AWS_REGION": "us-west-2"}, "region", "us-west-2"),
        ({"GPU_IDLE_THRESHOLD": "12.5"}, "gpu_idle_threshold", 12.5),
        ({"PROMETHEUS_URL": "http://prom:9090"}, "prometheus_url", "http://prom:9090"),
    ],
)
def test_each_setting_comes_from_its_variable(env: dict[str, str], dest: str, value: Any) -> None:
    assert getattr(parse(env), dest) == value


def test_a_flag_beats_the_variable_and_the_variable_beats_the_default() -> None:
    args = parse({"BATCH_MAX_DURATION": "20s", "LOG_LEVEL": "debug"}, "--batch-max-duration", "1m30s")
    assert args.batch_max_duration == 90.0  # the flag, in Go's form
    assert args.log_level == "debug"  # the variable
    assert args.gc_interval == 60.0  # the default
    assert parse({}).batch_max_duration == 10.0
    assert parse({"BATCH_MAX_DURATION": ""}).batch_max_duration == 10.0  # empty means unset


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BATCH_MAX_DURATION": "10x"}, "BATCH_MAX_DURATION='10x'"),
        ({"BATCH_MAX_DURATION": "-5s"}, "BATCH_MAX_DURATION='-5s'"),
        ({"LOG_LEVEL": "verbose"}, "LOG_LEVEL='verbose'"),
        ({"METRICS_PORT": "-1"}, "METRICS_PORT='-1'"),
        ({"METRICS_PORT": "eighty"}, "METRICS_PORT='eighty'"),
        ({"LEADER_ELECT": "maybe"}, "is not a boolean"),
        ({"GPU_IDLE_THRESHOLD": "nan"}, "GPU_IDLE_THRESHOLD='nan'"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    _, run = run_parser()
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        from_environment(run, env)


def test_every_bad_variable_is_named_at_once_and_nothing_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BATCH_MAX_DURATION", "soon")
    monkeypatch.setenv("LOG_LEVEL", "loud")
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("joiner run: environment: ")
    assert "BATCH_MAX_DURATION='soon'" in err
    assert "LOG_LEVEL='loud'" in err


def test_a_bad_duration_flag_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    parser, _ = run_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--gang-timeout", "ten minutes"])
    assert "'ten minutes' is not a duration" in capsys.readouterr().err


def test_every_flag_has_a_variable_in_the_one_model() -> None:
    _, run = run_parser()
    model = settings_model(run)
    flags = {a.dest for a in run._actions if a.option_strings and a.dest != "help"}
    assert set(model.model_fields) == flags


def test_docs_settings_is_generated_from_the_flags() -> None:
    _, run = run_parser()
    doc = (ROOT / "docs" / "settings.md").read_text()
    assert markdown_table(run) in doc, "docs/settings.md is out of date: regenerate its table from markdown_table()"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("1m30s", 90.0), ("15m", 900.0), ("1h", 3600.0), ("1.5h", 5400.0), ("250ms", 0.25), ("7", 7.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_seconds(text) == pytest.approx(seconds)


@given(h=st.integers(0, 100), m=st.integers(0, 59), s=st.integers(0, 59))
def test_go_duration_parts_add_up(h: int, m: int, s: int) -> None:
    assert parse_seconds(f"{h}h{m}m{s}s") == h * 3600 + m * 60 + s
