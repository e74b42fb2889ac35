"""Turning dicts (manifests, apiserver objects) into models, and errors into words.

    obj = parse_object(yaml.safe_load(text))   # NodePool, NodeClaim or KWOKNodeClass by kind
    pool = validate(NodePool, data)            # a known kind
    manifest = to_manifest(pool)               # JSON-ready dict with camelCase names

Both raise :class:`InvalidObjectError`, whose message lists one ``field.path: problem`` per line,
e.g. ``spec.template.spec.requirements[0].values: ...``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar

from pydantic import BaseModel, ValidationError

from api.v1.labels import API_VERSION

if TYPE_CHECKING:
    from api.v1.kwoknodeclass import KWOKNodeClass
    from api.v1.nodeclaim import NodeClaim
    from api.v1.nodepool import NodePool

JoinerObject: TypeAlias = "NodePool | NodeClaim | KWOKNodeClass"
_KindModel: TypeAlias = "type[NodePool] | type[NodeClaim] | type[KWOKNodeClass]"


class _Kinds(Mapping[str, _KindModel]):
    """Kind -> model class, each model's module imported when its kind is first looked up: a
    process that reads one kind (``joiner plan`` reads NodePools) builds no other model class."""

    _modules: Final = {
        "NodePool": "api.v1.nodepool",
        "NodeClaim": "api.v1.nodeclaim",
        "KWOKNodeClass": "api.v1.kwoknodeclass",
    }

    def __getitem__(self, kind: str) -> _KindModel:
        model: _KindModel = getattr(importlib.import_module(self._modules[kind]), kind)
        return model

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


KINDS: Final[Mapping[str, _KindModel]] = _Kinds()

ModelT = TypeVar("ModelT", bound=BaseModel)

_MESSAGES: Final = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field",
}


@dataclass(frozen=True)
class FieldError:
    """One problem with one field: ``path`` is the JSON path, e.g. ``spec.weight``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def field_path(loc: Sequence[int | str]) -> str:
    """``("spec", "requirements", 0, "key")`` -> ``spec.requirements[0].key``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def field_errors(error: ValidationError) -> list[FieldError]:
    """The errors of a pydantic ``ValidationError`` as (field path, message) pairs."""
    out: list[FieldError] = []
    for detail in error.errors(include_url=False):
        message = _MESSAGES.get(detail["type"], detail["msg"])
        if detail["type"] == "value_error":
            message = str(detail.get("ctx", {}).get("error", message))
        out.append(FieldError(path=field_path(detail["loc"]), message=message))
    return out


def format_validation_error(error: ValidationError) -> str:
    """One ``path: message`` line per problem."""
    return "\n".join(str(item) for item in field_errors(error))


class InvalidObjectError(ValueError):
    """An object failed validation; ``errors`` says which fields and why."""

    def __init__(self, *, kind: str, name: str, errors: Sequence[FieldError]) -> None:
        self.kind = kind
        self.name = name
        self.errors = list(errors)
        what = f"{kind} {name!r}" if name else kind
        super().__init__(f"{what} is invalid:\n" + "\n".join(f"  {item}" for item in self.errors))


def _name_of(data: Mapping[str, Any]) -> str:
    metadata = data.get("metadata")
    if isinstance(metadata, Mapping):
        name = metadata.get("name")
        if isinstance(name, str):
            return name
    return ""


def validate(model: type[ModelT], data: Mapping[str, Any]) -> ModelT:
    """Validate ``data`` (camelCase or snake_case keys) into ``model``.

    Raises :class:`InvalidObjectError` naming every bad field.
    """
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise InvalidObjectError(kind=model.__name__, name=_name_of(data), errors=field_errors(error)) from error


def parse_object(data: Mapping[str, Any]) -> JoinerObject:
    """Validate a manifest of any joiner kind, chosen by its ``kind`` field.

    Raises :class:`InvalidObjectError` for an unknown kind or apiVersion or any invalid field.
    """
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise InvalidObjectError(
            kind=str(kind),
            name=_name_of(data),
            errors=[FieldError(path="kind", message=f"must be one of {', '.join(KINDS)}, got {kind!r}")],
        )
    if data.get("apiVersion") != API_VERSION:
        raise InvalidObjectError(
            kind=kind,
            name=_name_of(data),
            errors=[FieldError(path="apiVersion", message=f"must be {API_VERSION}, got {data.get('apiVersion')!r}")],
        )
    return validate(KINDS[kind], data)


def to_manifest(obj: BaseModel) -> dict[str, Any]:
    """A JSON-ready dict with the API's camelCase names and unset optional fields left out."""
    dumped: dict[str, Any] = obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped
