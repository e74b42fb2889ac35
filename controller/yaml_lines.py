"""The line reader: block YAML as go-yaml (``kubectl get -o yaml``) and PyYAML's block dumper print it,
read line by line, each distinct line parsed once (kubectl output repeats most of its lines).

:func:`load_lines` gives exactly what PyYAML's safe loader gives for the streams it takes (plain
scalars typed by PyYAML's own resolver and constructors) and raises :class:`NotLines` for anything
else (flow collections with content, anchors, aliases, tags, plain scalars over several lines,
tabs, a key twice, any error): `controller.serialization` then reads the stream through libyaml,
which gives the same objects and every error message. Pure.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable
from typing import Any, Final

import yaml

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_resolve: Callable[[Any, Any, Any, Any], Any] = yaml.resolver.BaseResolver.resolve
_SCALAR_NODE: Final = yaml.ScalarNode
_STR: Final = "tag:yaml.org,2002:str"
_PLAIN_TAGS: Final = frozenset("tag:yaml.org,2002:" + kind for kind in ("int", "float", "bool", "null", "timestamp"))
_NO_KEY: Final = object()

_LINE_CHARS: Final = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")
r"""A character the line reader leaves to libyaml: tabs, carriage returns and the other line
breaks (NEL, LS, PS), the byte-order mark, and what YAML does not allow in a stream -- every
character but ``\x20-\x7e``, ``\n``, ``\u00a0-\u2027``, ``\u202a-\ud7ff``,
``\ue000-\ufefe``, ``\uff00-\ufffd`` and ``\U00010000-\U0010ffff``, written as the few
ranges left out (that class compiles in a millisecond, the one of the ranges kept in about ten)."""


def _leaves_to_libyaml(line: str) -> bool:
    """Whether ``line`` holds a character of `_LINE_CHARS` (a printable ASCII line holds none:
    two flag checks instead of a search)."""
    if line.isascii() and line.isprintable():
        return False
    return _LINE_CHARS.search(line) is not None


_DOUBLE: Final = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"')
_SINGLE: Final = re.compile(r"'([^']*(?:''[^']*)*)'(?!')")
_DOUBLE_OPEN: Final = re.compile(r'([^"\\]*(?:\\.[^"\\]*)*)"')
_SINGLE_OPEN: Final = re.compile(r"([^']*(?:''[^']*)*)'(?!')")
_ESCAPE: Final = re.compile(r"\\(x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.?)")
_ESCAPES: Final = {
    "0": "\0",
    "a": "\x07",
    "b": "\x08",
    "t": "\t",
    "n": "\n",
    "v": "\x0b",
    "f": "\x0c",
    "r": "\r",
    "e": "\x1b",
    " ": " ",
    '"': '"',
    "/": "/",
    "\\": "\\",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}
# what a plain scalar may not start with (the indicators; `-`, `?` and `:` left to libyaml too)
_NOT_PLAIN_START: Final = frozenset("-?:,[]{}#&*!|>'\"%@`")
_LONGEST_KEY: Final = 1000  # YAML limits an implicit key to 1024 characters
_HEADERS: Final = {"|": ("|", None), "|-": ("|", False), "|+": ("|", True), ">": (">", None), ">-": (">", False)}
_HEADERS[">+"] = (">", True)

# line kinds: a key with its value on the line, a key whose value follows on the next lines, a key
# with `{}`, `[]`, a key with a scalar that goes on over the next lines; then the same after `- `
# without a key; a blank or comment line; `---`
_KEY, _KEY_OPEN, _KEY_MAP, _KEY_SEQ, _KEY_LONG = 0, 1, 2, 3, 4
_ITEM, _ITEM_OPEN, _ITEM_MAP, _ITEM_SEQ, _ITEM_LONG = 5, 6, 7, 8, 9
_BLANK, _DOCUMENT = 10, 11


class NotLines(Exception):
    """What the line reader leaves to libyaml (anything outside its subset, or an error)."""


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if len(code) > 1:
        point = int(code[1:], 16)
        if 0xD800 <= point <= 0xDFFF or point > 0x10FFFF:
            raise NotLines
        return chr(point)
    out = _ESCAPES.get(code)
    if out is None:
        raise NotLines
    return out


def _double(raw: str) -> str:
    return _ESCAPE.sub(_unescape, raw) if "\\" in raw else raw


class _LineReader:
    """Reads a stream line by line (see :func:`load_lines`); a line met again is not parsed again."""

    def __init__(self) -> None:
        self.loader = _Loader("")
        self.plain: dict[str, Any] = {}
        self.lines: dict[str, tuple[int, int, Any, Any, tuple[int, ...]]] = {}

    def scalar(self, text: str) -> Any:
        """A one-line plain scalar's value, as PyYAML's resolver and safe constructor make it."""
        try:
            return self.plain[text]
        except KeyError:
            pass
        first = text[:1]
        if (
            not first
            or (first in _NOT_PLAIN_START and (first != "-" or text[1:2] in ("", " ")))
            or " #" in text
            or ": " in text
            or text[-1] == ":"
        ):
            raise NotLines
        tag = _resolve(self.loader, _SCALAR_NODE, text, (True, False))
        if tag == _STR:
            value: Any = text
        elif tag in _PLAIN_TAGS:
            value = yaml.SafeLoader.yaml_constructors[tag](self.loader, yaml.ScalarNode(tag, text))
        else:
            raise NotLines
        self.plain[text] = value
        return value

    def value(self, text: str, *, item: bool) -> tuple[int, Any]:
        """The kind and value of what follows a key's `: ` (or a `- `), ``text`` stripped."""
        base = _ITEM if item else _KEY
        if not text or text[0] == "#":  # nothing (or a comment): the value is on the next lines
            return base + 1, None
        first = text[0]
        if first == '"' or first == "'":
            match = (_DOUBLE if first == '"' else _SINGLE).match(text)
            if match is None:  # it goes on over the next lines
                return base + 4, (first, text[1:])
            tail = text[match.end() :]
            if tail and not (tail[0] == " " and tail.lstrip(" ")[0] == "#"):
                raise NotLines
            raw = match.group(1)
            return base, (_double(raw) if first == '"' else raw.replace("''", "'"))
        if text == "{}":
            return base + 2, None
        if text == "[]":
            return base + 3, None
        header = _HEADERS.get(text)
        if header is not None:
            return base + 4, header
        comment = text.find(" #")
        if comment > 0:
            text = text[:comment].rstrip(" ")
        return base, self.scalar(text)

    def parse(self, line: str) -> tuple[int, int, Any, Any, tuple[int, ...]]:
        """(indentation, kind, key, value, the columns of its `- `) of a line (see the kinds)."""
        if _leaves_to_libyaml(line):
            raise NotLines
        content = line.lstrip(" ")
        start = len(line) - len(content)
        content = content.rstrip(" ")
        if not content or content[0] == "#":
            return start, _BLANK, None, None, ()
        if start == 0 and (content[:3] == "---" or content[:3] == "..."):
            if content == "---":
                return 0, _DOCUMENT, None, None, ()
            raise NotLines
        column = start
        dashes: tuple[int, ...] = ()
        while content[0] == "-" and (len(content) == 1 or content[1] == " "):
            dashes += (column,)
            rest = content[2:]
            if not rest:
                return start, _ITEM_OPEN, None, None, dashes
            if rest[0] == " ":
                raise NotLines  # more than one space after the dash: its item is further right
            column += 2
            content = rest
        # a key?
        first = content[0]
        key: Any
        if first == '"' or first == "'":
            match = (_DOUBLE if first == '"' else _SINGLE).match(content)
            end = match.end() if match is not None else 0
            if match is None or content[end : end + 1] != ":" or content[end + 1 : end + 2] not in ("", " "):
                if not dashes:
                    raise NotLines
                kind, value = self.value(content, item=True)
                if kind == _ITEM_LONG and value[0] == '"' and line[-1] == " ":
                    raise NotLines
                return start, kind, None, value, dashes
            raw = match.group(1)
            key = _double(raw) if first == '"' else raw.replace("''", "'")
            rest = content[end + 1 :].lstrip(" ")
        else:
            colon = content.find(": ")
            if colon < 0:
                if content[-1] != ":":
                    if not dashes:
                        raise NotLines
                    kind, value = self.value(content, item=True)
                    return start, kind, None, value, dashes
                colon = len(content) - 1
            end = colon
            if content[end - 1 : end] == " ":
                raise NotLines
            key = self.scalar(content[:colon])
            rest = content[colon + 2 :].lstrip(" ")
        if end > _LONGEST_KEY:
            raise NotLines
        kind, value = self.value(rest, item=False)
        if kind == _KEY_LONG and value[0] == '"' and line[-1] == " ":
            raise NotLines  # `\ ` then spaces at the end: an escaped space, not an escaped break
        return start, kind, key, value, dashes


