"""Base model classes and the object metadata shared by every kind.

Three strictness levels:

* :class:`SpecModel`: what users write. Unknown fields are rejected so that typos are caught.
* :class:`StatusModel`: what controllers write. Unknown fields are ignored.
* :class:`ObjectMeta`: what the apiserver returns. Everything is kept (uid, managedFields, ...).

All models accept both the JSON (camelCase) names and the Python (snake_case) names and dump
with the JSON names when ``by_alias=True``.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from datetime import datetime
from typing import Any, ClassVar, get_args

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        # built on first use: a process builds the validators of the kinds it reads alone
        defer_build=True,
    )

    omit_when_empty: ClassVar[frozenset[str]] = frozenset()
    """Fields (Python names) left out of dumps when they are an empty list or dict, because
    for them empty means the same as absent. Keeps manifests as the user wrote them."""

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not self.omit_when_empty or not isinstance(data, dict):
            return data
        fields = type(self).model_fields
        keys = set(self.omit_when_empty) | {fields[name].alias or name for name in self.omit_when_empty}
        return {key: value for key, value in data.items() if not (key in keys and _is_empty(value))}


def describe_fields() -> None:
    """Give every field of every model its attribute docstring as its description, for the
    JSON schema (``api.crdgen``). Reading the docstrings parses the classes' source, a fifth of
    the time it takes to import the models, so the models are built without them and only the
    CRD generator asks for them. Idempotent."""
    models: list[type[BaseModel]] = []
    pending: list[type[BaseModel]] = [_Model]
    while pending:
        cls = pending.pop()
        models.append(cls)
        pending.extend(cls.__subclasses__())
    if _described.issuperset(models):
        return
    own = {cls: _attribute_docstrings(cls) for cls in models}
    for cls in models:
        # an inherited field keeps the docstring of the class that declares it
        docs: dict[str, str] = {}
        for base in reversed(cls.__mro__):
            docs.update(own.get(base, {}))
        for name, info in cls.model_fields.items():
            if info.description is None and name in docs:
                info.description = docs[name]
    # rebuild each model after the models its fields hold: a rebuild reuses their schemas
    order: list[type[BaseModel]] = []
    seen: set[type[BaseModel]] = set()

    def visit(cls: type[BaseModel]) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for info in cls.model_fields.values():
            for held in _models_in(info.annotation):
                visit(held)
        order.append(cls)

    for cls in models:
        visit(cls)
    for cls in order:
        cls.model_rebuild(force=True)
    _described.update(models)


def _attribute_docstrings(cls: type) -> dict[str, str]:
    """The string literal written right under each annotated field of ``cls``'s own body."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (built dynamically): no descriptions
        return {}
    tree = ast.parse(source)
    body = next((n.body for n in tree.body if isinstance(n, ast.ClassDef)), [])
    docs: dict[str, str] = {}
    for stmt, after in itertools.pairwise(body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The model classes a field annotation mentions (in unions, lists, dicts, Annotated, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [held for arg in get_args(annotation) for held in _models_in(arg)]


_described: set[type[BaseModel]] = set()
"""The models `describe_fields` has described (models imported later are described at its next call)."""


def _is_empty(value: Any) -> bool:
    return isinstance(value, dict | list) and not value


class SpecModel(_Model):
    """Base of user-written parts of an object: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class StatusModel(_Model):
    """Base of controller-written parts of an object: unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")


class OwnerReference(_Model):
    """A reference to the object that owns this one."""

    model_config = ConfigDict(extra="allow")

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(_Model):
    """Standard object metadata. Permissive: fields not declared here are kept as they are."""

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list)
    managed_fields: list[dict[str, Any]] | None = None

    omit_when_empty = frozenset({"labels", "annotations", "finalizers", "owner_references"})
