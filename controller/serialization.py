"""YAML and JSON with the fast parsers where they are installed, the pure-Python ones otherwise.

- YAML is read with libyaml (``yaml.CSafeLoader``) when PyYAML was built with it (the wheels are),
  and written with ``yaml.CSafeDumper``. Documents are built from libyaml's node tree by
  :func:`_construct`, an iterative builder that gives the same objects as PyYAML's safe
  constructor (aliases share one object) for the plain YAML Kubernetes objects are made of, and
  hands anything else (merge keys ``<<``, explicit tags, sets, a node that contains itself) to
  PyYAML's own constructor.
- JSON is read and written with ``orjson`` when installed, with the standard library's ``json``
  as the fallback (and for what orjson refuses but ``json`` reads, such as ``NaN``).

Semantics are PyYAML's safe loader (YAML 1.1) and the standard library's ``json`` either way: only
the speed differs. ``strict=True`` (and :func:`loads_json_strict`) refuse what ``kubectl apply``'s
strict decoding refuses and those parsers let pass: a key twice in one mapping
(:class:`DuplicateKeyError`, naming the key, its line and the document).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import yaml

from controller.yaml_lines import NotLines, load_lines

try:  # pragma: no cover - which branch runs depends on the installed wheels
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML was built with it: ten times the pure-Python one's speed."""


_resolve: Callable[[Any, Any, Any, Any], Any] = yaml.resolver.BaseResolver.resolve
_SCALAR_NODE: Final = yaml.ScalarNode
_MAPPING_NODE: Final = yaml.MappingNode
_SEQUENCE_NODE: Final = yaml.SequenceNode


