"""`joiner run`'s settings from the environment: every flag also as a variable, validated by one
pydantic model built from the command's own flags, so the two can never disagree.

Names are the flag's in upper case (``--batch-max-duration`` → ``BATCH_MAX_DURATION``), except where
Karpenter or the platform has a name users already know (``HEALTH_PROBE_PORT``, ``KUBECONFIG``,
``AWS_REGION``, ``AWS_ENDPOINT_URL``). Durations take Go's form (``10s``, ``1m30s``, ``1.5h``,
``250ms``) or plain seconds, for variables and flags alike. Precedence: a flag given on the command
line, then the variable, then the default.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model

RENAMED: Final = {
    "health_port": "HEALTH_PROBE_PORT",
    "kubeconfig": "KUBECONFIG",
    "region": "AWS_REGION",
    "aws_endpoint_url": "AWS_ENDPOINT_URL",
}
DURATION_METAVAR: Final = "DURATION"
_GO_DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_TRUE: Final = {"1", "true", "yes", "on"}
_FALSE: Final = {"0", "false", "no", "off"}


class SettingsError(ValueError):
    """Environment variables `joiner run` cannot use; the message names each one and why."""


def parse_seconds(text: str | float) -> float:
    """``10s``, ``1m30s``, ``1.5h``, ``250ms`` (Go's durations) or plain seconds → seconds (≥ 0)."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        raw = text.strip()
        try:
            value = float(raw)
        except ValueError:
            rest, value = raw, 0.0
            if not rest:
                raise ValueError("an empty duration (expected e.g. 10s, 1m30s, 15m, or seconds)") from None
            while rest:
                m = _GO_DURATION.match(rest)
                if m is None:
                    raise ValueError(
                        f"{text!r} is not a duration (expected e.g. 10s, 1m30s, 15m, or seconds)"
                    ) from None
                value += float(m.group(1)) * _UNITS[m.group(2)]
                rest = rest[m.end() :]
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} is not a duration of zero or more")
    return value


def _boolean(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    word = str(text).strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false, 1/0, yes/no, on/off)")


Duration = Annotated[float, BeforeValidator(parse_seconds)]
Boolean = Annotated[bool, BeforeValidator(_boolean)]


def env_name(dest: str) -> str:
    return RENAMED.get(dest, dest.upper())


def _field_type(action: argparse.Action) -> Any:
    if isinstance(action, argparse.BooleanOptionalAction):
        return Boolean
    if action.choices:
        return Literal[tuple(action.choices)]
    if action.metavar == DURATION_METAVAR:
        return Duration
    if action.type is int:
        return Annotated[int, Field(ge=0)]
    if action.type is float:
        return Annotated[float, Field(allow_inf_nan=False)]
    return str


def settings_model(parser: argparse.ArgumentParser) -> type[BaseModel]:
    """One pydantic model with a field per flag, named by its environment variable."""
    fields: dict[str, Any] = {}
    for action in parser._actions:
        if action.dest in ("help", "handler") or not action.option_strings:
            continue
        fields[action.dest] = (_field_type(action) | None, Field(default=None, alias=env_name(action.dest)))
    return create_model("JoinerRunEnvironment", __config__=ConfigDict(extra="ignore", populate_by_name=False), **fields)


def from_environment(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> dict[str, Any]:
    """The flags' values given by environment variables (only those set), or SettingsError."""
    model = settings_model(parser)
    names = {env_name(a.dest) for a in parser._actions if a.option_strings and a.dest != "help"}
    given = {k: v for k, v in environ.items() if k in names and v != ""}
    try:
        parsed = model.model_validate(given)
    except ValidationError as err:
        problems = []
        for e in err.errors():
            name = str(e["loc"][0]) if e["loc"] else "?"
            problems.append(f"{name}={given.get(name, '')!r}: {e['msg']}")
        raise SettingsError("; ".join(problems)) from None
    return {k: v for k, v in parsed.model_dump().items() if v is not None}


def duration(text: str) -> float:
    """argparse's type for duration flags: Go durations or seconds, with argparse's error style."""
    try:
        return parse_seconds(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def use_durations(parser: argparse.ArgumentParser) -> None:
    """Flags given in seconds accept Go durations too (``--batch-max-duration 10s``)."""
    for action in parser._actions:
        if action.metavar == "SECONDS":
            action.type = duration
            action.metavar = DURATION_METAVAR


def markdown_table(parser: argparse.ArgumentParser) -> str:
    """The settings reference of docs/settings.md: flag, variable, default, meaning."""
    rows = ["| flag | environment variable | default | meaning |", "|---|---|---|---|"]
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help", "handler"):
            continue
        flag = " / ".join(f"`{o}`" for o in action.option_strings)
        default = action.default
        shown = "" if default is None or default is argparse.SUPPRESS else f"`{default}`"
        if action.metavar == DURATION_METAVAR and isinstance(default, float):
            shown = f"`{default:g}s`"
        meaning = (action.help or "").replace("|", "\\|").replace("%%", "%")
        if action.choices:
            meaning = (meaning + " " if meaning else "") + "one of " + ", ".join(f"`{c}`" for c in action.choices)
        if action.metavar == DURATION_METAVAR:
            meaning = (meaning + " " if meaning else "") + "(a duration: `10s`, `1m30s`, or seconds)"
        rows.append(f"| {flag} | `{env_name(action.dest)}` | {shown} | {meaning.strip()} |")
    return "\n".join(rows)
