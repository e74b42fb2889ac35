"""What makes a node off-limits to voluntary disruption. Pure: plain dicts in, sentences out.

A node is not disrupted (for any reason: emptiness, consolidation, drift, expiry) while:

* the Node or its NodeClaim is annotated ``joiner.sh/do-not-disrupt: "true"`` (or Karpenter's
  ``karpenter.sh/do-not-disrupt``);
* one of its pods is annotated so;
* one of its pods is covered by a PodDisruptionBudget that allows no disruption right now
  (``status.disruptionsAllowed`` is 0, or the PDB controller has not computed it yet);
* it runs pods of a gang, or its NodeClaim belongs to a gang that is being admitted or running
  (``GangAdmitted`` absent or True; False means the gang finished): taking one node out of a
  running gang stops the whole gang.

Consolidation (moving pods to save money) is further refused for nodes running pods that no
controller would re-create (no ownerReferences): evicting them would delete them for good.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from api.v1.conditions import GANG_ADMITTED
from api.v1.labels import ANNOTATION_DO_NOT_DISRUPT, LABEL_GANG
from controller.scheduling.kubeconv import gang_of
from controller.scheduling.requirements import RequirementError, Requirements, label_selector
from controller.state.views import PodView

Obj = Mapping[str, Any]

DO_NOT_DISRUPT_ANNOTATIONS: Final = (ANNOTATION_DO_NOT_DISRUPT, "karpenter.sh/do-not-disrupt")


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata") or {}
    return meta if isinstance(meta, Mapping) else {}


def do_not_disrupt(obj: Obj) -> bool:
    """Whether a pod, Node or NodeClaim carries ``do-not-disrupt: "true"`` (joiner's or Karpenter's key)."""
    annotations = _meta(obj).get("annotations") or {}
    return any(str(annotations.get(key, "")).lower() == "true" for key in DO_NOT_DISRUPT_ANNOTATIONS)


def pod_key(pod: Obj) -> str:
    meta = _meta(pod)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def is_leaving(pod: Obj) -> bool:
    """Being deleted, or finished: it needs no new place."""
    return bool(_meta(pod).get("deletionTimestamp")) or (pod.get("status") or {}).get("phase") in (
        "Succeeded",
        "Failed",
    )


def movable_pods(pods: Iterable[Obj]) -> list[Obj]:
    """The pods that disrupting their node would evict (what termination drains), minus those leaving."""
    return [p for p in pods if PodView.of(dict(p)).is_drainable and not is_leaving(p)]


def _pdb_selector(pdb: Obj) -> Requirements | None:
    """The PDB's selector; None matches no pod (a null selector), an empty one every pod of the namespace."""
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return None
    try:
        return label_selector(selector.get("matchLabels"), selector.get("matchExpressions") or ())
    except (RequirementError, KeyError, TypeError):
        return None


def pdb_allowed(pdb: Obj) -> int:
    """Disruptions the PDB allows now; 0 while its status is missing or stale."""
    status = pdb.get("status") or {}
    generation = _meta(pdb).get("generation")
    observed = status.get("observedGeneration")
    stale = generation is not None and observed is not None and observed < generation
    if "disruptionsAllowed" not in status or stale:
        return 0
    try:
        return int(status["disruptionsAllowed"])
    except (TypeError, ValueError):
        return 0


def blocking_pdbs(pods: Iterable[Obj], pdbs: Iterable[Obj]) -> list[str]:
    """``pod (by PodDisruptionBudget ns/name)`` for every movable pod whose eviction a PDB forbids now."""
    by_namespace: dict[str, list[tuple[Obj, Requirements]]] = {}
    for pdb in pdbs:
        selector = _pdb_selector(pdb)
        if selector is None:
            continue
        ns = str(_meta(pdb).get("namespace") or "default")
        by_namespace.setdefault(ns, []).append((pdb, selector))
    out: list[str] = []
    for pod in movable_pods(pods):
        meta = _meta(pod)
        ns = str(meta.get("namespace") or "default")
        labels = meta.get("labels") or {}
        for pdb, selector in by_namespace.get(ns, ()):
            if selector.matches(labels) and pdb_allowed(pdb) <= 0:
                out.append(f"{pod_key(pod)} (PodDisruptionBudget {ns}/{_meta(pdb).get('name')})")
                break
    return out


def _condition(obj: Obj, ctype: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def gang_blocker(*, claim: Obj, node: Obj | None, pods: Iterable[Obj]) -> str | None:
    """Why the node belongs to a gang that must not be taken apart, or None."""
    for pod in pods:
        if is_leaving(pod):
            continue
        gang = gang_of(pod)
        if gang is not None:
            return f"it runs pod {pod_key(pod)} of gang {gang}; disrupting it would stop the whole gang"
    gang_label = (_meta(claim).get("labels") or {}).get(LABEL_GANG)
    if not gang_label and node is not None:
        gang_label = (_meta(node).get("labels") or {}).get(LABEL_GANG)
    if gang_label:
        admitted = _condition(claim, GANG_ADMITTED)
        if admitted is None:
            return f"it belongs to gang {gang_label}, which is still being admitted"
        if admitted.get("status") == "True":
            return f"it belongs to gang {gang_label}, which is running"
    return None  # GangAdmitted=False: the gang finished, the node is an ordinary one now


def safety_blockers(*, claim: Obj, node: Obj | None, pods: Iterable[Obj], pdbs: Iterable[Obj]) -> list[str]:
    """Every reason the node may not be disrupted voluntarily right now (empty: it may)."""
    pods = list(pods)
    out: list[str] = []
    if do_not_disrupt(claim):
        out.append(f"NodeClaim is annotated {ANNOTATION_DO_NOT_DISRUPT}")
    if node is not None and do_not_disrupt(node):
        out.append(f"Node is annotated {ANNOTATION_DO_NOT_DISRUPT}")
    protected = [pod_key(p) for p in pods if not is_leaving(p) and do_not_disrupt(p)]
    if protected:
        shown = ", ".join(protected[:3]) + (" ..." if len(protected) > 3 else "")
        out.append(f"pod {shown} is annotated {ANNOTATION_DO_NOT_DISRUPT}")
    pdb = blocking_pdbs(pods, pdbs)
    if pdb:
        shown = ", ".join(pdb[:3]) + (" ..." if len(pdb) > 3 else "")
        out.append(f"eviction of {shown} is not allowed by its PodDisruptionBudget right now")
    gang = gang_blocker(claim=claim, node=node, pods=pods)
    if gang is not None:
        out.append(gang)
    return out


def unowned_pods(pods: Iterable[Obj]) -> list[str]:
    """Movable pods no controller owns: evicting them deletes them for good."""
    return [pod_key(p) for p in movable_pods(pods) if not _meta(p).get("ownerReferences")]
