"""The line reader (block YAML as ``kubectl get -o yaml`` and PyYAML's block dumper print it) gives
what PyYAML's safe loader gives, and the same errors as the libyaml reader it hands anything else to."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import serialization, yaml_lines
from controller.serialization import DuplicateKeyError, load_all_yaml

PURE = yaml.SafeLoader
FAST = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@contextmanager
def _without_lines() -> Iterator[None]:
    def refuse(*_: Any) -> Any:
        raise yaml_lines.NotLines

    with mock.patch.object(serialization, "load_lines", refuse):
        yield


def _outcome(text: str, *, strict: bool = True, lines: bool = True) -> tuple[str, list[Any]]:
    """What load_all_yaml gives (repr of the documents, or the error) and the shapes."""
    shapes: list[tuple[int, int] | None] = []
    try:
        if lines:
            docs = load_all_yaml(text, shapes=shapes, strict=strict)
        else:
            with _without_lines():
                docs = load_all_yaml(text, shapes=shapes, strict=strict)
    except DuplicateKeyError as err:
        return f"dup {err} {err.key!r} {err.line} {err.first_line} {err.document} {err.path}", []
    except yaml.YAMLError as err:
        return f"{type(err).__name__}: {err}", []
    return repr(docs), shapes


def _read(text: str) -> list[Any]:
    """The line reader alone (raises NotLines where it hands the stream on)."""
    return yaml_lines.load_lines(text, None)


def _same_as_today(text: str) -> None:
    for strict in (True, False):
        assert _outcome(text, strict=strict) == _outcome(text, strict=strict, lines=False)


# --- a go-yaml (kubectl) style emitter ---------------------------------------------------------

_PLAIN_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._/=+~%@&*!|>?{}\[\],#:'\"()-]*")
_GO_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\x85": "\\N", "\u2028": "\\L"}


def _double(text: str) -> str:
    out = []
    for ch in text:
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or 0x80 <= ord(ch) < 0xA0 or ch in "\u2029\ufeff":
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _plain_ok(text: str) -> bool:
    if not _PLAIN_SAFE.fullmatch(text) or text != text.strip() or ": " in text or " #" in text or text[-1] == ":":
        return False
    return bool(yaml.load(f"k: {text}\n", Loader=FAST) == {"k": text})


class GoYaml:
    """Writes documents as go-yaml does for kubectl: block style, two-space indentation, a sequence
    at its key's column (or indented), compact `- key:` items, `{}` and `[]`, literal blocks for text
    with line breaks, quoted scalars (folded over lines when long) where a plain one would not do."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw
        self.indented_sequences = draw(st.booleans())
        self.quote = draw(st.sampled_from(['"', "'"]))
        self.fold = draw(st.sampled_from([0, 12, 30]))

    def scalar(self, value: Any, column: int, *, key: bool = False) -> list[str]:
        """The scalar's text after `key: ` or `- ` (more lines: whole lines, indented)."""
        if value is None:
            return [self.draw(st.sampled_from(["null", "~"])) if not key else "null"]
        if value is True or value is False:
            return ["true" if value else "false"]
        if isinstance(value, int):
            return [str(value)]
        if isinstance(value, float):
            return [yaml.safe_dump(value).split("\n")[0]]
        text: str = value
        if text and _plain_ok(text):
            return [text]
        if not key and "\n" in text and not text.startswith(("\n", " ")) and text.strip("\n"):
            body = text.rstrip("\n")
            trailing = len(text) - len(body)
            if all(c.isprintable() or c == "\n" for c in body) and "\n " not in body:
                chomp = "-" if trailing == 0 else "" if trailing == 1 else "+"
                pad = " " * (column + 2)
                lines = [f"|{chomp}"] + [pad + part if part else "" for part in body.split("\n")]
                return lines + [""] * (trailing - 1 if trailing > 1 else 0)
        single = self.quote == "'" and text.isprintable()
        quoted = "'" + text.replace("'", "''") + "'" if single else _double(text)
        if key or not self.fold or len(quoted) <= self.fold:
            return [quoted]
        # fold at single spaces, as go-yaml wraps long scalars
        parts, width = [""], self.fold
        for word in re.split(r"(?<=[^ ]) (?=[^ ])", quoted):
            if parts[-1] and len(parts[-1]) + len(word) > width:
                parts.append(word)
            else:
                parts[-1] = f"{parts[-1]} {word}" if parts[-1] else word
        return [parts[0]] + [" " * (column + 2) + p for p in parts[1:]]

    def head(self, prefix: str, value: Any, column: int) -> list[str]:
        """`prefix` (`  key:` or `  -`) and its value, which belongs to a collection at `column`."""
        if isinstance(value, dict) and value:
            return [prefix, *self.mapping(value, column + 2)]
        if isinstance(value, list) and value:
            at = column + 2 if self.indented_sequences or prefix.endswith("-") else column
            return [prefix, *self.sequence(value, at)]
        if isinstance(value, dict | list):
            return [f"{prefix} {'{}' if isinstance(value, dict) else '[]'}"]
        first, *rest = self.scalar(value, column)
        return [f"{prefix} {first}", *rest]

    def mapping(self, value: dict[Any, Any], column: int) -> list[str]:
        out = []
        for key, item in value.items():
            out += self.head(" " * column + self.scalar(key, column, key=True)[0] + ":", item, column)
        return out

    def sequence(self, value: list[Any], column: int) -> list[str]:
        out = []
        for item in value:
            if isinstance(item, dict | list) and item:
                inner = self.mapping(item, column + 2) if isinstance(item, dict) else self.sequence(item, column + 2)
                out += [" " * column + "- " + inner[0][column + 2 :], *inner[1:]]
            else:
                out += self.head(" " * column + "-", item, column)
        return out

    def stream(self, docs: list[Any]) -> str:
        texts = []
        for doc in docs:
            body = self.mapping(doc, 0) if isinstance(doc, dict) else self.sequence(doc, 0)
            texts.append("\n".join(body) + "\n")
        return "---\n".join(texts)


