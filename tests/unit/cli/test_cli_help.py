"""Every command's ``--help`` reads as plain text on a terminal: no reStructuredText markup, no
line wider than a terminal, and a description of what the command does."""

from __future__ import annotations

import argparse
import re

import pytest

from controller.cli import build_parser, main
from controller.helptext import for_terminal
from controller.scenario import MAX_DEPTH, MAX_PODS

MARKUP = re.compile(r"``|`[^`\n]+`|:[a-z]+:`|\.\. [a-z]+::")


def commands() -> list[str]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(sub.choices)


def help_of(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: joiner")
    return out


def test_there_are_commands_to_read() -> None:
    assert {"run", "plan", "forecast"} <= set(commands())


@pytest.mark.parametrize("command", ["", *commands()])
def test_help_is_plain_text_for_a_terminal(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = help_of([command, "--help"] if command else ["--help"], capsys)
    assert not MARKUP.search(out), MARKUP.search(out)
    assert max(len(line) for line in out.splitlines()) <= 100
    description = out.split("\n\n")[1]
    assert len(description.split()) >= 5, out


def test_plan_help_explains_the_scenario_without_markup(capsys: pytest.CaptureFixture[str]) -> None:
    out = help_of(["plan", "--help"], capsys)
    assert "joiner plan: run the solver offline" in out
    assert "* Pod - pending unless spec.nodeName is set" in out
    # the limits are written out as numbers for the user; they must stay the ones the code applies
    assert f"deeper than {MAX_DEPTH} levels" in out
    assert f"more than {MAX_PODS:,} pods" in " ".join(out.split())


def test_markup_is_removed() -> None:
    doc = """
        ``joiner plan`` calls :func:`solve` and :class:`~controller.scheduling.Plan` --
        see `the docs <https://x>`_ and `x`.
    """
    assert for_terminal(doc) == "joiner plan calls solve and Plan -\nsee the docs and x."
