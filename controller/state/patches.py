"""The writes every controller shares, built from views: status conditions, JSON patches for
labels, taints, finalizers and owner references, and a pod's nomination. Pure: `now` is passed in;
the caller sends them.

Lists (taints, finalizers, ownerReferences) are changed with a JSON patch that first `test`s the
list it read (from the view's ``.raw``), so a concurrent writer makes the patch fail (422) instead
of being overwritten; the caller then retries from a fresh cache. Labels are added key by key,
which never clobbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from api.v1.labels import API_VERSION, FINALIZER_TERMINATION
from controller.clock import format_time
from controller.state.views import HasConditions, NodeClaimView, NodeView, Obj, TaintRef

Patch = list[Obj]
Viewed = NodeView | NodeClaimView


# --- conditions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConditionUpdate:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""


def matches(obj: HasConditions, update: ConditionUpdate) -> bool:
    """Whether the object already carries this condition with the same status, reason and message."""
    cond = obj.condition(update.type)
    return (
        cond is not None
        and cond.status == update.status
        and cond.reason == update.reason
        and cond.message == update.message
    )


def transition_time(old: Mapping[str, Any] | None, status: str, now: str) -> str:
    """A condition's lastTransitionTime: the old condition's while its status stays, else ``now``.
    The one rule every condition written by joiner follows."""
    if old is not None and old.get("status") == status and old.get("lastTransitionTime"):
        return str(old["lastTransitionTime"])
    return now


def condition(obj: Mapping[str, Any], ctype: str, *, ok: bool, reason: str, message: str, now: str) -> Obj:
    """One condition of ``obj`` to write (NodePools, NodeClasses): ``True`` or ``False`` with its
    reason and message, the transition time kept while the status stays, the generation observed."""
    old = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), None)
    status = "True" if ok else "False"
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition_time(old, status, now),
        "observedGeneration": (obj.get("metadata") or {}).get("generation", 1),
    }


def with_conditions(obj: Mapping[str, Any], updates: Iterable[ConditionUpdate], *, now: datetime) -> list[Obj]:
    """The object's conditions (JSON, from ``view.raw``) with `updates` applied; lastTransitionTime
    moves only on a status change."""
    conditions = [dict(c) for c in (obj.get("status") or {}).get("conditions") or []]
    generation = (obj.get("metadata") or {}).get("generation")
    stamp = format_time(now)
    for update in updates:
        new: Obj = {
            "type": update.type,
            "status": update.status,
            "reason": update.reason,
            "message": update.message[:32768],
            "lastTransitionTime": stamp,
        }
        if generation is not None:
            new["observedGeneration"] = generation
        for i, cond in enumerate(conditions):
            if cond.get("type") == update.type:
                new["lastTransitionTime"] = transition_time(cond, update.status, stamp)
                conditions[i] = new
                break
        else:
            conditions.append(new)
    return conditions


# the NodeClaim's lifecycle, in order, and what its status.reason says before each is set
_LIFECYCLE = (
    ("Launched", "Launching"),
    ("Registered", "Registering"),
    ("Initialized", "Initializing"),
    ("Ready", "NotReady"),
)


def why_not_ready(obj: Mapping[str, Any], conditions: Sequence[Mapping[str, Any]]) -> str:
    """A NodeClaim's ``status.reason`` (the ``Status`` column): ``Deleting`` while it is being
    deleted, else the reason of the first lifecycle condition not True (``Launching`` and so on
    while one is unset), ``Drifted`` when Ready but drifted, else ``Ready``."""
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "Deleting"
    by_type = {c.get("type"): c for c in conditions}
    for ctype, before in _LIFECYCLE:
        cond = by_type.get(ctype)
        if cond is None:
            return before
        if cond.get("status") != "True":
            return str(cond.get("reason") or before)
    drifted = by_type.get("Drifted")
    if drifted is not None and drifted.get("status") == "True":
        return "Drifted"
    return "Ready"


def claim_status(obj: Mapping[str, Any], updates: Iterable[ConditionUpdate], *, now: datetime) -> Obj:
    """The status a NodeClaim write sends: its conditions with `updates` applied (`with_conditions`)
    and the ``reason`` they make (`why_not_ready`), so the two never disagree."""
    conditions = with_conditions(obj, updates, now=now)
    return {"conditions": conditions, "reason": why_not_ready(obj, conditions)}


# --- a pod's nomination --------------------------------------------------------------------


def nomination_patch(node: str | None) -> Obj:
    """The merge patch of a pod's status subresource that sets ``status.nominatedNodeName`` to
    ``node`` (None clears it): where kube-scheduler tries the pod first. The provisioner's nominator
    and the ProvisioningRequest booker send it."""
    return {"status": {"nominatedNodeName": node}}


def toleration_patch(pod: Mapping[str, Any], taint: TaintRef) -> Patch:
    """The JSON patch of a pod's spec that adds a toleration of exactly ``taint`` (key, value and
    effect). A pending pod's tolerations may only grow (the apiserver refuses any other change to
    its spec), so the toleration is appended; a pod the cache shows without tolerations gets the
    list, which the apiserver refuses if another writer gave it one meanwhile (it would drop theirs)."""
    toleration = {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
    if (pod.get("spec") or {}).get("tolerations") is None:
        return [{"op": "add", "path": "/spec/tolerations", "value": [toleration]}]
    return [{"op": "add", "path": "/spec/tolerations/-", "value": toleration}]


# --- JSON patches ----------------------------------------------------------------------------


def escape(key: str) -> str:
    """A JSON-pointer token for a map key (``a/b`` -> ``a~1b``)."""
    return key.replace("~", "~0").replace("/", "~1")


def _get(obj: Mapping[str, Any], path: Sequence[str]) -> Any:
    cur: Any = obj
    for part in path:
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def list_patch(obj: Mapping[str, Any], path: Sequence[str], new: list[Any]) -> Patch:
    """Set the list at `path` of the JSON object to `new`, guarded by a test of its current value."""
    pointer = "/" + "/".join(escape(p) for p in path)
    current = _get(obj, path)
    if current is None:
        return [{"op": "add", "path": pointer, "value": new}]
    return [
        {"op": "test", "path": pointer, "value": current},
        {"op": "replace", "path": pointer, "value": new},
    ]


def label_patch(obj: Viewed, labels: Mapping[str, str]) -> Patch:
    """Add `labels` that are missing or different on `obj`."""
    if _get(obj.raw, ("metadata", "labels")) is None:
        return [{"op": "add", "path": "/metadata/labels", "value": dict(labels)}] if labels else []
    return [
        {"op": "add", "path": f"/metadata/labels/{escape(k)}", "value": v}
        for k, v in labels.items()
        if obj.labels.get(k) != v
    ]


def taint_patch(node: NodeView, *, add: Iterable[TaintRef] = (), remove: Iterable[tuple[str, str]] = ()) -> Patch:
    """Add taints (by key and effect) and remove `(key, effect)` pairs; [] when nothing changes."""
    current = [dict(t) for t in (node.raw.get("spec") or {}).get("taints") or []]
    drop = set(remove)
    new = [t for t in current if (t.get("key"), t.get("effect")) not in drop]
    have = {(t.get("key"), t.get("effect")) for t in new}
    for taint in add:
        if taint.ident not in have:
            new.append(taint.as_dict())
            have.add(taint.ident)
    if new == current:
        return []
    return list_patch(node.raw, ("spec", "taints"), new)


def finalizer_patch(obj: Viewed, *, add: bool, finalizer: str = FINALIZER_TERMINATION) -> Patch:
    if add == (finalizer in obj.finalizers):
        return []
    current = list(obj.finalizers)
    new = [*current, finalizer] if add else [f for f in current if f != finalizer]
    return list_patch(obj.raw, ("metadata", "finalizers"), new)


def owner_patch(node: NodeView, claim: NodeClaimView) -> Patch:
    """Make the NodeClaim an owner of its Node (so the Node goes if the NodeClaim is force-removed)."""
    if not claim.uid or claim.uid in node.owner_uids:
        return []
    current = list((node.raw.get("metadata") or {}).get("ownerReferences") or [])
    ref = {
        "apiVersion": API_VERSION,
        "kind": "NodeClaim",
        "name": claim.name,
        "uid": claim.uid,
        "blockOwnerDeletion": True,
    }
    return list_patch(node.raw, ("metadata", "ownerReferences"), [*current, ref])
