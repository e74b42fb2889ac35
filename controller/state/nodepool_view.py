"""The NodePool view (:class:`NodePoolView`), apart from the other views of ``controller.state.views``
(which re-exports it): ``joiner plan`` makes its NodePool templates with it and needs none of the
others. Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from api.v1.nodepool import NodePool
from api.v1.validation import InvalidObjectError, validate
from controller.scheduling import kubeconv, kubeconv_nodes
from controller.scheduling.instancetypes import InstanceType
from controller.scheduling.model import ExistingNode, NodePoolTemplate

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class NodePoolView:
    """A NodePool validated once per watch event by the API model (the rules the CRD enforces):
    ``model`` when valid, else ``invalid`` names every bad field. ``raw`` is the manifest as
    written, for what still reads it whole (its template hash, its spec.gang, status writes)."""

    raw: Obj
    name: str
    deleting: bool
    model: NodePool | None
    invalid: InvalidObjectError | None

    @staticmethod
    def of(obj: Obj) -> NodePoolView:
        meta = obj.get("metadata") or {}
        model: NodePool | None = None
        invalid: InvalidObjectError | None = None
        try:
            model = validate(NodePool, obj)
        except InvalidObjectError as err:
            invalid = err
        return NodePoolView(
            raw=obj,
            name=str(meta.get("name") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            model=model,
            invalid=invalid,
        )

    def template(self, types: Sequence[InstanceType], existing: Sequence[ExistingNode]) -> NodePoolTemplate:
        """The NodePool as the solver sees it, its usage counted from ``existing``; raises
        :class:`~controller.scheduling.kubeconv.ConversionError` for one that is invalid or does not
        convert. (Here rather than with the cache's readers in ``controller.state.inputs``: the
        offline ``joiner plan`` makes its templates with it and imports no cache, logging or asyncio.)"""
        usage = kubeconv_nodes.pool_usage(self.name, existing)
        if self.model is None:
            errors = self.invalid.errors if self.invalid is not None else []
            raise kubeconv.ConversionError(f"NodePool {self.name}: " + "; ".join(str(e) for e in errors))
        return kubeconv_nodes.nodepool_template(self.model, types, usage=usage)