def _quoted_lines(quote: str, first: str, lines: list[str], at: int, column: int) -> tuple[str, int]:
    """A quoted scalar that goes on over the next lines (folded as YAML folds them): its value and
    the index of the line after it. ``first`` is what follows the opening quote on its line; the
    next lines must be indented past ``column`` (the collection's) and not blank."""
    double = quote == '"'
    closing = _DOUBLE_OPEN if double else _SINGLE_OPEN
    parts: list[str] = []
    segment = first
    while True:
        # the segment ends its line: a break folds into a space, unless escaped (`\` at the end)
        stripped = segment.rstrip(" ")
        if double:
            slashes = len(stripped) - len(stripped.rstrip("\\"))
            if slashes % 2:
                if stripped != segment:
                    raise NotLines
                parts.append(_double(stripped[:-1]))
            else:
                parts.append(_double(stripped))
                parts.append(" ")
        else:
            parts.append(stripped.replace("''", "'"))
            parts.append(" ")
        if at >= len(lines):
            raise NotLines
        line = lines[at]
        at += 1
        text = line.lstrip(" ")
        if not text or len(line) - len(text) <= column or _leaves_to_libyaml(line):
            raise NotLines  # a blank line (a line break kept) or one not indented: left to libyaml
        match = closing.match(text)
        if match is None:
            segment = text
            continue
        tail = text[match.end() :].rstrip(" ")
        if tail and not (tail[0] == " " and tail.lstrip(" ")[0] == "#"):
            raise NotLines
        raw = match.group(1)
        parts.append(_double(raw) if double else raw.replace("''", "'"))
        return "".join(parts), at


