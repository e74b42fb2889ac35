"""The fast YAML/JSON paths give what PyYAML's safe loader and the standard json module give."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import serialization
from controller.serialization import dump_yaml, dumps_json_pretty, load_all_yaml, load_yaml, loads_json

REPO = Path(__file__).resolve().parents[3]
REFERENCE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

CASES = [
    "a: &x {b: 1}\nc: *x\n",
    "base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n",
    "t: 2001-12-14t21:59:43.10-05:00\nd: 2002-12-14\n",
    "b: !!binary aGVsbG8=\n",
    "s: !!set {a, b}\n",
    "o: yes\np: off\nq: ~\nr: 0o17\ns: 0x1f\nt: 1_000\nu: .inf\nw: 012\nx: 1:20\ny: '3'\n",
    "&a [*a]\n",
    "&a {k: *a}\n",
    "=: 1\n",
    "---\n---\na: 1\n...\n",
    "",
    "- !!str 12\n- !!int '7'\n- !!float 1\n",
    "a: &s str\nb: *s\n",
    "x: [&l [1], *l]\n",
    "{a: 1, a: 2}\n",
    "!!omap [a: 1]\n",
    "!!pairs [a: 1]\n",
    "plain\n",
    # plain streams (built from libyaml's events in one pass)
    "a: {b: [1, 2.5, '3', \"x\", true, ~, null, 2002-12-14]}\nc: []\nd: {}\n",
    "- |\n  block\n  text\n- >\n  folded\n- ''\n- \n",
    "---\n...\n---\nk: v\n---\n- 1\n",
    "1: one\n1.5: x\ntrue: y\n~: z\n2001-12-14: date\n",
    "k: [[[]], {a: {b: {}}}]\n",
]


def _outcome(load: Any, text: str) -> str:
    try:
        return repr(load(text))
    except yaml.YAMLError as err:
        return f"{type(err).__name__}: {err}"


@pytest.mark.parametrize("text", CASES)
def test_documents_are_what_pyyaml_builds(text: str) -> None:
    assert _outcome(load_all_yaml, text) == _outcome(lambda t: list(yaml.load_all(t, Loader=REFERENCE)), text)
    if text.count("---") <= 1:
        assert _outcome(load_yaml, text) == _outcome(lambda t: yaml.load(t, Loader=REFERENCE), text)


@pytest.mark.parametrize("text", ["k: !custom x\n", "? [1, 2]\n: v\n", "a: [1\n"])
def test_bad_yaml_raises_as_pyyaml_does(text: str) -> None:
    with pytest.raises(yaml.YAMLError) as ours:
        load_all_yaml(text)
    with pytest.raises(yaml.YAMLError) as theirs:
        list(yaml.load_all(text, Loader=REFERENCE))
    assert str(ours.value) == str(theirs.value)


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["yes", "off", "~", "0o17", "0x1f", "1_000", ".inf", "012", "1:20", "2002-12-14", "=", "<<"])
)
_DOCS = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(_SCALARS.filter(lambda k: k is not None), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(docs=st.lists(_DOCS, max_size=3), style=st.sampled_from([None, True, False]))
def test_generated_streams_load_as_pyyaml_loads_them(docs: list[Any], style: bool | None) -> None:
    # plain YAML as PyYAML writes it (block and flow style): the one-pass builder's ground
    text = yaml.dump_all(docs, Dumper=yaml.SafeDumper, default_flow_style=style, allow_unicode=True)
    shapes: list[tuple[int, int] | None] = []
    assert _outcome(lambda t: load_all_yaml(t, shapes=shapes), text) == _outcome(
        lambda t: list(yaml.load_all(t, Loader=REFERENCE)), text
    )
    for doc, shape in zip(load_all_yaml(text), shapes, strict=True):
        if shape is not None:
            assert shape == _shape(doc)


def test_a_plain_stream_is_built_without_the_node_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any) -> Any:
        raise AssertionError("the node tree was built")

    text = (REPO / "hack" / "demo" / "workloads.yaml").read_text()  # the demo's Deployments and gang
    expected = list(yaml.load_all(text, Loader=REFERENCE))
    monkeypatch.setattr(serialization._Loader, "get_node", refuse)
    assert load_all_yaml(text) == expected
    with pytest.raises(AssertionError, match="node tree"):
        load_all_yaml("a: &x 1\nb: *x\n")  # an alias: the node path


def test_aliases_share_one_object() -> None:
    (doc,) = load_all_yaml("a: &x {b: [1]}\nc: *x\n")
    assert doc["a"] is doc["c"]


def _shape(obj: Any) -> tuple[int, int]:
    children = list(obj.values()) if isinstance(obj, dict) else obj if isinstance(obj, list) else None
    if children is None:
        return (0, 0)
    subs = [_shape(c) for c in children if isinstance(c, dict | list)]
    return (1 + max((s[0] for s in subs), default=0), 1 + len(children) + sum(s[1] for s in subs))


@pytest.mark.parametrize(
    "text",
    [*CASES[:6], "a: &x [1, 2, {b: [3]}]\nc: [*x, *x, {d: *x}]\n", "[[[[[[1]]]]]]\n", "- [a, b]\n- {c: [d, {e: f}]}\n"],
)
def test_shapes_count_depth_and_values_with_aliases_expanded(text: str) -> None:
    shapes: list[tuple[int, int] | None] = []
    docs = load_all_yaml(text, shapes=shapes)
    assert len(shapes) == len(docs)
    for doc, shape in zip(docs, shapes, strict=True):
        if shape is not None:
            assert shape == _shape(doc)


def test_the_repository_manifests_load_alike() -> None:
    files = [p for p in REPO.glob("deploy/**/*.yaml") if p.is_file()][:40]
    assert files
    for path in files:  # Helm templates among them are not YAML: both must refuse them alike
        text = path.read_text(encoding="utf-8")
        theirs = _outcome(lambda t: list(yaml.load_all(t, Loader=REFERENCE)), text)
        assert _outcome(load_all_yaml, text) == theirs, path


def test_json_reads_and_writes_like_the_standard_library() -> None:
    data = {"a": [1, 2.5, None, True, "é"], "b": {"c": []}, "d": {}}
    assert json.loads(dumps_json_pretty(data)) == data
    assert dumps_json_pretty(data) == json.dumps(data, indent=2, ensure_ascii=False)
    assert loads_json('{"x": NaN}')["x"] != loads_json('{"x": NaN}')["x"]  # what orjson refuses, json reads
    assert loads_json(b'{"k": [1, "v"]}') == {"k": [1, "v"]}


def test_yaml_dump_round_trips() -> None:
    data = {"nodeClaims": [{"name": "a", "pods": ["x", "y"], "price": 0.5}], "totalPrice": 0.5}
    assert yaml.safe_load(dump_yaml(data)) == data


# --- strict decoding: a key twice in one mapping ---------------------------------------------


@settings(max_examples=200, deadline=None)
@given(docs=st.lists(_DOCS, max_size=3), style=st.sampled_from([None, True, False]))
def test_strict_reads_streams_without_duplicates_as_the_lenient_reader(docs: list[Any], style: bool | None) -> None:
    text = yaml.dump_all(docs, Dumper=yaml.SafeDumper, default_flow_style=style, allow_unicode=True)
    assert _outcome(lambda t: load_all_yaml(t, strict=True), text) == _outcome(load_all_yaml, text)


@settings(max_examples=200, deadline=None)
@given(
    doc=st.dictionaries(st.text(alphabet="abcxyz", min_size=1, max_size=4), _DOCS, min_size=1, max_size=5),
    before=st.integers(min_value=0, max_value=2),
    alias=st.booleans(),
)
def test_a_key_twice_is_refused_with_its_line_and_path(doc: dict[str, Any], before: int, alias: bool) -> None:
    key = next(iter(doc))
    body = yaml.dump({"spec": {"requests": doc}}, Dumper=yaml.SafeDumper, default_flow_style=False)
    text = "other: 1\n---\n" * before + body + f"  requests2: {'&a 1' if alias else '1'}\n"
    # the duplicate goes last in the requests mapping, at the line after the mapping's last line
    lines = text.splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith(("    ", "  requests:")))
    lines.insert(last + 1, f"    {key}: 2")
    text = "\n".join(lines) + "\n"
    assert "\n".join(lines).count("requests2") == 1
    with pytest.raises(serialization.DuplicateKeyError) as err:
        load_all_yaml(text, strict=True)
    assert (err.value.key, err.value.line, err.value.document) == (key, last + 2, before + 1)
    assert err.value.path == "spec.requests"
    assert load_all_yaml(text)[-1]["spec"]["requests"][key] == 2  # the lenient reader keeps the last


def test_duplicate_keys_in_json_name_the_line() -> None:
    text = '{"instanceTypes": [\n  {"name": "a",\n   "name": "b"}]}'
    with pytest.raises(serialization.DuplicateKeyError, match=r"line 3: duplicate key 'name' in instanceTypes\[0\]"):
        serialization.loads_json_strict(text)
    assert serialization.loads_json_strict('{"a": {"b": 1}, "b": 2}') == {"a": {"b": 1}, "b": 2}


def test_key_line_finds_keys_and_items() -> None:
    text = "a: 1\n---\nspec:\n  containers:\n  - name: c\n    resourcs: {}\n"
    assert serialization.key_line(text, 2, ["spec", "containers", 0, "resourcs"]) == 6
    assert serialization.key_line(text, 2, ["spec", "containers", 0]) == 5
    assert serialization.key_line(text, 3, ["spec"]) == 0