class _RememberedTags:
    """Resolves each distinct plain scalar once per stream: a plain scalar's implicit tag (int,
    bool, null, str, ...) depends on its text alone when no path resolvers are set, and
    Kubernetes objects repeat the same keys and values thousands of times. (Without path
    resolvers a collection's tag is the default one, as PyYAML's resolver gives it.)"""

    yaml_path_resolvers: dict[Any, Any]

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)  # type: ignore[call-arg]
        self._joiner_tags: dict[str, Any] | None = None if self.yaml_path_resolvers else {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        tags = self._joiner_tags
        if tags is not None:
            if kind is _SCALAR_NODE:
                if implicit[0]:
                    tag = tags.get(value)
                    if tag is None:
                        tag = tags[value] = _resolve(self, kind, value, implicit)
                    return tag
            elif kind is _MAPPING_NODE:
                return _MAP
            elif kind is _SEQUENCE_NODE:
                return _SEQ
        return _resolve(self, kind, value, implicit)


_Loader: type[yaml.SafeLoader] = type("_Loader", (_RememberedTags, SafeLoader), {})
# the one-pass builder (`_load_plain`) reads libyaml's events; PyYAML's own Python parser would be
# slower through it than through its node tree
_EVENTS: Final = SafeLoader is not yaml.SafeLoader

SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_STR: Final = "tag:yaml.org,2002:str"
_MAP: Final = "tag:yaml.org,2002:map"
_SEQ: Final = "tag:yaml.org,2002:seq"
_MERGE: Final = "tag:yaml.org,2002:merge"


class _Fallback(Exception):
    """The node tree holds something :func:`_construct` leaves to PyYAML's constructor."""


class DuplicateKeyError(yaml.YAMLError, ValueError):
    """A mapping holds one key twice (``requests: {cpu: '1', cpu: '64'}``): which one a parser keeps
    is arbitrary, so strict decoding refuses it, as ``kubectl apply`` does.

    ``document`` counts from 1, ``line`` from 1 (0 when unknown: JSON read without its text);
    ``path`` is where the mapping is (``spec.containers[0].resources.requests``), empty at the top."""

    def __init__(self, *, key: Any, line: int, first_line: int = 0, document: int = 1, path: str = "") -> None:
        self.key, self.line, self.first_line, self.document, self.path = key, line, first_line, document, path
        where = f" in {path}" if path else ""
        first = f" (first at line {first_line})" if first_line else ""
        at = f"line {line}: " if line else ""
        super().__init__(f"{at}duplicate key {str(key)!r}{where}{first}")


def _path_text(parts: list[Any]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _line(node_or_event: Any) -> int:
    mark = getattr(node_or_event, "start_mark", None)
    return mark.line + 1 if mark is not None else 0


def _check_unique(root: yaml.Node, document: int) -> None:
    """Raise :class:`DuplicateKeyError` for a mapping of the node tree with a scalar key twice
    (merge keys ``<<`` aside: a merged key is overridden, not repeated). Iterative; aliased
    sub-trees are checked once."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, list[Any]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], yaml.Node] = {}
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != _MERGE:
                    token = (k.tag, k.value)
                    if token in first:
                        raise DuplicateKeyError(
                            key=k.value,
                            line=_line(k),
                            first_line=_line(first[token]),
                            document=document,
                            path=_path_text(path),
                        )
                    first[token] = k
                stack.append((v, [*path, k.value if isinstance(k, yaml.ScalarNode) else "?"]))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, [*path, i]) for i, v in enumerate(node.value))


def _scalar(node: yaml.Node, loader: yaml.SafeLoader) -> Any:
    """The value of a scalar node, as PyYAML's safe constructor makes it."""
    tag = node.tag
    if tag == _STR:
        return node.value
    scalars = yaml.SafeLoader.yaml_constructors
    if tag in scalars and tag not in (_MAP, _SEQ, _MERGE):
        return scalars[tag](loader, node)
    raise _Fallback


def _child(
    node: yaml.Node, built: dict[int, Any], shape: dict[int, tuple[int, int]], loader: yaml.SafeLoader
) -> tuple[Any, int, int]:
    """A collection item's value, with its shape (0, 0 for a scalar; see `_construct`)."""
    if type(node) is yaml.ScalarNode:
        return (node.value if node.tag == _STR else _scalar(node, loader)), 0, 0
    sub = shape.get(id(node))
    if sub is None:  # a collection not filled yet: one holding itself
        raise _Fallback
    return built[id(node)], sub[0], sub[1]


def _construct(root: yaml.Node, loader: yaml.SafeLoader) -> tuple[Any, int, int]:
    """The document for ``root``, built without recursion, with its shape: how deep its
    collections nest and how many values it holds once aliases are expanded (each collection
    counts one, plus one per item or mapping value). Raises :class:`_Fallback` when PyYAML's
    constructor must build it (see the module docstring)."""
    if isinstance(root, yaml.ScalarNode):
        return _scalar(root, loader), 0, 0
    # collections first, outermost first; scalars are read where they are used
    built: dict[int, Any] = {}
    containers: list[yaml.Node] = []
    stack: list[yaml.Node] = [root]
    scalar_node = yaml.ScalarNode
    mapping_node = yaml.MappingNode
    while stack:
        node = stack.pop()
        key = id(node)
        if key in built:
            continue
        tag = node.tag
        kind = type(node)
        if kind is mapping_node:
            if tag != _MAP:
                raise _Fallback
            built[key] = {}
            containers.append(node)
            stack.extend([v for _k, v in node.value if type(v) is not scalar_node])
        elif kind is yaml.SequenceNode:
            if tag != _SEQ:
                raise _Fallback
            built[key] = []
            containers.append(node)
            stack.extend([v for v in node.value if type(v) is not scalar_node])
        else:  # pragma: no cover - libyaml makes no other kind
            raise _Fallback
    # fill the containers children first, as PyYAML does; a container holding itself (an alias
    # inside its own anchor) would need PyYAML's two-step construction
    shape: dict[int, tuple[int, int]] = {}  # collection -> (height, size), once it is filled
    for node in reversed(containers):
        out = built[id(node)]
        height, size = 0, 1 + len(node.value)
        if type(node) is mapping_node:
            for k, v in node.value:
                if type(k) is not scalar_node:
                    raise _Fallback  # a key that is a collection (unhashable or odd)
                tag = k.tag
                if tag == _STR:
                    name = k.value
                elif tag == _MERGE:
                    raise _Fallback  # merge keys
                else:
                    name = _scalar(k, loader)
                value, sub_height, sub_size = _child(v, built, shape, loader)
                if sub_height > height:
                    height = sub_height
                size += sub_size
                try:
                    out[name] = value
                except TypeError:
                    raise _Fallback from None  # an unhashable key: PyYAML's error message
        else:
            for v in node.value:
                value, sub_height, sub_size = _child(v, built, shape, loader)
                if sub_height > height:
                    height = sub_height
                size += sub_size
                out.append(value)
        shape[id(node)] = (height + 1, size)
    height, size = shape[id(root)]
    return built[id(root)], height, size


_NO_KEY: Final = object()
_EVENT_SCALAR: Final = yaml.ScalarEvent
_EVENT_MAPPING: Final = yaml.MappingStartEvent
_EVENT_SEQUENCE: Final = yaml.SequenceStartEvent
_EVENT_END: Final = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_EVENT_DOCUMENT_END: Final = yaml.DocumentEndEvent
_EVENT_STREAM_END: Final = yaml.StreamEndEvent
_EVENT_SKIPPED: Final = (yaml.StreamStartEvent, yaml.DocumentStartEvent)
# implicit scalar tags whose values are immutable, so one value serves every equal scalar
_PLAIN_TAGS: Final = frozenset("tag:yaml.org,2002:" + kind for kind in ("int", "float", "bool", "null", "timestamp"))


class _NotPlain(Exception):
    """The stream holds what only the node path builds: anchors, aliases, explicit tags, merge
    keys, keys that are collections, scalars of other implicit tags, or an error to report."""


def _duplicate(stack: list[list[Any]], key: Any, event: Any, document: int) -> DuplicateKeyError:
    """The error for ``key`` met twice in the innermost open mapping of `_load_plain`'s stack."""
    path: list[Any] = []
    for frame in stack[:-1]:
        path.append(frame[2] if frame[1] else len(frame[0]))
    return DuplicateKeyError(key=key, line=_line(event), document=document, path=_path_text(path))


def _load_plain(text: str, shapes: list[tuple[int, int] | None] | None, *, strict: bool = False) -> list[Any]:
    """Every document of a stream of plain YAML (see :class:`_NotPlain`), built in one pass over
    libyaml's events: no node tree, no second walk. Raises :class:`_NotPlain` for anything else,
    and with ``strict`` :class:`DuplicateKeyError` for a key met twice in one mapping."""
    loader = _Loader(text)
    try:
        next_event: Callable[[], Any] = loader.get_event
        tags: dict[str, Any] | None = getattr(loader, "_joiner_tags", None)
        if tags is None:  # pragma: no cover - path resolvers are never set here
            raise _NotPlain
        values: dict[tuple[str, str], Any] = {}
        constructors = yaml.SafeLoader.yaml_constructors
        docs: list[Any] = []
        # per open collection: [the collection, is a mapping, pending key, height, size]
        stack: list[list[Any]] = []
        root: Any = None
        shape = (0, 0)
        while True:
            event = next_event()
            kind = type(event)
            if kind is _EVENT_SCALAR:
                if event.tag is not None or event.anchor is not None:
                    raise _NotPlain
                value = event.value
                if event.implicit[0]:
                    tag = tags.get(value)
                    if tag is None:
                        tag = tags[value] = _resolve(loader, _SCALAR_NODE, value, event.implicit)
                    if tag != _STR:
                        if tag not in _PLAIN_TAGS:
                            raise _NotPlain
                        key = (tag, value)
                        built = values.get(key, _NO_KEY)
                        if built is _NO_KEY:
                            built = values[key] = constructors[tag](loader, yaml.ScalarNode(tag, value))
                        value = built
                if not stack:
                    root, shape = value, (0, 0)
                    continue
                frame = stack[-1]
                if frame[1]:
                    if frame[2] is _NO_KEY:
                        if strict and value in frame[0]:
                            raise _duplicate(stack, value, event, len(docs) + 1)
                        frame[2] = value
                        continue
                    frame[0][frame[2]] = value
                    frame[2] = _NO_KEY
                else:
                    frame[0].append(value)
                frame[4] += 1
            elif kind is _EVENT_MAPPING or kind is _EVENT_SEQUENCE:
                if event.tag is not None or event.anchor is not None:
                    raise _NotPlain
                if stack and stack[-1][1] and stack[-1][2] is _NO_KEY:
                    raise _NotPlain  # a collection as a key
                mapping = kind is _EVENT_MAPPING
                stack.append([{} if mapping else [], mapping, _NO_KEY, 0, 1])
            elif kind in _EVENT_END:
                done = stack.pop()
                height, size = done[3] + 1, done[4]
                if not stack:
                    root, shape = done[0], (height, size)
                    continue
                frame = stack[-1]
                if frame[1]:
                    frame[0][frame[2]] = done[0]
                    frame[2] = _NO_KEY
                else:
                    frame[0].append(done[0])
                if height > frame[3]:
                    frame[3] = height
                frame[4] += 1 + size
            elif kind is _EVENT_DOCUMENT_END:
                docs.append(root)
                if shapes is not None:
                    shapes.append(shape)
                root, shape = None, (0, 0)
            elif kind is _EVENT_STREAM_END:
                return docs
            elif kind not in _EVENT_SKIPPED:
                raise _NotPlain  # aliases
    except (_NotPlain, DuplicateKeyError):
        raise
    except Exception as err:  # errors are reported as the node path reports them
        raise _NotPlain from err
    finally:
        loader.dispose()


def load_all_yaml(text: str, *, shapes: list[tuple[int, int] | None] | None = None, strict: bool = False) -> list[Any]:
    """Every document of a YAML stream, as ``list(yaml.load_all(text, SafeLoader))`` gives them.

    ``shapes``, if given, receives one entry per document: (how deep its collections nest, how
    many values it holds with aliases expanded), or None where PyYAML's constructor built it.
    Raises ``yaml.YAMLError`` for text that is not YAML (and ``RecursionError`` where PyYAML's
    constructor does, for documents it has to build itself).

    A stream of plain YAML (no anchors, aliases or explicit tags: what Kubernetes objects are
    written in) is built from libyaml's events in one pass; any other stream, or one with an
    error, from its node tree (below), which gives PyYAML's objects and PyYAML's errors.

    ``strict``: a mapping with a key twice raises :class:`DuplicateKeyError` (PyYAML keeps the last)."""
    lined: list[tuple[int, int] | None] | None = [] if shapes is not None else None
    try:
        read = load_lines(text, lined)
    except NotLines:
        pass
    else:
        if shapes is not None and lined is not None:
            shapes.extend(lined)
        return read
    return _load_libyaml(text, shapes, strict=strict)


def _load_libyaml(text: str, shapes: list[tuple[int, int] | None] | None, *, strict: bool) -> list[Any]:
    """:func:`load_all_yaml` through libyaml: its events in one pass, else its node tree."""
    if _EVENTS:
        plain: list[tuple[int, int] | None] | None = [] if shapes is not None else None
        try:
            fast = _load_plain(text, plain, strict=strict)
        except _NotPlain:
            pass
        else:
            if shapes is not None and plain is not None:
                shapes.extend(plain)
            return fast
    loader = _Loader(text)
    try:
        docs: list[Any] = []
        while loader.check_node():
            node = loader.get_node()
            if node is None:  # pragma: no cover - check_node said there is one
                break
            if strict:
                _check_unique(node, len(docs) + 1)
            shape: tuple[int, int] | None
            try:
                doc, height, size = _construct(node, loader)
                shape = (height, size)
            except _Fallback:
                doc, shape = loader.construct_document(node), None
            docs.append(doc)
            if shapes is not None:
                shapes.append(shape)
        return docs
    finally:
        loader.dispose()


def load_yaml(text: str, *, strict: bool = False) -> Any:
    """One YAML document (None for an empty stream), as ``yaml.load(text, SafeLoader)`` gives it;
    ``strict`` as for :func:`load_all_yaml`."""
    try:
        read = load_lines(text, None)
    except NotLines:
        pass
    else:
        if len(read) <= 1:
            return read[0] if read else None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if strict:
            _check_unique(node, 1)
        try:
            return _construct(node, loader)[0]
        except _Fallback:
            return loader.construct_document(node)
    finally:
        loader.dispose()


def key_line(text: str, document: int, path: list[str | int]) -> int:
    """The line (from 1) of the key (or item) at ``path`` in the ``document``-th document (from 1)
    of a YAML stream, or 0 when the text does not have it. For error messages: it reads the
    stream's node tree again, up to that document."""
    loader = _Loader(text)
    try:
        index = 0
        while loader.check_node():
            node = loader.get_node()
            index += 1
            if index < document:
                continue
            at: Any = node
            for depth, part in enumerate(path, start=1):
                if isinstance(at, yaml.MappingNode):
                    found = [(k, v) for k, v in at.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)]
                    if not found:
                        return _line(at)
                    key, at = found[-1]
                    if depth == len(path):
                        return _line(key)
                elif isinstance(at, yaml.SequenceNode) and isinstance(part, int) and part < len(at.value):
                    at = at.value[part]
                else:
                    return _line(at)
            return _line(at)
    except yaml.YAMLError:
        return 0
    finally:
        loader.dispose()
    return 0


def dump_yaml(data: Any, *, sort_keys: bool = False) -> str:
    """``yaml.safe_dump`` with libyaml's emitter where installed."""
    out: str = yaml.dump(data, Dumper=SafeDumper, sort_keys=sort_keys)
    return out


def loads_json(text: str | bytes) -> Any:
    """``json.loads`` (orjson where installed; the standard library for what orjson refuses)."""
    if orjson is not None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()  # a key twice: the first key that repeats one before it
    for key, _value in pairs:
        if key in seen:
            raise DuplicateKeyError(key=key, line=0)
        seen.add(key)
    raise AssertionError("unreachable: fewer keys than pairs means a key twice")  # pragma: no cover


def loads_json_strict(text: str, **kwargs: Any) -> Any:
    """``json.loads`` that refuses an object with a key twice (:class:`DuplicateKeyError` with its
    line and the object's path: JSON text is YAML too, and the strict YAML reader finds them).
    ``kwargs`` go to ``json.loads`` (``parse_constant``, ...)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, **kwargs)
    except DuplicateKeyError as err:
        try:
            load_all_yaml(text, strict=True)
        except DuplicateKeyError as located:
            raise located from None
        except yaml.YAMLError:
            pass  # JSON that YAML 1.1 does not read (tabs, some escapes): the key without its line
        raise err from None


def dumps_json_pretty(data: Any) -> str:
    """Indented JSON (two spaces, keys in insertion order).

    NaN and infinities are not JSON: orjson writes them as ``null``, the fallback refuses them
    (``ValueError``). What joiner prints holds none (prices come from validated catalogs)."""
    if orjson is not None:
        try:
            return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode("utf-8")
        except TypeError:
            pass  # what orjson cannot write (e.g. integers past 64 bits): the standard library can
    return json.dumps(data, indent=2, allow_nan=False)
