"""Help text for a terminal: docstrings are written in reStructuredText for the source reader;
``--help`` shows them without the markup."""

from __future__ import annotations

import re
import textwrap
from typing import Final

_ROLE: Final = re.compile(r":[a-z]+:`~?([^`]+)`")  # :func:`solve`, :class:`~x.Y`
_LITERAL: Final = re.compile(r"``([^`]+)``")  # ``joiner plan``
_INTERPRETED: Final = re.compile(r"(?<![\w`])`([^`]+)`(?![\w`])")  # `x`
_LINK: Final = re.compile(r"`([^`<]+?)\s*<[^>]+>`_")  # `text <url>`_
_DASH: Final = re.compile(r" --(\s)")


def for_terminal(doc: str) -> str:
    """``doc`` (a docstring) as plain text: roles, literals and links lose their markup, the common
    indentation goes, and ``--`` becomes a dash."""
    text = textwrap.dedent(doc).strip("\n")
    text = _LINK.sub(r"\1", text)
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(0).find("~") >= 0 else m.group(1), text)
    text = _LITERAL.sub(r"\1", text)
    text = _INTERPRETED.sub(r"\1", text)
    return _DASH.sub(r" -\1", text)