_TRICKY = st.sampled_from(
    [
        "yes",
        "No",
        "on",
        "~",
        "null",
        "Null",
        "true",
        "1.5",
        "1e3",
        "1.0e+3",
        "-1",
        "+1",
        "0x1F",
        "0o17",
        "017",
        "12:30",
        "1_000",
        ".inf",
        "-.Inf",
        ".nan",
        "2002-12-14",
        "2026-11-26T10:00:00Z",
        "=",
        "<<",
        "-",
        "- a",
        ":",
        ": x",
        "a: b",
        "a:b",
        "#c",
        "a #b",
        "a#b",
        "'q'",
        '"q"',
        "it's",
        "  lead",
        "trail ",
        "a  b",
        "a\nb",
        "a\n",
        "a\n\n",
        "\n",
        "",
        "é",
        "日本",
        "a\tb",
        "\x85",
        "back\\slash",
        "{}",
        "[]",
        "[a]",
        "{a: 1}",
        "&a",
        "*a",
        "!t",
        "|",
        ">",
        "%",
        "@",
        "`",
        "---",
        "...",
        "--- x",
        "? k",
        "0/3 nodes are available: 3 Insufficient cpu.",
    ]
)
_TEXT = _TRICKY | st.text(alphabet=st.sampled_from(list("ab  -:#'\"\\{}[],&*!|>%@`?~.\n\t09é日")), max_size=14)
_SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | _TEXT
_KEYS = _TEXT | st.integers(-5, 5) | st.booleans() | st.none() | st.sampled_from([1.5, 0.0])
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=16,
)
_DOCS = st.lists(
    st.dictionaries(_KEYS, _VALUES, min_size=1, max_size=5) | st.lists(_VALUES, min_size=1, max_size=4),
    max_size=3,
)


@st.composite
def _go_streams(draw: Any) -> tuple[list[Any], str]:
    docs = draw(_DOCS)
    return docs, GoYaml(draw).stream(docs)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated=_go_streams())
def test_go_yaml_streams_are_read_line_by_line_as_pyyaml_reads_them(generated: tuple[list[Any], str]) -> None:
    docs, text = generated
    expected = list(yaml.load_all(text, Loader=PURE))
    assert expected == docs or repr(expected) == repr(docs)  # the emitter writes what it was given
    assert _read(text) == expected  # line by line: no fallback
    _same_as_today(text)


@settings(max_examples=80, deadline=None)
@given(docs=_DOCS, unicode=st.booleans(), width=st.sampled_from([20, 80]), sort=st.booleans())
def test_pyyaml_block_streams_load_as_pyyaml_loads_them(docs: list[Any], unicode: bool, width: int, sort: bool) -> None:
    text = yaml.dump_all(
        docs, Dumper=yaml.SafeDumper, default_flow_style=False, allow_unicode=unicode, width=width, sort_keys=sort
    )
    assert repr(load_all_yaml(text, strict=True)) == repr(list(yaml.load_all(text, Loader=PURE)))
    _same_as_today(text)