def _block_lines(header: tuple[str, bool | None], lines: list[str], at: int, column: int) -> tuple[str, int]:
    """A literal (`|`) or folded (`>`) block scalar: its value and the index of the line after it.
    Its indentation is its first line's, which must be past ``column`` (the collection's)."""
    style, chomping = header
    folded = style == ">"
    if at >= len(lines):
        raise NotLines
    line = lines[at]
    text = line.lstrip(" ")
    indent = len(line) - len(text)
    if not text or indent <= column:
        raise NotLines  # leading blank lines, or an empty scalar: left to libyaml
    chunks: list[str] = []
    previous = ""
    breaks = 0
    total = len(lines)
    while at < total:
        line = lines[at]
        text = line.lstrip(" ")
        spaces = len(line) - len(text)
        if not text and spaces <= indent:
            breaks += 1
            at += 1
            continue
        if spaces < indent:
            break
        if _leaves_to_libyaml(line):
            raise NotLines
        content = line[indent:]
        if previous:
            if folded and previous[0] != " " and content[0] != " ":
                if not breaks:
                    chunks.append(" ")
            else:
                chunks.append("\n")
            if breaks:
                chunks.append("\n" * breaks)
        chunks.append(content)
        previous = content
        breaks = 0
        at += 1
    if chomping is not False:
        chunks.append("\n")
        if chomping:
            chunks.append("\n" * breaks)
    return "".join(chunks), at


def load_lines(text: str, shapes: list[tuple[int, int] | None] | None) -> list[Any]:
    """Every document of a stream of block YAML as go-yaml (``kubectl get -o yaml``) and PyYAML's
    block dumper write it, read line by line: block mappings and sequences (a sequence in a
    mapping at the key's indentation or deeper), plain scalars on one line, quoted scalars (over
    several lines too), literal and folded block scalars, empty ``{}`` and ``[]``, comments and
    ``---``. Raises :class:`NotLines` for anything else (flow collections with content, anchors,
    aliases, tags, directives, plain scalars over several lines, tabs, a key twice, an error...):
    the caller then reads the stream with libyaml, which gives the same objects and the errors."""
    if not isinstance(text, str):
        raise NotLines  # bytes (PyYAML reads them too): libyaml decodes them
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
        ended = True
    else:
        ended = False
    reader = _LineReader()
    # it builds no cycle: the cyclic collector would only re-scan what it builds
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _read_lines(reader, lines, ended, shapes)
    except (IndexError, ValueError, TypeError, yaml.YAMLError) as err:  # pragma: no cover - a safety net
        raise NotLines from err
    finally:
        if collecting:
            gc.enable()
        reader.loader.dispose()


