"""TOML out, for Bottlerocket's settings. Pure.

Python reads TOML (``tomllib``) but does not write it; this writes what ``tomllib`` reads back the
same: tables, strings, integers, floats, booleans, dates and times, arrays (of tables too, inline).
Keys are quoted unless bare; strings are basic strings with TOML's escapes.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping
from typing import Any, Final

_BARE: Final = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _key(key: str) -> str:
    return key if _BARE.fullmatch(key) else _string(key)


def _string(value: str) -> str:
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(str(k))} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write a {type(value).__name__} as TOML")


def _table(path: list[str], table: Mapping[str, Any], out: list[str]) -> None:
    scalars = [(k, v) for k, v in table.items() if not isinstance(v, Mapping)]
    tables = [(k, v) for k, v in table.items() if isinstance(v, Mapping)]
    if path and (scalars or not tables):
        out.append("[" + ".".join(_key(p) for p in path) + "]")
    for key, value in scalars:
        out.append(f"{_key(str(key))} = {_value(value)}")
    if path and (scalars or not tables):
        out.append("")
    for key, value in tables:
        _table([*path, str(key)], value, out)


def dumps(document: Mapping[str, Any]) -> str:
    """``document`` as TOML text."""
    out: list[str] = []
    _table([], document, out)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"