@st.composite
def _damaged(draw: Any) -> str:
    _, text = draw(_go_streams())
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, max(len(lines) - 1, 0)))
        line = lines[at]
        how = draw(st.sampled_from(["indent", "dedent", "insert", "delete", "duplicate", "swap"]))
        if how == "indent":
            lines[at] = " " * draw(st.integers(1, 3)) + line
        elif how == "dedent":
            lines[at] = line[draw(st.integers(1, 3)) :]
        elif how == "insert":
            where = draw(st.integers(0, len(line)))
            lines[at] = line[:where] + draw(st.sampled_from([*"-:#'\" {}[]&*!|>?\t", "- ", ": ", "\\"])) + line[where:]
        elif how == "delete" and line:
            where = draw(st.integers(0, len(line) - 1))
            lines[at] = line[:where] + line[where + 1 :]
        elif how == "duplicate":
            lines.insert(at, line)
        elif at + 1 < len(lines):
            lines[at], lines[at + 1] = lines[at + 1], line
    return "\n".join(lines)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_damaged())
def test_damaged_streams_give_what_todays_reader_gives(text: str) -> None:
    # the same objects, or the same error (a key twice, YAML refused) with the same message
    _same_as_today(text)


# --- explicit cases ------------------------------------------------------------------------------

READ = [
    "a: 1\nb:\n  c: [] \n  d: {}\ne:\n- x\n- - y\n  - z\n-\n",
    "- a: 1\n  b:\n  - 2\n- c: |\n    one\n     two\n\n    three\n  d: >-\n    folded\n    text\n\n    para\n",
    "k: |+\n  kept\n\n\nnext: 1\n",
    "k: >\n  a\n   b\n  c\n",
    "k: 'it''s'\nm: \"tab\\tq\\\"\\x41\\u00e9\\U0001F600\\/\\ \"\n",
    'k: "one\n  two \\\n  three\n   \\ four"\n',
    "k: 'a\n   b'\n",
    "---\n---\na: 1\n---\n# only a comment\n",
    "a: 1 # comment\nb: 'x' # comment\n# c\n  # c\n\nc: # comment\n  d: e  # c\n",
    "- # c\n  a: 1\n- # c\n",
    "   a: 1\n   b: 2\n",
    "~: 1\ntrue: 2\n1.5: 3\n2002-12-14: 4\n'': 5\n\"x y\": 6\n",
    "a:\n  - 1\n  -\n  - - 2\n",
    "a: -1\nb: -x\nc: x-\nd: a:b\ne: http://x/#y\n",
    "k: >\n  a\n  b\n\n  c\n    more\n  d\n\n\n  e\n   f\nl: >+\n  x\n\nm: |-\n  y\n\n",
    "- >\n  a\n  b\n- |+\n  c\n\n- >-\n  d\n",
    'message: "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes\n  are available."\n',
]


@pytest.mark.parametrize("text", READ)
def test_what_the_line_reader_reads(text: str) -> None:
    assert _read(text) == list(yaml.load_all(text, Loader=PURE))
    _same_as_today(text)


