"""Pure helpers on Node and NodeClaim dicts: readiness, taints, and the JSON patches joiner sends.

Lists (taints, finalizers, ownerReferences) are changed with a JSON patch that first `test`s the
list it read, so a concurrent writer makes the patch fail (422) instead of being overwritten; the
caller then retries from a fresh cache. Labels are added key by key, which never clobbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from api.v1.labels import (
    API_VERSION,
    FINALIZER_TERMINATION,
    TAINT_UNREGISTERED,
    TAINT_UNREGISTERED_EFFECT,
)
from controller.scheduling.quantity import QuantityError, parse_quantity

Obj = dict[str, Any]
Patch = list[Obj]


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
    """Set the list at `path` to `new`, guarded by a test of its current value."""
    pointer = "/" + "/".join(escape(p) for p in path)
    current = _get(obj, path)
    if current is None:
        return [{"op": "add", "path": pointer, "value": new}]
    return [
        {"op": "test", "path": pointer, "value": current},
        {"op": "replace", "path": pointer, "value": new},
    ]


def label_patch(obj: Mapping[str, Any], labels: Mapping[str, str]) -> Patch:
    """Add `labels` that are missing or different on `obj`."""
    current = _get(obj, ("metadata", "labels"))
    if current is None:
        return [{"op": "add", "path": "/metadata/labels", "value": dict(labels)}] if labels else []
    return [
        {"op": "add", "path": f"/metadata/labels/{escape(k)}", "value": v}
        for k, v in labels.items()
        if current.get(k) != v
    ]


# --- taints -----------------------------------------------------------------------------------


def taints_of(node: Mapping[str, Any]) -> list[Obj]:
    return [dict(t) for t in (node.get("spec") or {}).get("taints") or []]


def has_taint(node: Mapping[str, Any], key: str, effect: str | None = None) -> bool:
    return any(t.get("key") == key and (effect is None or t.get("effect") == effect) for t in taints_of(node))


def taint_patch(node: Mapping[str, Any], *, add: Iterable[Obj] = (), remove: Iterable[tuple[str, str]] = ()) -> Patch:
    """Add taints (by key and effect) and remove `(key, effect)` pairs; [] when nothing changes."""
    current = taints_of(node)
    drop = set(remove)
    new = [t for t in current if (t.get("key"), t.get("effect")) not in drop]
    have = {(t.get("key"), t.get("effect")) for t in new}
    for taint in add:
        if (taint.get("key"), taint.get("effect")) not in have:
            new.append(dict(taint))
            have.add((taint.get("key"), taint.get("effect")))
    if new == current:
        return []
    return list_patch(node, ("spec", "taints"), new)


# --- finalizers and owner references ------------------------------------------------------------


def has_finalizer(obj: Mapping[str, Any], finalizer: str = FINALIZER_TERMINATION) -> bool:
    return finalizer in ((obj.get("metadata") or {}).get("finalizers") or [])


def finalizer_patch(obj: Mapping[str, Any], *, add: bool, finalizer: str = FINALIZER_TERMINATION) -> Patch:
    current = list((obj.get("metadata") or {}).get("finalizers") or [])
    if add == (finalizer in current):
        return []
    new = [*current, finalizer] if add else [f for f in current if f != finalizer]
    return list_patch(obj, ("metadata", "finalizers"), new)


def owner_patch(node: Mapping[str, Any], claim: Mapping[str, Any]) -> Patch:
    """Make the NodeClaim an owner of its Node (so the Node goes if the NodeClaim is force-removed)."""
    meta = claim.get("metadata") or {}
    uid = meta.get("uid")
    current = list((node.get("metadata") or {}).get("ownerReferences") or [])
    if not uid or any(ref.get("uid") == uid for ref in current):
        return []
    ref = {
        "apiVersion": API_VERSION,
        "kind": "NodeClaim",
        "name": meta["name"],
        "uid": uid,
        "blockOwnerDeletion": True,
    }
    return list_patch(node, ("metadata", "ownerReferences"), [*current, ref])


def registration_patch(claim: Mapping[str, Any], node: Mapping[str, Any]) -> Patch:
    """What registering a Node to its NodeClaim changes on the Node: the NodeClaim's labels, the
    termination finalizer, the owner reference, and no more `joiner.sh/unregistered` taint."""
    labels = (claim.get("metadata") or {}).get("labels") or {}
    node_labels = (node.get("metadata") or {}).get("labels") or {}
    missing = {k: v for k, v in labels.items() if k not in node_labels}
    return [
        *label_patch(node, missing),
        *finalizer_patch(node, add=True),
        *owner_patch(node, claim),
        # and NoExecute, the effect earlier builds of joiner gave it
        *taint_patch(node, remove=[(TAINT_UNREGISTERED, TAINT_UNREGISTERED_EFFECT), (TAINT_UNREGISTERED, "NoExecute")]),
    ]


# --- readiness and initialization ---------------------------------------------------------------


def node_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _quantity(value: Any) -> int:
    try:
        return parse_quantity(value)
    except (QuantityError, ValueError, TypeError):
        return 0


def initialization_blockers(claim: Mapping[str, Any], node: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Why the Node is not initialized yet, as (reason, message) pairs; [] when it is.

    Initialized means: Ready, none of the NodeClaim's startup taints left on the Node, and every
    resource the NodeClaim requested (a GPU, say) registered in the Node's allocatable.
    """
    out: list[tuple[str, str]] = []
    name = (node.get("metadata") or {}).get("name")
    if not node_ready(node):
        out.append(("NodeNotReady", f"Node {name} is not Ready"))
    spec = claim.get("spec") or {}
    startup = {(t.get("key"), t.get("effect")) for t in spec.get("startupTaints") or []}
    left = sorted(
        f"{t.get('key')}:{t.get('effect')}" for t in taints_of(node) if (t.get("key"), t.get("effect")) in startup
    )
    if left:
        out.append(("StartupTaintsPresent", f"startup taints still on Node {name}: {', '.join(left)}"))
    requests = (spec.get("resources") or {}).get("requests") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    missing = sorted(
        res for res, quantity in requests.items() if _quantity(quantity) > 0 and _quantity(allocatable.get(res, 0)) <= 0
    )
    if missing:
        detail = ", ".join(f"{res} (requested {requests[res]})" for res in missing)
        out.append(("ResourceNotRegistered", f"Node {name} has none of {detail} in its allocatable"))
    return out
