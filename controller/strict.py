"""Strict decoding of what a user hands joiner, as ``kubectl apply`` decodes it: a field the kind
does not have is refused (``unknown field "spec.containers[0].resourcs"``) rather than ignored.

The field names of the Kubernetes kinds ``joiner plan`` reads come from ``kube_fields.json``
(written by ``hack/gen-kube-fields.py`` from the kubernetes_asyncio client's models); maps whose
keys are the user's (``metadata.labels``, ``metadata.annotations``, ``nodeSelector``, resource
lists, ConfigMap ``data``) are not checked, nor fields the API types as free objects. joiner's own
kinds are checked by their models (``api/v1``). Duplicate keys are the YAML reader's job
(``controller.serialization``, ``strict=True``). Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, Final

_FIELDS_RESOURCE: Final = "kube_fields.json"
_PART: Final = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@cache
def _schema() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    data = json.loads(resources.files("controller").joinpath(_FIELDS_RESOURCE).read_text(encoding="utf-8"))
    return data["kinds"], data["types"]


_OBJECT, _LIST, _MAP = 0, 1, 2


@cache
def _nested() -> dict[str, tuple[frozenset[str], dict[str, tuple[int, str]]]]:
    """Per type: its field names, and its fields that hold typed objects (object, list or map of
    them) with how they hold them; fields of no shape (scalars, free objects) are not walked."""
    out: dict[str, tuple[frozenset[str], dict[str, tuple[int, str]]]] = {}
    for type_name, fields in _schema()[1].items():
        nested: dict[str, tuple[int, str]] = {}
        for key, shape in fields.items():
            if not shape:
                continue
            if shape.startswith("list:"):
                nested[key] = (_LIST, shape[5:])
            elif shape.startswith("map:"):
                nested[key] = (_MAP, shape[4:])
            else:
                nested[key] = (_OBJECT, shape)
        out[type_name] = (frozenset(fields), nested)
    return out


def _all_known(obj: Mapping[str, Any], root: str) -> bool:
    """Whether every field of ``obj`` (of type ``root``), at every depth, is one its type has: the
    common case, decided with a set comparison per object and no walk of its scalar fields."""
    plan = _nested()
    stack: list[tuple[Mapping[str, Any], str]] = [(obj, root)]
    while stack:
        value, type_name = stack.pop()
        known, nested = plan[type_name]
        keys = value.keys()
        if not keys <= known:
            return False
        # (a dict is a Mapping: checked by its type first, without the ABC's slower check)
        for key in keys & nested.keys() if len(keys) > len(nested) else nested.keys() & keys:
            item = value[key]
            if item is None:
                continue
            form, inner = nested[key]
            if form == _OBJECT:
                if type(item) is dict or isinstance(item, Mapping):
                    stack.append((item, inner))
            elif form == _LIST:
                if isinstance(item, list):
                    for v in item:
                        if type(v) is dict or isinstance(v, Mapping):
                            stack.append((v, inner))
            elif type(item) is dict or isinstance(item, Mapping):
                for v in item.values():
                    if type(v) is dict or isinstance(v, Mapping):
                        stack.append((v, inner))
    return True


def checked_kinds() -> frozenset[str]:
    """The Kubernetes kinds whose fields are checked."""
    return frozenset(_schema()[0])


def path_text(parts: list[str | int]) -> str:
    """``["spec", "containers", 0, "resourcs"]`` -> ``spec.containers[0].resourcs``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def path_parts(text: str) -> list[str | int]:
    """The inverse of :func:`path_text` (keys holding dots or brackets do not round-trip)."""
    return [int(index) if index else name for name, index in _PART.findall(text)]


def unknown_field(obj: Mapping[str, Any]) -> list[str | int] | None:
    """The path of the first field (in document order) that ``obj``'s kind does not have, or None
    (also for kinds not checked, and where a value has the wrong type: the readers report that)."""
    kinds, types = _schema()
    root = kinds.get(str(obj.get("kind")))
    if root is None or _all_known(obj, root):
        return None
    # some field is unknown: the walk in document order finds the first
    # paths are linked (parent, key) pairs, made into a list only for the error
    Link = tuple[Any, str | int] | None
    stack: list[tuple[Any, str, Link]] = [(obj, root, None)]
    while stack:
        value, type_name, at = stack.pop()
        if not isinstance(value, Mapping):
            continue
        fields = types[type_name]
        children: list[tuple[Any, str, Link]] = []
        for key, item in value.items():
            shape = fields.get(key) if isinstance(key, str) else None
            if shape is None:
                return _unlink((at, str(key)))
            if not shape or item is None:
                continue
            here = (at, key)
            if shape[0] == "l" and shape.startswith("list:"):
                if isinstance(item, list):
                    inner = shape[5:]
                    children.extend((v, inner, (here, i)) for i, v in enumerate(item) if isinstance(v, Mapping))
            elif shape[0] == "m" and shape.startswith("map:"):
                if isinstance(item, Mapping):
                    inner = shape[4:]
                    children.extend((v, inner, (here, str(k))) for k, v in item.items() if isinstance(v, Mapping))
            else:
                children.append((item, shape, here))
        stack.extend(reversed(children))
    return None


def _unlink(link: tuple[Any, str | int] | None) -> list[str | int]:
    out: list[str | int] = []
    while link is not None:
        link, key = link
        out.append(key)
    out.reverse()
    return out