FALLBACK = {
    "anchor": "a: &x 1\nb: 2\n",
    "alias": "a: &x 1\nb: *x\n",
    "tag": "a: !!str 1\n",
    "local tag": "a: !custom x\n",
    "flow sequence": "a: [1, 2]\n",
    "flow mapping": "a: {b: 1}\n",
    "flow with spaces": "a: [ ]\n",
    "complex key": "? a\n: 1\n",
    "multi-line plain": "a: one\n  two\n",
    "multi-line plain item": "- one\n  two\n",
    "plain on the next line": "a:\n  one\n",
    "blank line in a quoted scalar": "a: 'one\n\n  two'\n",
    "quoted continuation not indented": "a:\n  b: 'one\n  two'\n",
    "tab": "a:\tb\n",
    "tab in a value": "a: 'b\tc'\n",
    "carriage return": "a: 1\r\nb: 2\r\n",
    "byte-order mark": "\ufeffa: 1\n",
    "NEL": "a: b\x85c\n",
    "directive": "%YAML 1.1\n---\na: 1\n",
    "document end": "a: 1\n...\n",
    "document start with content": "--- a\n",
    "a root scalar": "text\n",
    "a root flow mapping": "{}\n",
    "merge key": "a:\n  <<: {b: 1}\n",
    "value key": "=: 1\n",
    "duplicate key": "a: 1\na: 2\n",
    "duplicate key by value": "1: a\n1.0: b\n",
    "block scalar with indentation indicator": "a: |2\n   x\n",
    "block scalar with leading blank line": "a: |\n\n  x\n",
    "empty block scalar": "a: |\nb: 1\n",
    "block scalar at the end without a line break": "a: |\n  x",
    "comment after a block scalar header": "a: | # c\n  x\n",
    "unknown escape": 'a: "\\q"\n',
    "surrogate escape": 'a: "\\ud800"\n',
    "escaped space before the end of a line": 'a: "x\\ \n  y"\n',
    "long key": "k" * 1100 + ": 1\n",
    "key with a space before the colon": "a : 1\n",
    "quoted key over lines": "'a\n  b': 1\n",
    "mapping values on one line": "a: b: c\n",
    "indicator": "a: @x\n",
    "question mark": "a: ?x\n",
    "dash alone": "a: -\n",
    "bad indentation": "a:\n    b: 1\n  c: 2\n",
    "sequence then key at the root": "- a\nb: 1\n",
    "key after a scalar": "a: 1\n  b: 2\n",
    "unterminated quote": "a: 'x\n",
    "spaces after a dash": "-   a: 1\n    b: 2\n",
    "spaces after a dash, then a key two past the dash": "-   a: 1\n  b: 2\n",
    "junk after a quote": "a: 'x' y\n",
}


@pytest.mark.parametrize("text", FALLBACK.values(), ids=FALLBACK.keys())
def test_what_the_line_reader_hands_to_libyaml(text: str) -> None:
    with pytest.raises(yaml_lines.NotLines):
        _read(text)
    _same_as_today(text)


def test_a_key_twice_names_the_line_as_today() -> None:
    text = "a: 1\n---\nspec:\n  containers:\n  - name: x\n    resources:\n      requests:\n"
    text += "        cpu: 1\n        cpu: 2\n"
    with pytest.raises(DuplicateKeyError) as err:
        load_all_yaml(text, strict=True)
    assert (err.value.key, err.value.line, err.value.document, err.value.path) == (
        "cpu",
        9,
        2,
        "spec.containers[0].resources.requests",
    )
    assert str(err.value) == "line 9: duplicate key 'cpu' in spec.containers[0].resources.requests"
    _same_as_today(text)
    assert load_all_yaml(text)[1]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": 2}


def test_kubectl_printed_pods_are_read_line_by_line() -> None:
    from hack.bench.karpenter_workload import kubectl_pod_list

    text = kubectl_pod_list(60)
    shapes: list[tuple[int, int] | None] = []
    docs = yaml_lines.load_lines(text, shapes)
    assert docs == list(yaml.load_all(text, Loader=PURE))
    _same_as_today(text)
    assert docs[0]["items"][0]["status"]["conditions"][0]["message"].startswith("0/3 nodes are available")


@pytest.mark.parametrize("text", [*READ, "", "# nothing\n", b"a: 1\n"])
def test_load_yaml_reads_one_document_as_pyyaml_does(text: str) -> None:
    def outcome(load: Any) -> str:
        try:
            return repr(load(text))
        except yaml.YAMLError as err:
            return f"{type(err).__name__}: {err}"

    assert outcome(lambda t: serialization.load_yaml(t, strict=True)) == outcome(lambda t: yaml.load(t, Loader=FAST))


def test_the_characters_left_to_libyaml_are_every_one_but_the_printable_ranges_yaml_allows() -> None:
    """`_LINE_CHARS` lists the few ranges left out of YAML's printable set; it matches exactly the
    characters outside that set, over every code point, and `_leaves_to_libyaml` agrees with it."""
    from controller.yaml_lines import _LINE_CHARS, _leaves_to_libyaml

    kept = re.compile("[^\x20-\x7e\n\u00a0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")
    every = "".join(map(chr, range(0x110000)))
    assert [m.start() for m in _LINE_CHARS.finditer(every)] == [m.start() for m in kept.finditer(every)]
    for line in ("  name: web", "a\tb", "x\x7f", "caf\u00e9: \u2028", "\ufeffkey: v", "plain ascii ~", "", "\x85"):
        assert _leaves_to_libyaml(line) == (kept.search(line) is not None), repr(line)