def _read_lines(
    reader: _LineReader, lines: list[str], ended: bool, shapes: list[tuple[int, int] | None] | None
) -> list[Any]:
    memo = reader.lines
    closed = _NO_KEY
    seen = memo.get
    parse = reader.parse
    docs: list[Any] = []
    # the collection being filled: its column, itself, whether a mapping, and its open key (or
    # True: its open item) whose value comes on the next lines, else `closed`; the enclosing ones are
    # on `stack`. The outermost is the document's, which takes one item.
    holder: list[Any] = []
    target: Any = holder
    open_: Any = True
    column, mapping = -1, False
    stack: list[tuple[int, Any, bool, Any]] = []
    values = collections = height = 0
    explicit = False
    resume = 0
    last = len(lines) - 1
    for index, line in enumerate(lines):
        if index < resume:
            continue
        info = seen(line)
        if info is None:
            info = memo[line] = parse(line)
        start, kind, key, value, dashes = info
        if start == column and kind <= _KEY_OPEN and open_ is closed and mapping and not dashes:  # the next key
            if key in target:
                raise NotLines  # a key twice: libyaml's reader reports it
            if kind == _KEY:
                target[key] = value
                values += 1
            else:
                target[key] = None  # keeps the key's place; its value comes next
                open_ = key
            continue
        if kind >= _BLANK:
            if kind == _DOCUMENT:
                while stack:
                    if open_ is not closed:
                        values += 1
                        if mapping:
                            target[open_] = None
                        else:
                            target.append(None)
                    column, target, mapping, open_ = stack.pop()
                if explicit or holder:
                    docs.append(holder[0] if holder else None)
                    if shapes is not None:
                        shapes.append((height, values + collections - 1) if holder else (0, 0))
                holder = []
                column, target, mapping, open_ = -1, holder, False, True
                values = collections = height = 0
                explicit = True
            continue
        # close the collections this line is left of (an open key or item is null)
        while column > start:
            if open_ is not closed:
                values += 1
                if mapping:
                    target[open_] = None
                else:
                    target.append(None)
            column, target, mapping, open_ = stack.pop()
        for dash in dashes or ():
            if not mapping and column == dash:  # the next item of this sequence
                if open_ is not closed:
                    target.append(None)  # the previous one was empty
                    values += 1
                else:
                    open_ = True
                continue
            if open_ is closed or dash < column or (dash == column and not mapping):
                raise NotLines
            # a sequence as the open key's (or item's) value
            items: list[Any] = []
            if mapping:
                target[open_] = items
            else:
                target.append(items)
            values += 1
            collections += 1
            stack.append((column, target, mapping, closed))
            column, target, mapping, open_ = dash, items, False, True
            if len(stack) > height:
                height = len(stack)
        at = dashes[-1] + 2 if dashes else start
        if kind < _ITEM:  # a key at column `at`
            if column != at or not mapping:
                if not dashes and column == at and len(stack) > 1:  # a sequence at its key's column ends
                    if open_ is not closed:
                        target.append(None)
                        values += 1
                    column, target, mapping, open_ = stack.pop()
                if column != at or not mapping:
                    # a mapping as the open key's (or item's) value
                    if open_ is closed or at <= column:
                        raise NotLines
                    pairs: dict[Any, Any] = {}
                    if mapping:
                        target[open_] = pairs
                    else:
                        target.append(pairs)
                    values += 1
                    collections += 1
                    stack.append((column, target, mapping, closed))
                    column, target, mapping, open_ = at, pairs, True, closed
                    if len(stack) > height:
                        height = len(stack)
            if open_ is not closed:  # the previous key had no value: null
                target[open_] = None
                values += 1
                open_ = closed
            if key in target:
                raise NotLines
            values += 1
            if kind == _KEY:
                target[key] = value
            elif kind == _KEY_OPEN:
                target[key] = None  # keeps the key's place; its value comes next
                open_ = key
                values -= 1  # counted with the value
            elif kind == _KEY_LONG:
                if value[0] in "|>":
                    target[key], resume = _block_lines(value, lines, index + 1, at)
                    if resume > last and not ended:
                        raise NotLines  # no line break after the scalar's last line
                else:
                    target[key], resume = _quoted_lines(value[0], value[1], lines, index + 1, at)
            else:
                target[key] = {} if kind == _KEY_MAP else []
                collections += 1
                if len(stack) + 1 > height:
                    height = len(stack) + 1
        elif kind != _ITEM_OPEN:  # a value after the last `- `
            if not dashes or open_ is not True or mapping:  # pragma: no cover - the parser's kinds
                raise NotLines
            open_ = closed
            values += 1
            if kind == _ITEM:
                target.append(value)
            elif kind == _ITEM_LONG:
                if value[0] in "|>":
                    item, resume = _block_lines(value, lines, index + 1, column)
                    if resume > last and not ended:
                        raise NotLines
                else:
                    item, resume = _quoted_lines(value[0], value[1], lines, index + 1, column)
                target.append(item)
            else:
                target.append({} if kind == _ITEM_MAP else [])
                collections += 1
                if len(stack) + 1 > height:
                    height = len(stack) + 1
    while stack:
        if open_ is not closed:
            values += 1
            if mapping:
                target[open_] = None
            else:
                target.append(None)
        column, target, mapping, open_ = stack.pop()
    if explicit or holder:
        docs.append(holder[0] if holder else None)
        if shapes is not None:
            shapes.append((height, values + collections - 1) if holder else (0, 0))
    return docs
